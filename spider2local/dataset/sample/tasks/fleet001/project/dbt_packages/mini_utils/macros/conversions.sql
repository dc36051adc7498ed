{% macro cents_to_dollars(column_name, scale=2) -%}
    cast({{ column_name }} / 100 as decimal(16, {{ scale }}))
{%- endmacro %}

{% macro meters_to_km(column_name, scale=2) -%}
    round({{ column_name }} / 1000.0, {{ scale }})
{%- endmacro %}

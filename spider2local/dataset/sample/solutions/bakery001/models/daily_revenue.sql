select
    order_date,
    count(distinct order_id) as order_count,
    sum(quantity) as units_sold,
    sum(line_total) as revenue,
    round(sum(line_total) / count(distinct order_id), 2) as avg_order_value
from {{ ref('stg_order_items') }}
group by order_date

with lines as (
    select * from {{ ref('stg_order_items') }}
)

select
    p.product_id,
    p.product_name,
    p.category,
    coalesce(sum(l.quantity), 0) as units_sold,
    count(distinct l.order_id) as order_count,
    coalesce(sum(l.line_total), 0) as revenue
from {{ source('bakery', 'products') }} as p
left join lines as l on l.product_id = p.product_id
group by p.product_id, p.product_name, p.category

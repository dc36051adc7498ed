select
    i.order_id,
    o.order_date,
    o.channel,
    i.product_id,
    p.product_name,
    p.category,
    i.quantity,
    p.unit_price,
    i.quantity * p.unit_price as line_total
from {{ source('bakery', 'order_items') }} as i
join {{ source('bakery', 'orders') }} as o on o.order_id = i.order_id
join {{ source('bakery', 'products') }} as p on p.product_id = i.product_id

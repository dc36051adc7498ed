-- Gold tables of bakery001, written as plain SQL (no dbt) and run on a copy of the start database.
CREATE TABLE product_sales AS
SELECT
    p.product_id,
    p.product_name,
    p.category,
    coalesce(sum(i.quantity), 0) AS units_sold,
    count(DISTINCT i.order_id) AS order_count,
    coalesce(sum(i.quantity * p.unit_price), 0) AS revenue
FROM products AS p
LEFT JOIN order_items AS i ON i.product_id = p.product_id
GROUP BY p.product_id, p.product_name, p.category
ORDER BY p.product_id;

CREATE TABLE daily_revenue AS
SELECT
    o.order_date,
    count(DISTINCT o.order_id) AS order_count,
    sum(i.quantity) AS units_sold,
    sum(i.quantity * p.unit_price) AS revenue,
    round(sum(i.quantity * p.unit_price) / count(DISTINCT o.order_id), 2) AS avg_order_value
FROM orders AS o
JOIN order_items AS i ON i.order_id = o.order_id
JOIN products AS p ON p.product_id = i.product_id
GROUP BY o.order_date
ORDER BY o.order_date;

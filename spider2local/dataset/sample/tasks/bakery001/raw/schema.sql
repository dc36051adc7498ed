-- Raw source tables of the bakery start database; each is filled from raw/<table>.csv.
CREATE TABLE products (
    product_id INTEGER,
    product_name VARCHAR,
    category VARCHAR,
    unit_price DECIMAL(6, 2)
);
CREATE TABLE orders (
    order_id INTEGER,
    customer_name VARCHAR,
    order_date DATE,
    channel VARCHAR
);
CREATE TABLE order_items (
    order_id INTEGER,
    product_id INTEGER,
    quantity INTEGER
);

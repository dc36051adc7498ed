-- Gold tables of gym001, written as plain SQL (no dbt) and run on a copy of the start database.
-- "Today" is the fixed date 2024-08-27, written as a literal: never current_date here.
CREATE TABLE dim_dates AS
SELECT
    cast(range AS DATE) AS date_day,
    extract(year FROM cast(range AS DATE)) AS year,
    extract(month FROM cast(range AS DATE)) AS month,
    isodow(cast(range AS DATE)) AS day_of_week,
    isodow(cast(range AS DATE)) >= 6 AS is_weekend
FROM range(DATE '2024-01-01', DATE '2024-08-28', INTERVAL 1 DAY)
ORDER BY date_day;

CREATE TABLE membership_status AS
SELECT
    m.membership_id,
    m.member_name,
    p.plan_name,
    p.monthly_fee,
    m.start_date,
    m.end_date,
    DATE '2024-08-27' - m.start_date AS days_since_start,
    m.start_date <= DATE '2024-08-27'
        AND (m.end_date IS NULL OR m.end_date >= DATE '2024-08-27') AS is_active
FROM memberships AS m
JOIN plans AS p ON p.plan_id = m.plan_id
ORDER BY m.membership_id;

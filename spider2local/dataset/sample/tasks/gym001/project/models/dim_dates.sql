-- One row per calendar day from the gym's opening up to and including today.
with days as (
    select cast(range as date) as date_day
    from range(date '2024-01-01', current_date + interval 1 day, interval 1 day)
)

select
    date_day,
    extract(year from date_day) as year,
    extract(month from date_day) as month,
    isodow(date_day) as day_of_week,
    isodow(date_day) >= 6 as is_weekend
from days

with totals as (
    select
        vehicle_id,
        count(*) as trip_count,
        sum(distance_km) as total_km,
        sum(fare_dollars) as total_fare,
        round(avg(duration_minutes), 1) as avg_trip_minutes
    from {{ ref('stg_trips') }}
    group by vehicle_id
)

select
    v.vehicle_id,
    v.model,
    v.depot,
    coalesce(t.trip_count, 0) as trip_count,
    coalesce(t.total_km, 0) as total_km,
    coalesce(t.total_fare, 0) as total_fare,
    round({{ mini_utils.safe_divide('coalesce(t.total_fare, 0)', 'coalesce(t.total_km, 0)') }}, 2)
        as fare_per_km,
    t.avg_trip_minutes
from {{ source('fleet', 'vehicles') }} as v
left join totals as t on t.vehicle_id = v.vehicle_id

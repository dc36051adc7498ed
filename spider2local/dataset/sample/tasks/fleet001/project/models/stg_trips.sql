select
    trip_id,
    vehicle_id,
    started_at,
    ended_at,
    date_diff('minute', started_at, ended_at) as duration_minutes,
    {{ mini_utils.meters_to_km('distance_m') }} as distance_km,
    {{ mini_utils.cents_to_dollars('fare_cents') }} as fare_dollars
from {{ source('fleet', 'trips') }}

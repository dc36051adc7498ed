-- Gold table of fleet001, written as plain SQL (no dbt) and run on a copy of the start database.
-- The expressions spell out what the mini_utils macros expand to.
CREATE TEMP VIEW trip_facts AS
SELECT
    vehicle_id,
    date_diff('minute', started_at, ended_at) AS duration_minutes,
    round(distance_m / 1000.0, 2) AS distance_km,
    cast(fare_cents / 100 AS DECIMAL(16, 2)) AS fare_dollars
FROM trips;

CREATE TABLE vehicle_performance AS
SELECT
    v.vehicle_id,
    v.model,
    v.depot,
    count(t.vehicle_id) AS trip_count,
    coalesce(sum(t.distance_km), 0) AS total_km,
    coalesce(sum(t.fare_dollars), 0) AS total_fare,
    round(CASE WHEN coalesce(sum(t.distance_km), 0) = 0 THEN NULL
               ELSE coalesce(sum(t.fare_dollars), 0) / coalesce(sum(t.distance_km), 0) END,
          2) AS fare_per_km,
    round(avg(t.duration_minutes), 1) AS avg_trip_minutes
FROM vehicles AS v
LEFT JOIN trip_facts AS t ON t.vehicle_id = v.vehicle_id
GROUP BY v.vehicle_id, v.model, v.depot
ORDER BY v.vehicle_id;

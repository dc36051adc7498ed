-- Raw source tables of the fleet start database; each is filled from raw/<table>.csv.
CREATE TABLE vehicles (
    vehicle_id VARCHAR,
    model VARCHAR,
    depot VARCHAR,
    in_service_since DATE
);
CREATE TABLE trips (
    trip_id INTEGER,
    vehicle_id VARCHAR,
    started_at TIMESTAMP,
    ended_at TIMESTAMP,
    distance_m INTEGER,
    fare_cents INTEGER
);

-- Raw source tables of the gym start database; each is filled from raw/<table>.csv.
CREATE TABLE plans (
    plan_id INTEGER,
    plan_name VARCHAR,
    monthly_fee DECIMAL(6, 2)
);
CREATE TABLE memberships (
    membership_id INTEGER,
    member_name VARCHAR,
    plan_id INTEGER,
    start_date DATE,
    end_date DATE
);

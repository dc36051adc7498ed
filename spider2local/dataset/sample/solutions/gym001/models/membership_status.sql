select
    m.membership_id,
    m.member_name,
    p.plan_name,
    p.monthly_fee,
    m.start_date,
    m.end_date,
    current_date - m.start_date as days_since_start,
    m.start_date <= current_date
        and (m.end_date is null or m.end_date >= current_date) as is_active
from {{ source('gym', 'memberships') }} as m
join {{ source('gym', 'plans') }} as p on p.plan_id = m.plan_id

with stats as (
    select
        patron_id,
        count(*) as total_loans,
        count(*) filter (where not is_returned) as open_loans,
        count(*) filter (where is_late) as late_returns,
        min(loaned_on) as first_loan_on,
        max(loaned_on) as last_loan_on
    from {{ ref('stg_loans') }}
    group by patron_id
)

select
    p.patron_id,
    p.patron_name,
    p.branch,
    coalesce(s.total_loans, 0) as total_loans,
    coalesce(s.open_loans, 0) as open_loans,
    coalesce(s.late_returns, 0) as late_returns,
    s.first_loan_on,
    s.last_loan_on
from {{ source('library', 'patrons') }} as p
left join stats as s on s.patron_id = p.patron_id

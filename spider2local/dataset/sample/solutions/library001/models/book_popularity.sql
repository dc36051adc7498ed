with stats as (
    select
        book_id,
        count(*) as loan_count,
        count(*) filter (where is_late) as late_returns,
        round(avg(loan_days), 1) as avg_loan_days
    from {{ ref('stg_loans') }}
    group by book_id
)

select
    b.book_id,
    b.title,
    b.author,
    b.genre,
    coalesce(s.loan_count, 0) as loan_count,
    coalesce(s.late_returns, 0) as late_returns,
    s.avg_loan_days,
    dense_rank() over (order by coalesce(s.loan_count, 0) desc) as popularity_rank
from {{ source('library', 'books') }} as b
left join stats as s on s.book_id = b.book_id

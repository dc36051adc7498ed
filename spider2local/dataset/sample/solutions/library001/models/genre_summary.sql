select
    b.genre,
    count(*) as loan_count,
    count(distinct l.patron_id) as distinct_patrons,
    round(count(*) filter (where l.is_late) / count(*), 2) as late_rate
from {{ ref('stg_loans') }} as l
join {{ source('library', 'books') }} as b on b.book_id = l.book_id
group by b.genre
order by loan_count desc, b.genre

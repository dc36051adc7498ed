select
    loan_id,
    book_id,
    patron_id,
    loaned_on,
    due_on,
    returned_on,
    returned_on - loaned_on as loan_days,
    returned_on is not null as is_returned,
    coalesce(returned_on > due_on, false) as is_late
from {{ source('library', 'loans') }}

select
    listing_id,
    cast(date_trunc('month', review_date) as date) as review_month,
    review_sentiment,
    count(*) as review_totals
from {{ ref('src_reviews') }}
group by 1, 2, 3

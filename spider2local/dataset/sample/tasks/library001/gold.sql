-- Gold tables of library001, written as plain SQL (no dbt) and run on a copy of the start
-- database. genre_summary is graded in its row order, so its ORDER BY is part of the answer.
CREATE TEMP VIEW loan_facts AS
SELECT
    l.*,
    l.returned_on - l.loaned_on AS loan_days,
    coalesce(l.returned_on > l.due_on, false) AS is_late
FROM loans AS l;

CREATE TABLE book_popularity AS
SELECT
    b.book_id,
    b.title,
    b.author,
    b.genre,
    count(f.loan_id) AS loan_count,
    count(f.loan_id) FILTER (WHERE f.is_late) AS late_returns,
    round(avg(f.loan_days), 1) AS avg_loan_days,
    dense_rank() OVER (ORDER BY count(f.loan_id) DESC) AS popularity_rank
FROM books AS b
LEFT JOIN loan_facts AS f ON f.book_id = b.book_id
GROUP BY b.book_id, b.title, b.author, b.genre
ORDER BY b.book_id;

CREATE TABLE patron_activity AS
SELECT
    p.patron_id,
    p.patron_name,
    p.branch,
    count(f.loan_id) AS total_loans,
    count(f.loan_id) FILTER (WHERE f.returned_on IS NULL) AS open_loans,
    count(f.loan_id) FILTER (WHERE f.is_late) AS late_returns,
    min(f.loaned_on) AS first_loan_on,
    max(f.loaned_on) AS last_loan_on
FROM patrons AS p
LEFT JOIN loan_facts AS f ON f.patron_id = p.patron_id
GROUP BY p.patron_id, p.patron_name, p.branch
ORDER BY p.patron_id;

CREATE TABLE genre_summary AS
SELECT
    b.genre,
    count(*) AS loan_count,
    count(DISTINCT f.patron_id) AS distinct_patrons,
    round(count(*) FILTER (WHERE f.is_late) / count(*), 2) AS late_rate
FROM loan_facts AS f
JOIN books AS b ON b.book_id = f.book_id
GROUP BY b.genre
ORDER BY loan_count DESC, b.genre;

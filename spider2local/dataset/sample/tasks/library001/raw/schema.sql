-- Raw source tables of the library start database; each is filled from raw/<table>.csv.
CREATE TABLE books (
    book_id INTEGER,
    title VARCHAR,
    author VARCHAR,
    genre VARCHAR,
    published_year INTEGER
);
CREATE TABLE patrons (
    patron_id INTEGER,
    patron_name VARCHAR,
    joined_on DATE,
    branch VARCHAR
);
CREATE TABLE loans (
    loan_id INTEGER,
    book_id INTEGER,
    patron_id INTEGER,
    loaned_on DATE,
    due_on DATE,
    returned_on DATE
);

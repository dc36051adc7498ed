"""The runner's one parsing connection: DuckDB's parser, no worker threads, nothing too long.

An adversarial review measured what these guard against: a connection's default worker threads
(one per core, ~8 MiB of address space each) made the run's next connection fail under
``ulimit -v`` on a 32-core machine, and a long ``OR`` chain parses in quadratic time (0.26 MB
in 1.5 s, 1.09 MB in 18.6 s) while holding the GIL, freezing every task of the run.
"""

from __future__ import annotations

import pytest

from spider2local.db import parse as parsing
from spider2local.dbtools.policy import refusal
from spider2local.dbtproject.inventory import unfinished

OR_CHAIN = "select 1 where " + " or ".join(f"x = {i}" for i in range(20_000))


def test_statements_are_duckdbs_on_a_connection_with_no_worker_threads() -> None:
    (statement,) = parsing.parse("select 1 as x")
    assert statement.type.name == "SELECT"
    assert len(parsing.parse("select 1; delete from t")) == 2
    (con,) = parsing._CONNECTION
    assert con.execute("select current_setting('threads')").fetchone() == (1,)


def test_sql_longer_than_the_limit_is_never_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(OR_CHAIN) > parsing.MAX_PARSED
    parsing.parse("select 1")  # the connection exists: a parse would reach it

    class Refuses:
        def extract_statements(self, sql: str) -> None:
            raise AssertionError(f"parsed {len(sql)} characters")

    monkeypatch.setattr(parsing, "_CONNECTION", [Refuses()])
    with pytest.raises(parsing.SqlTooLong):
        parsing.parse(OR_CHAIN)
    # what each caller makes of it: the query tool refuses and says why; the model scan calls
    # the model complete (it never sends an agent to rewrite what it could not read)
    assert refusal(OR_CHAIN) == (f"the query is {len(OR_CHAIN)} characters long, more than "
                                 f"the {parsing.MAX_PARSED} allowed: send a shorter query")
    assert unfinished(OR_CHAIN) is False

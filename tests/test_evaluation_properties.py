"""Property tests: the fast scorer reaches upstream's verdict on every generated case.

Tables are generated as typed SQL and loaded into real DuckDB (in memory, or as files for the
database-level test), then read with ``fetchdf`` exactly as upstream reads them. The oracle is
tests/reference_scorer.py, a literal restatement of upstream. Result tables are derived from
gold tables the way agents get things slightly wrong: other types (int vs double vs decimal vs
text, date vs timestamp), values nudged just inside or just outside the 0.01 tolerance, NULLs
moved, rows shuffled, dropped or duplicated, columns shuffled, renamed, dropped or added.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import reference_scorer as ref
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spider2local.dataset import EvalParams
from spider2local.evaluation import score_database
from spider2local.evaluation.columns import frame_columns
from spider2local.evaluation.official import sort_key
from spider2local.evaluation.reader import TableRead
from spider2local.evaluation.score import match_columns, score_table

INT_TYPES = ["BIGINT", "INTEGER", "SMALLINT", "HUGEINT", "UBIGINT"]
FLOAT_TYPES = ["DOUBLE", "FLOAT", "DECIMAL(18,3)"]
TIME_TYPES = ["DATE", "TIMESTAMP"]
RARE_TYPES = ["TIMESTAMPTZ", "TIMESTAMP_NS", "TIME", "INTERVAL", "BLOB"]

INTS = [-12, -10, -9, -2, -1, 0, 1, 2, 3, 9, 10, 11, 100, 10**15, 2**53 + 1]
FLOATS = [0.1, 0.2, 0.3, 0.30000000000000004, 1.5, -1.5, 2.675, 9.5, 10.0, 1e16, 1e-5, -0.0,
          0.0, 1.0, 1.004, 1.011, 12345678.9, math.nan, math.inf, -math.inf, 1e300]
DECIMALS = [0.1, 1.5, -2.675, 10.0, 9.5, 0.0, 1.004, 12345.678]
STRINGS = ["a", "b", "A", "10", "9", "10.0", "", "nan", "None", "<NA>", "True", "é", "2020-01-01",
           "2020-01-01 00:00:00", "z z"]
DAYS = [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2), dt.datetime(2019, 12, 31),
        dt.datetime(2024, 9, 15), dt.datetime(1999, 1, 1)]
MOMENTS = [*DAYS, dt.datetime(2020, 1, 1, 10, 30), dt.datetime(2020, 1, 1, 0, 0, 0, 500000),
           dt.datetime(2020, 1, 1, 23, 59, 59)]
OLD_DAY = dt.datetime(900, 1, 1)


@dataclass(frozen=True)
class Col:
    name: str
    sql_type: str
    values: tuple[Any, ...]


def _pool(sql_type: str) -> list[Any]:
    if sql_type in ("SMALLINT", "INTEGER"):
        return [v for v in INTS if abs(v) < 30000]
    if sql_type == "UBIGINT":
        return [0, 1, 2, 9, 10, 2**63 + 5]
    if sql_type in INT_TYPES:
        return INTS
    if sql_type == "DECIMAL(18,3)":
        return DECIMALS
    if sql_type in FLOAT_TYPES:
        return FLOATS
    if sql_type == "BOOLEAN":
        return [True, False]
    if sql_type == "VARCHAR":
        return STRINGS
    if sql_type == "DATE":
        return [*DAYS, OLD_DAY]
    if sql_type in ("TIMESTAMP", "TIMESTAMPTZ", "TIMESTAMP_NS"):
        return MOMENTS
    if sql_type == "TIME":
        return [dt.time(10, 0), dt.time(9, 30), dt.time(0, 0)]
    if sql_type == "INTERVAL":
        return [dt.timedelta(hours=1), dt.timedelta(days=2), dt.timedelta(0)]
    return [b"x", b"yy", b""]


def literal(value: Any, sql_type: str) -> str:
    """``value`` as a SQL literal of ``sql_type`` (NULL when the type cannot hold it)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)
                         and sql_type not in ("DOUBLE", "FLOAT", "VARCHAR")):
        return "NULL"
    if sql_type in INT_TYPES:
        number = round(float(value)) if isinstance(value, float) else int(value)
        low, high = {"SMALLINT": (-30000, 30000), "INTEGER": (-30000, 30000),
                     "BIGINT": (-(2**63), 2**63), "UBIGINT": (0, 2**64)}.get(
                         sql_type, (-(2**99), 2**99))
        if not low <= number < high:
            return "NULL"
        return str(number)
    if sql_type == "BOOLEAN":
        return "true" if value else "false"
    if sql_type in ("DOUBLE", "FLOAT"):
        return f"'{float(value)!r}'"
    if sql_type == "DECIMAL(18,3)":
        return f"'{float(value):.3f}'" if abs(float(value)) < 1e14 else "NULL"
    if sql_type == "BLOB":
        return f"'{value.decode()}'::BLOB" if isinstance(value, bytes) else "NULL"
    if sql_type == "DATE" and isinstance(value, dt.datetime):
        return f"DATE '{value.date().isoformat():0>10}'"
    if sql_type in ("TIMESTAMP", "TIMESTAMP_NS") and isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if sql_type == "TIMESTAMPTZ" and isinstance(value, dt.datetime):
        return f"TIMESTAMPTZ '{value.isoformat(sep=' ')}+00'"
    if sql_type == "TIME" and isinstance(value, dt.time):
        return f"TIME '{value.isoformat()}'"
    if sql_type == "INTERVAL" and isinstance(value, dt.timedelta):
        return f"INTERVAL {int(value.total_seconds())} SECOND"
    if sql_type == "VARCHAR":
        text = value if isinstance(value, str) else (
            repr(value) if isinstance(value, float) else str(value))
        return "'" + text.replace("'", "''") + "'"
    return "NULL"


def gold_type(rng: random.Random, family: str) -> str:
    if family == "num":
        return rng.choice([*INT_TYPES, *FLOAT_TYPES, "BOOLEAN"])
    if family == "time":
        return rng.choice(TIME_TYPES)
    if family == "str":
        return "VARCHAR"
    return rng.choice(RARE_TYPES)


def table_pair(rng: random.Random) -> tuple[list[Col], list[Col]]:
    """A gold table and a result table derived from it."""
    rows = rng.randint(0, 7)
    shape = rng.choice(["num", "num", "mixed", "mixed", "mixed", "time", "str"])
    families = {"num": ["num"], "time": ["time"], "str": ["str"],
                "mixed": ["num", "num", "str", "time", "other"]}[shape]
    gold = []
    for i in range(rng.randint(1, 4)):
        sql_type = gold_type(rng, rng.choice(families))
        pool = _pool(sql_type)
        null_rate = rng.choice([0.0, 0.0, 0.2, 1.0])
        values = tuple(None if rng.random() < null_rate else rng.choice(pool)
                       for _ in range(rows))
        gold.append(Col(f"c{i}", sql_type, values))
    return gold, derived_result(rng, gold, rows)


def derived_result(rng: random.Random, gold: list[Col], rows: int) -> list[Col]:
    order = list(range(rows))
    if rng.random() < 0.5:
        rng.shuffle(order)
    change = rng.choice(["none"] * 8 + ["drop", "dup"])
    if change == "drop" and order:
        order = order[:-1]
    elif change == "dup" and order:
        order = [*order, order[0]]
    result = []
    for col in gold:
        if rng.random() < 0.1:
            continue  # the agent lost this column
        values = nudged(rng, [col.values[i] for i in order])
        name = col.name if rng.random() < 0.8 else col.name + "_x"
        result.append(Col(name, retyped(rng, col.sql_type), tuple(values)))
    for extra in range(rng.randint(0, 2)):
        sql_type = gold_type(rng, rng.choice(["num", "str", "time"]))
        pool = [*_pool(sql_type), None]
        result.append(Col(f"extra{extra}", sql_type, tuple(rng.choice(pool) for _ in order)))
    if not result:
        result.append(Col("only", "INTEGER", tuple(1 for _ in order)))
    rng.shuffle(result)
    return result


def nudged(rng: random.Random, values: list[Any]) -> list[Any]:
    """Maybe change one value: inside or outside tolerance, to NULL, from NULL, or another one."""
    if not values or rng.random() < 0.6:
        return values
    i = rng.randrange(len(values))
    value = values[i]
    out = list(values)
    how = rng.choice(["null", "delta", "delta", "other"])
    if how == "null":
        out[i] = None
    elif how == "delta" and isinstance(value, (int, float)) and not isinstance(value, bool):
        out[i] = float(value) + rng.choice([0.004, 0.0099, 0.0101, 0.02, 1e-7, abs(value) * 2e-9])
    elif how == "delta" and isinstance(value, dt.datetime):
        out[i] = value + rng.choice([dt.timedelta(seconds=1), dt.timedelta(days=1)])
    elif how == "delta" and isinstance(value, str):
        out[i] = value.upper() if value != value.upper() else value + "!"
    else:
        out[i] = rng.choice([v for v in values if v is not None] or [None])
    return out


def retyped(rng: random.Random, sql_type: str) -> str:
    if rng.random() < 0.6:
        return sql_type
    if sql_type in INT_TYPES or sql_type in FLOAT_TYPES or sql_type == "BOOLEAN":
        return rng.choice(["BIGINT", "DOUBLE", "DECIMAL(18,3)", "VARCHAR", "FLOAT", "HUGEINT",
                           "BOOLEAN"])
    if sql_type in TIME_TYPES or sql_type in ("TIMESTAMPTZ", "TIMESTAMP_NS"):
        return rng.choice(["DATE", "TIMESTAMP", "VARCHAR", "TIMESTAMPTZ"])
    return sql_type


def select_sql(cols: list[Col]) -> str:
    """One SELECT producing the typed table (cheaper than CREATE + INSERT per example)."""
    names = [f"v{i}" for i in range(len(cols))]
    casts = ", ".join(f'CAST({n} AS {c.sql_type}) AS "{c.name}"'
                      for n, c in zip(names, cols, strict=True))
    rows = len(cols[0].values)
    if not rows:
        nulls = ", ".join(f"NULL AS {n}" for n in names)
        return f"SELECT {casts} FROM (SELECT {nulls}) WHERE false"
    tuples = ", ".join("(" + ", ".join(literal(c.values[r], c.sql_type) for c in cols) + ")"
                       for r in range(rows))
    return f"SELECT {casts} FROM (VALUES {tuples}) v({', '.join(names)})"


def create_table(con: duckdb.DuckDBPyConnection, name: str, cols: list[Col]) -> None:
    con.execute(f"CREATE TABLE {name} AS {select_sql(cols)}")


def condition_variants(rng: random.Random, width: int) -> list[tuple[tuple[int, ...], bool]]:
    """Six gradings of one table pair: all columns, a random subset (with negative and repeated
    positions, as ``iloc`` allows), one column; each with order kept and ignored."""
    subset = tuple(rng.randint(-width, width - 1) for _ in range(rng.randint(1, width)))
    single = (rng.randrange(width),)
    return [(cols, ignore) for cols in ((), subset, single) for ignore in (True, False)]


_MEMORY = duckdb.connect()


def _frames(gold: list[Col], result: list[Col]) -> tuple[pd.DataFrame, pd.DataFrame]:
    return (_MEMORY.execute(select_sql(gold)).fetchdf(),
            _MEMORY.execute(select_sql(result)).fetchdf())


def _typed(values: list[Any]) -> list[tuple[type, str]]:
    return [(type(v), repr(v)) for v in values]


SEEDS = st.integers(0, 2**63)


@settings(max_examples=900, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=SEEDS)
def test_fast_column_verdicts_equal_reference(seed: int) -> None:
    """Six verdict comparisons per example, per gold column (stronger than per table)."""
    rng = random.Random(seed)
    gold, pred = _frames(*table_pair(rng))
    pred_columns = frame_columns(pred)
    for cols, ignore in condition_variants(rng, gold.shape[1]):
        expected = ref.gold_column_flags(pred, gold, cols, ignore)
        graded = frame_columns(gold.iloc[:, list(cols)] if cols else gold)
        found = [m is not None for m in match_columns(graded, pred_columns, ignore)]
        assert found == expected, (cols, ignore, gold.dtypes.tolist(), pred.dtypes.tolist())
        if not cols:  # the whole table path, diagnostics included, must agree and not crash
            assert score_table("t", gold, TableRead(pred), cols, ignore).passed == all(expected)
        event(f"verdict {'pass' if all(expected) else 'fail'}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=SEEDS)
def test_values_and_sort_order_equal_upstreams(seed: int) -> None:
    """Every column carries upstream's exact Python values (type and repr) in both orders."""
    for frame in _frames(*table_pair(random.Random(seed))):
        literal_lists = ref.column_lists(frame) if len(frame) else [[] for _ in frame.columns]
        for column, expected in zip(frame_columns(frame), literal_lists, strict=True):
            assert _typed(column.sequence(False)) == _typed(expected), frame.dtypes.tolist()
            assert _typed(column.sequence(True)) == _typed(sorted(expected, key=sort_key))


def database_case(rng: random.Random) -> tuple[list[tuple[str, list[Col], list[Col] | None]],
                                               list[tuple[int, ...]], list[bool]]:
    tables: list[tuple[str, list[Col], list[Col] | None]] = []
    cols: list[tuple[int, ...]] = []
    orders: list[bool] = []
    for t in range(rng.randint(2, 4)):
        gold, result = table_pair(rng)
        kept = result if rng.random() < 0.85 else None  # sometimes the table is missing
        tables.append((f"t{t}", gold, kept))
        width = len(gold)
        cols.append(rng.choice([(), tuple(range(width)), (width - 1,), (0,)]))
        orders.append(rng.random() < 0.5)
    return tables, cols, orders


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=SEEDS, as_view=st.booleans())
def test_database_verdicts_equal_reference(seed: int, as_view: bool) -> None:
    """Whole files: read-only opening, missing tables, views, several tables per task."""
    tables, cols, orders = database_case(random.Random(seed))
    with tempfile.TemporaryDirectory() as tmp:
        gold_db, result_db = Path(tmp) / "gold.duckdb", Path(tmp) / "result.duckdb"
        with duckdb.connect(str(gold_db)) as gcon, duckdb.connect(str(result_db)) as rcon:
            for name, gold, result in tables:
                create_table(gcon, name, gold)
                if result is not None:
                    create_table(rcon, f"{name}_src" if as_view else name, result)
                    if as_view:
                        rcon.execute(f"CREATE VIEW {name} AS SELECT * FROM {name}_src")
        names = tuple(name for name, _, _ in tables)
        params = EvalParams("gold.duckdb", names, tuple(cols), tuple(orders))
        score = score_database(result_db, gold_db, params)
        expected = ref.table_verdicts(result_db, gold_db, names, cols, orders)
        assert [t.passed for t in score.tables] == expected
        assert int(score.passed) == ref.duckdb_match(result_db, gold_db, names, cols, orders)
        assert [t.missing for t in score.tables] == [r is None for _, _, r in tables]
        event(f"task {'pass' if score.passed else 'fail'}")

"""Property tests: the fast scorer reaches upstream's verdict on every generated case.

Tables are drawn with Hypothesis strategies (so a failure shrinks to a small table pair),
written as typed SQL and loaded into real DuckDB (in memory, or as files for the database-level
test), then read with ``fetchdf`` exactly as upstream reads them. The oracle is
tests/evaluation/reference_scorer.py, a literal restatement of upstream. Result tables are
derived from gold tables the way agents get things slightly wrong: other types (int vs double vs
decimal vs text vs bool, date vs timestamp), values nudged just inside or just outside the 0.01
tolerance, NULLs moved, rows shuffled, dropped or duplicated, columns shuffled, renamed, dropped
or added.

In-memory frames are cheap, so most examples go there; database files cost a few hundred
milliseconds each, so that test draws fewer. Every example is counted, and the module's
teardown asserts that each test ran its planned number (together 5,040 generated examples under
the ``ci`` Hypothesis profile, 305 in the quick loop's ``dev`` profile); ``pytest -s`` prints the
counts, ``--hypothesis-show-statistics`` shows them too.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from spider2local.evaluation import rows, score_database
from spider2local.evaluation.columns import frame_columns
from spider2local.evaluation.params import EvalParams
from spider2local.evaluation.reader import TableRead
from spider2local.evaluation.refstack import reference_frame
from spider2local.evaluation.score import match_columns, score_table
from tests.evaluation import reference_scorer as ref
from tests.helpers import FULL_PROPERTIES

INT_TYPES = ["BIGINT", "INTEGER", "SMALLINT", "HUGEINT", "UBIGINT"]
FLOAT_TYPES = ["DOUBLE", "FLOAT", "DECIMAL(18,3)"]
TIME_TYPES = ["DATE", "TIMESTAMP"]
RARE_TYPES = ["TIMESTAMPTZ", "TIMESTAMP_NS", "TIME", "INTERVAL", "BLOB"]

INTS = [0, 1, -1, 2, -2, 3, 9, 10, 11, -9, -10, -12, 100, 10**15, 2**53 + 1]
FLOATS = [0.0, 1.0, 0.1, 0.2, 0.3, 0.30000000000000004, 1.5, -1.5, 2.675, 9.5, 10.0, 1e16,
          1e-5, -0.0, 1.004, 1.011, 12345678.9, math.nan, math.inf, -math.inf, 1e300]
DECIMALS = [0.0, 0.1, 1.5, -2.675, 10.0, 9.5, 1.004, 12345.678]
STRINGS = ["a", "b", "A", "10", "9", "10.0", "", "nan", "None", "<NA>", "True", "é", "2020-01-01",
           "2020-01-01 00:00:00", "z z"]
DAYS = [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2), dt.datetime(2019, 12, 31),
        dt.datetime(2024, 9, 15), dt.datetime(1999, 1, 1)]
MOMENTS = [*DAYS, dt.datetime(2020, 1, 1, 10, 30), dt.datetime(2020, 1, 1, 0, 0, 0, 500000),
           dt.datetime(2020, 1, 1, 23, 59, 59)]
OLD_DAY = dt.datetime(900, 1, 1)

# The full plans (CI) and the quick loop's share of them (see tests/helpers.HYPOTHESIS_PROFILE).
VERDICT_EXAMPLES = 4000 if FULL_PROPERTIES else 100
VALUE_EXAMPLES = 1000 if FULL_PROPERTIES else 100
DATABASE_EXAMPLES = 40 if FULL_PROPERTIES else 5
PLANNED = {"test_fast_column_verdicts_equal_reference": VERDICT_EXAMPLES,
           "test_values_and_sort_order_equal_upstreams": VALUE_EXAMPLES,
           "test_database_verdicts_equal_reference": DATABASE_EXAMPLES}
EXAMPLES: Counter[str] = Counter()
"""Examples each property test actually ran (its body was entered), checked at teardown."""
FAILED: set[str] = set()
SETTINGS: dict[str, Any] = {"deadline": None, "derandomize": False,
                            "suppress_health_check": [HealthCheck.too_slow,
                                                      HealthCheck.data_too_large]}


@pytest.fixture(scope="module", autouse=True)
def _examples_ran() -> Iterator[None]:
    """Demonstrates the example count: every property test that ran reached its plan."""
    yield
    for name, count in sorted(EXAMPLES.items()):
        print(f"{name}: {count} generated examples")
    short = {name: count for name, count in EXAMPLES.items()
             if count < PLANNED[name] and name not in FAILED}
    assert not short, f"fewer generated examples than planned {PLANNED}: {short}"


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


TENTHS = st.integers(0, 9)


def _chance(draw: st.DrawFn, tenths: int) -> bool:
    """True with about ``tenths``/10 probability; shrinks to False (the simpler case)."""
    return draw(TENTHS) >= 10 - tenths


# Strategies are built once per parameter set (functools.cache): building and validating a new
# strategy object on every draw cost more than the whole comparison.

@functools.cache
def _pool_values(sql_type: str) -> st.SearchStrategy[Any]:
    """Edge values of the type's pool (shrinking towards its first, simplest entry), plus
    freely generated ones for the common types."""
    pool = st.sampled_from(_pool(sql_type))
    if sql_type in ("BIGINT", "HUGEINT"):
        return pool | st.integers(-(10**6), 10**6)
    if sql_type in ("DOUBLE", "FLOAT"):
        return pool | st.floats(-1e6, 1e6).map(lambda x: round(x, 3))
    if sql_type == "DECIMAL(18,3)":
        return pool | st.decimals(-1000, 1000, places=3).map(float)
    if sql_type == "VARCHAR":
        return pool | st.text("aAb9 .-_é", max_size=4)
    return pool


@functools.cache
def _column_values(sql_type: str, nulls: str, rows: int) -> st.SearchStrategy[list[Any]]:
    """``rows`` values of ``sql_type``: no NULLs, about one in five NULL, or all NULL."""
    value = _pool_values(sql_type) if nulls != "all" else st.none()
    if nulls == "some":
        value = st.builds(lambda k, v: None if k >= 8 else v, TENTHS, value)
    return st.lists(value, min_size=rows, max_size=rows)


FAMILY_TYPES = {family: st.sampled_from(types) for family, types in (
    ("num", [*INT_TYPES, *FLOAT_TYPES, "BOOLEAN"]), ("time", TIME_TYPES), ("str", ["VARCHAR"]),
    ("other", RARE_TYPES))}
SHAPES = {"num": ["num"], "time": ["time"], "str": ["str"],
          "mixed": ["num", "str", "time", "other"]}
SHAPE = st.sampled_from(list(SHAPES))
SHAPE_FAMILIES = {shape: st.sampled_from(families) for shape, families in SHAPES.items()}
NULLS = st.sampled_from(["none", "some", "all"])
ROWS = st.integers(0, 7)
WIDTH = st.integers(1, 4)


@st.composite
def gold_table(draw: st.DrawFn) -> list[Col]:
    """All-numeric, all-time, all-text or mixed tables (frame typing depends on the mix).
    Values come from small pools, so duplicates are common."""
    rows, shape = draw(ROWS), draw(SHAPE)
    table = []
    for i in range(draw(WIDTH)):
        sql_type = draw(FAMILY_TYPES[draw(SHAPE_FAMILIES[shape])])
        values = draw(_column_values(sql_type, draw(NULLS), rows))
        table.append(Col(f"c{i}", sql_type, tuple(values)))
    return table


GOLD_TABLES = gold_table()


@functools.cache
def _permutation(size: int) -> st.SearchStrategy[list[int]]:
    return st.permutations(range(size))


@functools.cache
def _index(size: int) -> st.SearchStrategy[int]:
    return st.integers(0, size - 1)


ROW_CHANGE = st.sampled_from(["none"] * 8 + ["drop", "dup"])


def _row_order(draw: st.DrawFn, rows: int) -> list[int]:
    """Which gold rows the result holds, in what order: shuffled, one lost or one repeated."""
    order = draw(_permutation(rows)) if _chance(draw, 5) else list(range(rows))
    change = draw(ROW_CHANGE)
    if change == "drop" and order:
        return order[:-1]
    if change == "dup" and order:
        return [*order, order[draw(_index(len(order)))]]
    return order


HOW = st.sampled_from(["delta", "null", "other"])
DELTAS = st.sampled_from([0.0099, 0.0101, 0.004, 0.02, 1e-7, None]) | st.floats(-0.02, 0.02)
"""Just inside and just outside the 0.01 tolerance; None: a relative nudge of 2e-9."""
TIME_DELTAS = st.sampled_from([dt.timedelta(seconds=1), dt.timedelta(days=1)])


def _nudged(draw: st.DrawFn, values: list[Any]) -> list[Any]:
    """Maybe change one value: inside or outside tolerance, to NULL, or to another one."""
    if not values or not _chance(draw, 4):
        return values
    i = draw(_index(len(values)))
    value, out = values[i], list(values)
    how = draw(HOW)
    if how == "null":
        out[i] = None
    elif how == "delta" and isinstance(value, (int, float)) and not isinstance(value, bool):
        delta = draw(DELTAS)
        out[i] = float(value) + (abs(value) * 2e-9 if delta is None else delta)
    elif how == "delta" and isinstance(value, dt.datetime):
        out[i] = value + draw(TIME_DELTAS)
    elif how == "delta" and isinstance(value, str):
        out[i] = value.upper() if value != value.upper() else value + "!"
    else:
        present = [v for v in values if v is not None] or [None]
        out[i] = present[draw(_index(len(present)))]
    return out


NUMERIC_RETYPES = st.sampled_from(["BIGINT", "DOUBLE", "DECIMAL(18,3)", "VARCHAR", "FLOAT",
                                   "HUGEINT", "BOOLEAN"])
TIME_RETYPES = st.sampled_from(["DATE", "TIMESTAMP", "VARCHAR", "TIMESTAMPTZ"])


def _retyped(draw: st.DrawFn, sql_type: str) -> str:
    """Often the same type; else another of its kind (or text): bool vs int, date vs
    timestamp, decimal vs double, numbers or dates stored as text."""
    if not _chance(draw, 4):
        return sql_type
    if sql_type in INT_TYPES or sql_type in FLOAT_TYPES or sql_type == "BOOLEAN":
        return draw(NUMERIC_RETYPES)
    if sql_type in TIME_TYPES or sql_type in ("TIMESTAMPTZ", "TIMESTAMP_NS"):
        return draw(TIME_RETYPES)
    return sql_type


EXTRAS = st.integers(0, 2)
EXTRA_FAMILY = st.sampled_from(["num", "str", "time"])


@functools.cache
def _extra_values(sql_type: str, rows: int) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.none() | _pool_values(sql_type), min_size=rows, max_size=rows)


def _result_table(draw: st.DrawFn, gold: list[Col]) -> list[Col]:
    """A result derived from ``gold``: rows reordered or changed, columns lost, renamed,
    retyped, nudged, extra columns added, and the columns shuffled."""
    order = _row_order(draw, len(gold[0].values))
    shuffle_each = _chance(draw, 2)  # every column shuffled on its own: rows torn apart
    result = []
    for col in gold:
        if _chance(draw, 1):
            continue  # the agent lost this column
        own = [order[k] for k in draw(_permutation(len(order)))] if shuffle_each else order
        values = _nudged(draw, [col.values[i] for i in own])
        name = col.name + "_x" if _chance(draw, 2) else col.name
        result.append(Col(name, _retyped(draw, col.sql_type), tuple(values)))
    for extra in range(draw(EXTRAS)):
        sql_type = draw(FAMILY_TYPES[draw(EXTRA_FAMILY)])
        values = draw(_extra_values(sql_type, len(order)))
        result.append(Col(f"extra{extra}", sql_type, tuple(values)))
    if not result:
        result.append(Col("only", "INTEGER", tuple(1 for _ in order)))
    return [result[i] for i in draw(_permutation(len(result)))]


@dataclass(frozen=True)
class Case:
    """A gold table, a result derived from it, and gold column positions to grade."""

    gold: list[Col]
    result: list[Col]
    subset: tuple[int, ...]
    """Random positions, negative and repeated ones included, as ``iloc`` allows."""
    single: int

    def gradings(self) -> list[tuple[tuple[int, ...], bool]]:
        """Six gradings: every column, the subset, one column; each with order kept and
        ignored."""
        return [(cols, ignore) for cols in ((), self.subset, (self.single,))
                for ignore in (True, False)]


@functools.cache
def _positions(width: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(-width, width - 1), min_size=1, max_size=width)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    gold = draw(GOLD_TABLES)
    width = len(gold)
    subset = tuple(draw(_positions(width)))
    return Case(gold, _result_table(draw, gold), subset, draw(_index(width)))


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


CASES = cases()
_MEMORY = duckdb.connect()


def _frames(gold: list[Col], result: list[Col],
            as_reference: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both tables as the installed duckdb's ``fetchdf`` gives them, or as the reference stack
    reads them (what scoring compares): the fast columns must be exact on either."""
    frames = (_MEMORY.execute(select_sql(gold)).fetchdf(),
              _MEMORY.execute(select_sql(result)).fetchdf())
    if as_reference:
        return reference_frame(frames[0]), reference_frame(frames[1])
    return frames


def _typed(values: list[Any]) -> list[tuple[type, str]]:
    return [(type(v), repr(v)) for v in values]


def _counted(test: Callable[..., None]) -> Callable[..., None]:
    """Counts the examples a property test's body really ran (see ``_examples_ran``)."""

    @functools.wraps(test)
    def run(**kwargs: Any) -> None:
        EXAMPLES[test.__name__] += 1
        try:
            test(**kwargs)
        except BaseException:
            FAILED.add(test.__name__)  # its own failure is the report; no count check then
            raise

    return run


@settings(max_examples=VERDICT_EXAMPLES, **SETTINGS)
@given(case=CASES, as_reference=st.booleans())
@_counted
def test_fast_column_verdicts_equal_reference(case: Case, as_reference: bool) -> None:
    """Six verdict comparisons per example, per gold column (stronger than per table)."""
    gold, pred = _frames(case.gold, case.result, as_reference)
    pred_columns, pred_lists = frame_columns(pred), ref.column_lists(pred)
    for cols, ignore in case.gradings():
        expected = ref.flags_against(pred_lists, gold, cols, ignore)
        graded = frame_columns(gold.iloc[:, list(cols)] if cols else gold)
        matches = match_columns(graded, pred_columns, ignore)
        found = [m is not None for m in matches]
        assert found == expected, (cols, ignore, gold.dtypes.tolist(), pred.dtypes.tolist())
        if not cols:  # the whole table path, diagnostics included, must agree and not crash
            assert score_table("t", gold, TableRead(pred), cols, ignore).passed == all(expected)
        event(f"verdict {'pass' if all(expected) else 'fail'}")
        aligned = rows.row_check(graded, pred_columns, matches, ignore).aligned
        if aligned is None and all(expected):
            event("row-aligned: undecided")  # beyond the check's limits: nothing to compare
            continue
        assert aligned == ref.rows_agree(pred, gold, cols, ignore), (cols, ignore)
        event(f"row-aligned: {aligned}")
    event("rows: none" if gold.empty else
          "rows: result length differs" if len(gold) != len(pred) else "rows: same length")


@settings(max_examples=VALUE_EXAMPLES, **SETTINGS)
@given(case=CASES, as_reference=st.booleans())
@_counted
def test_values_and_sort_order_equal_upstreams(case: Case, as_reference: bool) -> None:
    """Every column carries upstream's exact Python values (type and repr) in both orders."""
    for frame in _frames(case.gold, case.result, as_reference):
        literal_lists = ref.column_lists(frame) if len(frame) else [[] for _ in frame.columns]
        for column, expected in zip(frame_columns(frame), literal_lists, strict=True):
            assert _typed(column.sequence(False)) == _typed(expected), frame.dtypes.tolist()
            assert _typed(column.sequence(True)) == _typed(sorted(expected, key=ref.upstream_key))


@dataclass(frozen=True)
class DbTable:
    name: str
    gold: list[Col]
    result: list[Col] | None
    """None: the result database lacks this table."""
    cols: tuple[int, ...]
    ignore_order: bool


@st.composite
def database_tables(draw: st.DrawFn) -> list[DbTable]:
    """Two to four graded tables; sometimes one is missing from the result."""
    tables = []
    for t in range(draw(st.integers(2, 4))):
        gold = draw(GOLD_TABLES)
        result = None if _chance(draw, 1) else _result_table(draw, gold)
        width = len(gold)
        # Negative positions count from the end as iloc counts them; (width,) and
        # (-width - 1,) make upstream's iloc raise (the task then scores 0).
        cols = draw(st.sampled_from([(), tuple(range(width)), (width - 1,), (0,), (-1,),
                                     (-width, 0), (width,), (-width - 1,)]))
        tables.append(DbTable(f"t{t}", gold, result, cols, draw(st.booleans())))
    return tables


@settings(max_examples=DATABASE_EXAMPLES, **SETTINGS)
@given(tables=database_tables(), as_view=st.booleans())
@_counted
def test_database_verdicts_equal_reference(tables: list[DbTable], as_view: bool) -> None:
    """Whole files: read-only opening, missing tables, views, several tables per task."""
    with tempfile.TemporaryDirectory() as tmp:
        gold_db, result_db = Path(tmp) / "gold.duckdb", Path(tmp) / "result.duckdb"
        with duckdb.connect(str(gold_db)) as gcon, duckdb.connect(str(result_db)) as rcon:
            for table in tables:
                create_table(gcon, table.name, table.gold)
                if table.result is not None:
                    source = f"{table.name}_src" if as_view else table.name
                    create_table(rcon, source, table.result)
                    if as_view:
                        rcon.execute(f"CREATE VIEW {table.name} AS SELECT * FROM {source}")
        names = tuple(table.name for table in tables)
        cols = [table.cols for table in tables]
        orders = [table.ignore_order for table in tables]
        params = EvalParams("gold.duckdb", names, tuple(cols), tuple(orders))
        score = score_database(result_db, gold_db, params)
        read = ref.read_as_reference_stack  # spider2local's verdicts are defined on its frames
        expected = ref.table_verdicts(result_db, gold_db, names, cols, orders, read)
        assert [t.passed for t in score.tables] == expected
        assert int(score.passed) == ref.duckdb_match(result_db, gold_db, names, cols, orders,
                                                     read)
        assert [t.missing for t in score.tables] == [t.result is None for t in tables]
        event(f"task {'pass' if score.passed else 'fail'}")

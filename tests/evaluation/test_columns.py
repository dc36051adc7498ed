"""The value types upstream sees depend on the whole frame: each documented case, checked
against the literal ``transpose().values.tolist()`` and against the stated expectation."""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pytest

from spider2local.evaluation.column_types import NumColumn, ObjColumn, StrColumn, TimeColumn
from spider2local.evaluation.columns import frame_columns
from spider2local.evaluation.refstack import reference_frame
from tests.evaluation import reference_scorer as ref


def _frame(select: str) -> pd.DataFrame:
    with duckdb.connect() as con:
        return con.execute(select).fetchdf()


def _types(values: list[Any]) -> list[str]:
    return [type(v).__name__ for v in values]


CASES = [
    # (SELECT, per-column Python types upstream sees, per-column class used here)
    ("SELECT * FROM (VALUES (10, 1.5), (9, 2.5)) v(i, f)",
     [["float", "float"], ["float", "float"]], [NumColumn, NumColumn]),
    ("SELECT * FROM (VALUES (10, 'a'), (9, 'b')) v(i, s)",
     [["int", "int"], ["str", "str"]], [NumColumn, StrColumn]),
    ("SELECT * FROM (VALUES (10, 'a'), (NULL, NULL)) v(i, s)",
     [["int", "NAType"], ["str", "NoneType"]], [NumColumn, StrColumn]),
    ("SELECT * FROM (VALUES (DATE '2020-01-01', TIMESTAMP '2020-01-01 10:00'), (NULL, NULL)) "
     "v(d, t)", [["datetime", "NoneType"], ["datetime", "NoneType"]], [TimeColumn, TimeColumn]),
    ("SELECT * FROM (VALUES (DATE '2020-01-01', 1), (NULL, 2)) v(d, n)",
     [["Timestamp", "NaTType"], ["int", "int"]], [TimeColumn, NumColumn]),
    ("SELECT * FROM (VALUES (NULL::BIGINT, NULL::BIGINT)) v(a, b)",  # one row, nullable ints
     [["float"], ["float"]], [ObjColumn, ObjColumn]),
    ("SELECT * FROM (VALUES (DATE '0900-01-01', 'x'), (DATE '2020-01-01', 'y')) v(d, s)",
     [["Timestamp", "Timestamp"], ["str", "str"]], [ObjColumn, StrColumn]),
    ("SELECT * FROM (VALUES (true, 1), (NULL, 2)) v(b, n)",
     [["bool", "NAType"], ["int", "int"]], [NumColumn, NumColumn]),
    ("SELECT * FROM (VALUES (TIME '10:00:00', 1.5::DECIMAL(4,1))) v(t, d)",
     [["time"], ["float"]], [ObjColumn, NumColumn]),
]


@pytest.mark.parametrize(("select", "types", "classes"), CASES)
def test_value_types_follow_the_whole_frame(select: str, types: list[list[str]],
                                            classes: list[type]) -> None:
    frame = _frame(select)
    literal = ref.column_lists(frame)
    columns = frame_columns(frame)
    assert [_types(values) for values in literal] == types  # the documented upstream fact
    assert [type(c) for c in columns] == classes
    for column, expected in zip(columns, literal, strict=True):
        got = column.sequence(False)
        assert _types(got) == _types(expected)
        assert [repr(v) for v in got] == [repr(v) for v in expected]


def test_gold_types_are_taken_after_the_cut_to_condition_cols() -> None:
    """Cutting away the only text column makes the gold frame all-numeric: ints become floats."""
    frame = _frame("SELECT * FROM (VALUES (10, 1.5, 'a')) v(i, f, s)")
    assert frame_columns(frame)[0].sequence(False) == [10]
    assert type(frame_columns(frame)[0].sequence(False)[0]) is int
    cut = frame_columns(frame.iloc[:, [0, 1]])[0].sequence(False)
    assert _types(cut) == ["float"] == _types(ref.column_lists(frame.iloc[:, [0, 1]])[0])


def test_sort_order_is_by_string_form() -> None:
    frame = _frame("SELECT * FROM (VALUES (9, 'x'), (10, 'y'), (-1, 'z')) v(n, s)")
    assert frame_columns(frame)[0].sequence(True) == [-1, 10, 9]
    nullable = _frame("SELECT * FROM (VALUES (true, 'x'), (NULL, 'y'), (false, 'z')) v(b, s)")
    assert [repr(v) for v in frame_columns(nullable)[0].sequence(True)] == [
        "<NA>", "False", "True"]  # '<' sorts before letters
    assert dt.datetime(2020, 1, 1) == pd.Timestamp("2020-01-01")


def test_booleans_with_nulls_as_the_reference_stack_reads_them_stay_fast() -> None:
    """duckdb 1.1.3's bools-and-NaN object column is a number column (not the literal path),
    whose NaN sorts as 'nan', after 'True', where a nullable boolean's '<NA>' sorts first."""
    frame = reference_frame(_frame(
        "SELECT * FROM (VALUES (true, 'x'), (NULL, 'y'), (false, 'z')) v(b, s)"))
    column = frame_columns(frame)[0]
    assert isinstance(column, NumColumn)
    expected = sorted(ref.column_lists(frame)[0], key=ref.upstream_key)
    assert [repr(v) for v in column.sequence(True)] == ["False", "True", "nan"]
    assert _types(column.sequence(True)) == _types(expected) == ["bool", "bool", "float"]
    numpy_bools = pd.DataFrame({"b": pd.Series([np.True_, np.nan], dtype=object)})
    assert isinstance(frame_columns(numpy_bools)[0], ObjColumn)  # np.bool_ is no int upstream

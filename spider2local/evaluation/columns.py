"""Turn a pandas frame (read with ``fetchdf`` exactly as upstream reads it) into typed columns.

Upstream compares ``frame.transpose().values.tolist()``: the Python type of every value depends
on the dtypes of the *whole* frame, not only of its own column. Examples measured with pandas 2.x
and duckdb 1.5: if every column is a plain numpy number, all values become the frame's common
numpy type (ints turn into floats next to a float column, so ``str(10)`` becomes ``"10.0"`` and
the sort order changes); if the frame mixes kinds, every value becomes an object (ints stay ints,
DATE/TIMESTAMP become ``pd.Timestamp``, nullable ints give ``pd.NA``); a frame of only
timestamps gives ``datetime.datetime`` with None for NULL. This module reproduces that mapping
from the dtypes, then stores each column as numpy arrays so comparisons need no Python object
per value. Anything not modelled here becomes an :class:`ObjColumn` holding upstream's exact
Python values, compared literally: unusual types are slower but never wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from spider2local.evaluation.column_types import (
    Column,
    NumColumn,
    ObjColumn,
    StrColumn,
    TimeColumn,
)

_MIN_TS = np.datetime64("1000-01-01T00:00:00", "us")
_MAX_DT = np.datetime64("9999-12-31T23:59:59.999999", "us")
_MIN_DT = np.datetime64("0001-01-01T00:00:00", "us")


def frame_columns(frame: pd.DataFrame) -> list[Column]:
    """The columns of ``frame`` carrying exactly the values upstream would compare."""
    series = [s for _, s in frame.items()]
    names = [str(name) for name in frame.columns]
    mode = _frame_mode(frame, [s.dtype for s in series])
    if mode is None:
        rows = frame.transpose().values.tolist() if len(frame) else [[] for _ in names]
        return [ObjColumn(name, list(values)) for name, values in zip(names, rows, strict=True)]
    if mode == np.dtype(object):
        return [_object_mode_column(name, s) for name, s in zip(names, series, strict=True)]
    return [_cast_mode_column(name, s, mode) for name, s in zip(names, series, strict=True)]


def _frame_mode(frame: pd.DataFrame, dtypes: list[Any]) -> np.dtype[Any] | None:
    """The numpy dtype of ``frame.transpose().values`` (object for mixed frames), or None when
    the frame is of a kind this module does not model (then values are taken literally)."""
    if not dtypes:
        return np.dtype(object)
    first = dtypes[0]
    if all(dtype == first for dtype in dtypes):
        if isinstance(first, np.dtype):
            return first
        # Homogeneous nullable ints/booleans transpose to ints/bools and pd.NA, like object
        # mode, except with exactly one row: then pandas converts that row on its own (ints
        # become floats and NA becomes NaN when the row holds a NULL), so take it literally.
        return np.dtype(object) if _is_masked(first) and len(frame) != 1 else None
    if any(not isinstance(d, np.dtype) or d.kind == "O" for d in dtypes):
        return np.dtype(object)  # pandas interleaves extension or object dtypes as objects
    # Only numpy numbers/timestamps here: let pandas pick the common type, from dtypes alone.
    common = frame.iloc[:0].values.dtype
    return common if isinstance(common, np.dtype) else None


def _is_masked(dtype: Any) -> bool:
    return isinstance(dtype, pd.api.extensions.ExtensionDtype) and (
        isinstance(dtype, pd.BooleanDtype) or str(dtype).lstrip("U").startswith("Int"))


def _object_mode_column(name: str, s: pd.Series[Any]) -> Column:
    """A column of a mixed frame: every value is its own Python object."""
    dtype = s.dtype
    if isinstance(dtype, pd.BooleanDtype):
        return NumColumn.from_ints(name, _masked_ints(s), s.isna().to_numpy(), style="bool")
    if _is_masked(dtype):
        return _int_column(name, s, masked=True)
    if isinstance(dtype, np.dtype):
        if dtype.kind == "b":
            return NumColumn.from_ints(name, s.to_numpy().astype(np.int64), None, style="bool")
        if dtype.kind in "iu":
            return _int_column(name, s, masked=False)
        if dtype.kind == "f":
            return NumColumn.from_floats(name, s.to_numpy().astype(np.float64, copy=False))
        if dtype.kind == "M":
            return _time_column(name, s.to_numpy(), style="ts", source=s)
        if dtype.kind == "O":
            return _object_column(name, s.to_numpy())
    return ObjColumn(name, s.to_numpy(dtype=object).tolist())


def _cast_mode_column(name: str, s: pd.Series[Any], common: np.dtype[Any]) -> Column:
    """A column of a frame whose values all share one numpy dtype (``common``)."""
    values = s.to_numpy()
    if common.kind == "b":
        return NumColumn.from_ints(name, values.astype(np.int64), None, style="bool")
    if common.kind == "f":
        floats = values.astype(common, copy=False).astype(np.float64, copy=False)
        return NumColumn.from_floats(name, floats)
    if common.kind in "iu":
        cast = values.astype(common, copy=False)
        if common == np.dtype(np.uint64) and len(cast) and cast.max() > np.iinfo(np.int64).max:
            return ObjColumn(name, cast.tolist())
        return NumColumn.from_ints(name, cast.astype(np.int64, copy=False), None, style="int")
    if common.kind == "M" and np.datetime_data(common)[0] in ("s", "ms", "us"):
        return _time_column(name, values.astype(common), style="dt", source=None)
    if common.kind == "O":
        return _object_column(name, values)
    return ObjColumn(name, values.astype(common).tolist())


def _masked_ints(s: pd.Series[Any]) -> np.ndarray[Any, Any]:
    return np.asarray(s.to_numpy(dtype=np.int64, na_value=0), dtype=np.int64)


def _int_column(name: str, s: pd.Series[Any], *, masked: bool) -> Column:
    """Ints (Python ints upstream); a uint64 beyond int64 is rare enough to take literally."""
    if masked:
        missing = s.isna().to_numpy()
        present = s[~missing]
        too_big = s.dtype == pd.UInt64Dtype() and len(present) and present.max() > 2**63 - 1
        if too_big:
            return ObjColumn(name, s.to_numpy(dtype=object).tolist())
        return NumColumn.from_ints(name, _masked_ints(s), missing, style="int")
    values = s.to_numpy()
    if values.dtype == np.uint64 and len(values) and values.max() > np.iinfo(np.int64).max:
        return ObjColumn(name, values.astype(object).tolist())
    return NumColumn.from_ints(name, values.astype(np.int64, copy=False), None, style="int")


def _time_column(name: str, values: np.ndarray[Any, Any], *, style: str,
                 source: pd.Series[Any] | None) -> Column:
    """Timestamps whose string form sorts chronologically; other years are taken literally.

    ``pd.Timestamp`` prints years below 1000 without zero padding ('900-01-01'), which breaks
    the chronological order of upstream's string sort key, so those columns go the literal way.
    """
    as_us = values.astype("datetime64[us]", copy=False)
    present = as_us[~np.isnat(as_us)]
    low = _MIN_TS if style == "ts" else _MIN_DT
    in_range = not len(present) or (present.min() >= low and present.max() <= _MAX_DT)
    exact_unit = True
    if np.datetime_data(values.dtype)[0] == "ns":  # sub-microsecond digits change str()
        exact_unit = not np.any(values[~np.isnat(values)].view(np.int64) % 1000)
    if not (in_range and exact_unit):
        literal = source.to_numpy(dtype=object) if source is not None else values.astype(object)
        return ObjColumn(name, literal.tolist())
    return TimeColumn(name, as_us, style=style)


def _object_column(name: str, values: np.ndarray[Any, Any]) -> Column:
    """VARCHAR columns (str or None) are fast, and so are bools with NaN (booleans with NULLs as
    the reference stack reads them); any other object (TIME, LIST, BLOB...) is literal."""
    kind = pd.api.types.infer_dtype(values, skipna=True)
    if kind in ("string", "empty"):
        missing = np.asarray(pd.isna(values), dtype=bool)
        if all(value is None for value in values[missing]):  # not NaN or NA: those sort apart
            return StrColumn(name, values, missing)
    if kind == "boolean":
        missing = np.asarray(pd.isna(values), dtype=bool)
        # Exactly Python bools and float NaN: numpy bools are not ints upstream, NA sorts apart.
        if (all(type(value) is bool for value in values[~missing])
                and all(type(value) is float for value in values[missing])):
            ints = np.where(missing, False, values).astype(bool).astype(np.int64)
            return NumColumn.from_ints(name, ints, missing, style="bool", nan_missing=True)
    return ObjColumn(name, values.tolist())

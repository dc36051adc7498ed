"""Read tables as the reference stack reads them: duckdb 1.1.3 with pandas 2.2.3.

Upstream pins nothing, so the official verdict is the one the stack of the benchmark's release
gives (duckdb 1.1.3, pandas 2.2.3, the leaderboard's era). Newer duckdb releases hand
``fetchdf`` different dtypes for a few classes of values, and since upstream compares
``frame.transpose().values.tolist()``, the Python values change and verdicts flip (measured:
104 of 20,669 differential cases under duckdb 1.5.6). The differences, all measured by reading
the same tables under both stacks (tests/evaluation/test_refstack.py repeats the measurement):

* integers with NULLs: 1.1.3 gives float64 with NaN; 1.5 gives nullable ``Int32``/``Int64``
  (``pd.NA``). Next to other numeric columns this also decides whether the whole frame's values
  become floats.
* BOOLEAN with NULLs: 1.1.3 gives an object column of ``bool`` and NaN; 1.5 a nullable
  ``boolean`` column (``pd.NA``, which sorts as '<NA>' before 'False' where NaN sorts as 'nan').
* INTERVAL: 1.1.3 gives ``timedelta64[ns]`` (so a frame of only intervals turns into integer
  nanoseconds, which then compare as numbers) and refuses intervals beyond the nanosecond range;
  1.5 gives ``timedelta64[us]`` (``datetime.timedelta`` values).
* other object columns with NULLs (TIME, UUID, BLOB, LIST, STRUCT, MAP, UNION, BIT): 1.1.3 gives
  NaN, 1.5 ``pd.NA``; VARCHAR gives None under both.

The project keeps the newer duckdb (the agent's dbt and the query tool need it; see
docs/scoring.md, "The reference stack", for the measurement behind that choice) and converts the
frames it reads to the reference stack's dtypes here, one column at a time, before anything
compares them. Under duckdb 1.1 itself every conversion is a no-op.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

REFERENCE_STACK = {"duckdb": "1.1.3", "pandas": "2.2.3", "numpy": "2.1.3"}
"""The versions official verdicts are defined on (numpy: the newest release of pandas 2.2.3's
era that installs next to it). Tests build a venv of exactly these to check the emulation."""

_NS_PER_US = 1000
_MAX_US = np.iinfo(np.int64).max // _NS_PER_US
"""duckdb 1.1.3 converts intervals to int64 nanoseconds and fails beyond that range."""

_INTEGER_TYPES = re.compile(r"^U?(TINYINT|SMALLINT|INTEGER|BIGINT)$")


class UnreadableInterval(ValueError):
    """An INTERVAL beyond int64 nanoseconds: duckdb 1.1.3 cannot read the table at all."""


def reference_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (as the installed duckdb's ``fetchdf`` returned it) with every column in the
    dtype duckdb 1.1.3's ``fetchdf`` gives for the same values.

    Raises :class:`UnreadableInterval` where duckdb 1.1.3 raises while reading.
    """
    converted: dict[int, Any] = {}
    for position, (_, series) in enumerate(frame.items()):
        values = _reference_values(series)
        if values is not None:
            converted[position] = values
    if not converted:
        return frame
    out = frame.copy(deep=False)
    for position, values in converted.items():
        out.isetitem(position, values)  # by position: column names may repeat
    return out


def _reference_values(series: pd.Series[Any]) -> np.ndarray[Any, Any] | None:
    """The column's values as 1.1.3 returns them, or None when they already are."""
    dtype = series.dtype
    if isinstance(dtype, pd.BooleanDtype):
        if not series.isna().any():
            return series.to_numpy(dtype=np.bool_)
        # Python bools and float NaN, exactly what 1.1.3's object column holds.
        return series.to_numpy(dtype=object, na_value=np.nan)
    if _is_masked_int(dtype):
        if not series.isna().any():
            return series.to_numpy(dtype=np.dtype(str(dtype).lower()))  # Int32 -> int32
        return series.to_numpy(dtype=np.float64, na_value=np.nan)
    if isinstance(dtype, np.dtype) and dtype.kind == "m" and dtype != np.dtype("m8[ns]"):
        return _nanosecond_intervals(series.to_numpy())
    if isinstance(dtype, np.dtype) and dtype.kind == "O":
        return _nan_for_na(series.to_numpy())
    return None


def _is_masked_int(dtype: Any) -> bool:
    """pandas' nullable integers (Int8 ... UInt64)."""
    return isinstance(dtype, pd.api.extensions.ExtensionDtype) and (
        str(dtype).lstrip("U").startswith("Int"))


def _nanosecond_intervals(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    micros = values.astype("timedelta64[us]")
    present = micros[~np.isnat(micros)].view(np.int64)
    if len(present) and int(np.abs(present).max()) > _MAX_US:
        raise UnreadableInterval("Conversion Error: Could not convert Interval to Nanoseconds "
                                 "(duckdb 1.1.3, the reference stack, cannot read this table)")
    return micros.astype("timedelta64[ns]")


def _nan_for_na(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Object columns: 1.1.3 fills NULLs of non-text types with NaN where 1.5 uses ``pd.NA``."""
    missing = np.flatnonzero(pd.isna(values))
    na = [index for index in missing.tolist() if values[index] is pd.NA]
    if not na:
        return None
    out = values.copy()
    out[na] = np.nan
    return out


def differing_classes(sql_types: Sequence[str], frame: pd.DataFrame) -> list[str | None]:
    """Per column: the class of values whose reading differs between duckdb 1.1.3 and newer
    duckdb in a way that can change a verdict, or None. ``sql_types`` are DuckDB's type names
    (``DESCRIBE``), taken by position, so this answers the same under any duckdb version."""
    classes: list[str | None] = []
    for sql_type, (_, series) in zip(sql_types, frame.items(), strict=False):
        has_null = bool(series.isna().any())
        name = sql_type.upper()
        if name == "INTERVAL":
            classes.append("INTERVAL")
        elif name == "BOOLEAN" and has_null:
            classes.append("BOOLEAN with NULLs")
        elif _INTEGER_TYPES.match(name) and has_null:
            classes.append("integers with NULLs")
        else:
            classes.append(None)
    return classes


def reading_note(graded: Sequence[tuple[str, str]]) -> str | None:
    """One note naming the graded gold columns (name, class) read as duckdb 1.1.3 reads them."""
    if not graded:
        return None
    listed = ", ".join(f"{name!r} ({cls})" for name, cls in graded)
    return (f"graded gold column(s) {listed} were read as duckdb "
            f"{REFERENCE_STACK['duckdb']} (the reference stack) reads them; newer duckdb "
            "versions read these values differently, which can change the verdict")

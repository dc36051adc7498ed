"""Typed columns: upstream's values held as numpy arrays, with per-column caches.

Every column is prepared once and compared against many; whatever a comparison needs (the
official sort order, a numeric sort, a multiset of strings) is computed on first use and kept,
so no column is ever sorted twice (upstream re-sorts both columns for every pair).

Families: values of different families never compare equal upstream (a number is never ``==``
a string or a timestamp), so only missing values can match across families.
"""

from __future__ import annotations

from collections import Counter
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from spider2local.evaluation.official import sort_key

Array = np.ndarray[Any, Any]


class Column:
    """One column: its name, length and which of its values are missing (``pd.isna``)."""

    family: ClassVar[str] = ""

    def __init__(self, name: str, missing: Array) -> None:
        self.name = name
        self.missing = missing
        self.length = len(missing)
        self.n_missing = int(missing.sum())

    @property
    def all_missing(self) -> bool:
        return self.n_missing == self.length

    def official_values(self) -> list[Any]:
        """The Python values upstream sees, in table order."""
        raise NotImplementedError

    def sequence(self, ignore_order: bool) -> list[Any]:
        """Upstream's values in comparison order (sorted its way when order is ignored); cached,
        since the literal path may compare one column against many."""
        cache: dict[bool, list[Any]] = self.__dict__.setdefault("_sequences", {})
        if ignore_order not in cache:
            values = self.official_values()
            cache[ignore_order] = ([values[i] for i in self.official_order.tolist()]
                                   if ignore_order else values)
        return cache[ignore_order]

    @cached_property
    def official_order(self) -> Array:
        """Row indices in upstream's sorted order (only the resulting values matter: rows with
        equal sort keys hold equal values in a typed column, so ties may go either way)."""
        values = self.official_values()
        return np.array(sorted(range(self.length), key=lambda i: sort_key(values[i])),
                        dtype=np.int64)

    def text(self, index: int) -> str:
        """One value, as upstream's ``repr`` would show it (for diagnostics)."""
        return repr(self.official_values()[index])


class NumColumn(Column):
    """Ints, floats and bools: numbers upstream compares with math.isclose.

    ``style`` decides the string form in the sort key: '10' (int), '10.0' (float), 'True' (bool).
    Missing ints and bools are ``pd.NA`` (sorts as '<NA>'), except in the object columns of
    bools and NaN that duckdb 1.1.3 (the reference stack) gives for booleans with NULLs
    (``nan_missing``: 'nan', after 'True'); missing floats are NaN ('nan').
    """

    family = "num"

    def __init__(self, name: str, num: Array, ints: Array | None, missing: Array,
                 style: str, *, nan_missing: bool = False) -> None:
        super().__init__(name, missing)
        self.num = num
        self.ints = ints
        self.style = style
        self.nan_missing = nan_missing or ints is None

    @classmethod
    def from_ints(cls, name: str, ints: Array, missing: Array | None, style: str, *,
                  nan_missing: bool = False) -> NumColumn:
        mask = np.zeros(len(ints), dtype=bool) if missing is None else np.asarray(missing, bool)
        num = ints.astype(np.float64)
        num[mask] = np.nan
        return cls(name, num, ints, mask, style, nan_missing=nan_missing)

    @classmethod
    def from_floats(cls, name: str, floats: Array) -> NumColumn:
        return cls(name, floats, None, np.isnan(floats), "float")

    def official_values(self) -> list[Any]:
        if self.ints is None:
            return list(self.num.tolist())
        base = self.ints.astype(bool) if self.style == "bool" else self.ints
        values: list[Any] = base.tolist()
        marker = np.nan if self.nan_missing else pd.NA
        for index in np.flatnonzero(self.missing):
            values[index] = marker
        return values

    @cached_property
    def official_order(self) -> Array:
        return np.argsort(self._sort_strings(), kind="stable")

    def _sort_strings(self) -> Array:
        """``str(value)`` for every value, as ASCII bytes (numpy sorts bytes in C; every string
        here is ASCII, so byte order equals Python's string order)."""
        if self.ints is None:
            return np.array(list(map(repr, self.num.tolist())), dtype=np.bytes_)
        if self.style == "bool":
            keys = np.where(self.ints.astype(bool), b"True", b"False").astype("S5")
        else:
            keys = self.ints.astype(np.bytes_)
        if self.n_missing:
            keys = keys.astype(f"S{max(keys.dtype.itemsize, 4)}")
            keys[self.missing] = b"nan" if self.nan_missing else b"<NA>"
        return keys

    @cached_property
    def sorted_present(self) -> Array:
        """The present values sorted numerically (for tolerance bounds and identity checks)."""
        return np.sort(self.num[~self.missing])

    @cached_property
    def sorted_ints(self) -> Array:
        """Present int (or bool) values sorted exactly, without a detour through floats."""
        assert self.ints is not None
        return np.sort(self.ints[~self.missing])

    @cached_property
    def finite_sorted(self) -> Array:
        values = self.sorted_present
        return values[np.isfinite(values)]

    @cached_property
    def infinities(self) -> tuple[int, int]:
        if self.ints is not None:
            return 0, 0
        return int(np.sum(self.num == np.inf)), int(np.sum(self.num == -np.inf))

    @cached_property
    def has_negative_zero(self) -> bool:
        values = self.sorted_present
        return bool(np.any((values == 0) & np.signbit(values)))

    @cached_property
    def integral_below_1e16(self) -> bool:
        """Every present value is a whole number under 1e16 in size and no -0.0: then
        ``str(float(n))`` is ``str(n) + '.0'``, which sorts exactly like ``str(n)``."""
        values = self.sorted_present
        return bool(np.all(np.abs(values) < 1e16) and np.all(values == np.floor(values))
                    and not self.has_negative_zero)

    def text(self, index: int) -> str:
        if self.missing[index]:
            return "nan" if self.nan_missing else "<NA>"
        if self.ints is None:
            return repr(float(self.num[index]))
        return repr(bool(self.ints[index])) if self.style == "bool" else str(int(self.ints[index]))


class StrColumn(Column):
    """VARCHAR: ``str`` values, None for NULL (sorted last upstream)."""

    family = "str"

    def __init__(self, name: str, values: Array, missing: Array) -> None:
        super().__init__(name, missing)
        self.values = values

    def official_values(self) -> list[Any]:
        return list(self.values.tolist())

    @cached_property
    def official_order(self) -> Array:
        present = np.flatnonzero(~self.missing)
        order = present[np.argsort(self.values[present], kind="stable")]
        return np.concatenate([order, np.flatnonzero(self.missing)]).astype(np.int64)

    def same_multiset(self, other: StrColumn) -> bool:
        """With order ignored, two string columns match exactly when they hold the same strings
        the same number of times (their None counts are already known to be equal)."""
        mine, theirs = self._by_hash, other._by_hash
        if mine is None or theirs is None:  # a hash collision inside a column: count exactly
            return self.multiset == other.multiset
        return (np.array_equal(mine[0], theirs[0]) and np.array_equal(mine[1], theirs[1])
                and bool(np.all(mine[2] == theirs[2])))

    @cached_property
    def _by_hash(self) -> tuple[Array, Array, Array] | None:
        """The multiset as (sorted distinct hashes, their counts, one string per hash), or
        None if two different strings of this column share a hash.

        When every hash stands for one string, this triple determines the multiset exactly,
        and building it reads each string once, in order (fast), instead of sorting or
        counting strings in Python.
        """
        present = self.values[~self.missing]
        hashes = self.present_hashes
        codes, distinct = pd.factorize(hashes)
        codes = np.asarray(codes, dtype=np.int64)
        first = np.empty(len(distinct), dtype=np.int64)
        first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # first row of every hash
        representatives = present[first]
        if not bool(np.all(present == representatives[codes])):
            return None
        order = np.argsort(distinct)
        counts = np.bincount(codes, minlength=len(distinct))[order]
        distinct, representatives = np.asarray(distinct)[order], representatives[order]
        return distinct, counts, representatives

    @cached_property
    def present_hashes(self) -> Array:
        """Python's hash of every present value, in row order (computed once: the multiset
        test and the row-aligned check both key strings by it)."""
        present = self.values[~self.missing]
        return np.fromiter(map(hash, present.tolist()), dtype=np.int64, count=len(present))

    def hash_table(self) -> tuple[Array, Array, Array] | None:
        """(sorted distinct hashes, their counts, one string per hash), or None if two
        different strings of this column share a hash."""
        return self._by_hash

    @cached_property
    def multiset(self) -> Counter[Any]:
        return Counter(self.values.tolist())


class TimeColumn(Column):
    """DATE and TIMESTAMP values (``pd.Timestamp``/NaT, or ``datetime``/None in a frame of only
    timestamps), held as datetime64[us]. Callers guarantee years whose string form sorts
    chronologically, so upstream's string sort is a sort by time with missing values last."""

    family = "time"

    def __init__(self, name: str, times: Array, style: str) -> None:
        super().__init__(name, np.isnat(times))
        self.times = times
        self.style = style

    def official_values(self) -> list[Any]:
        if self.style == "dt":
            return list(self.times.tolist())
        return list(pd.Series(self.times).astype(object).tolist())

    @cached_property
    def official_order(self) -> Array:
        return np.argsort(self.times, kind="stable")

    @cached_property
    def sorted_times(self) -> Array:
        return np.sort(self.times)  # NaT sorts last, like upstream's 'NaT' / None

    def text(self, index: int) -> str:
        if self.missing[index]:
            return "None" if self.style == "dt" else "NaT"
        return str(pd.Timestamp(self.times[index]))


class ObjColumn(Column):
    """Any other type: upstream's exact Python values, compared by the literal rules."""

    family = "obj"

    def __init__(self, name: str, values: list[Any]) -> None:
        super().__init__(name, np.array([_isna(v) for v in values], dtype=bool))
        self.values = values

    def official_values(self) -> list[Any]:
        return self.values

    def sequence(self, ignore_order: bool) -> list[Any]:
        return self.official_sorted if ignore_order else self.values

    @cached_property
    def official_sorted(self) -> list[Any]:
        return sorted(self.values, key=sort_key)


def _isna(value: Any) -> bool:
    """``pd.isna`` for one value; containers (LIST columns) are never 'missing' here."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False

"""Which tasks a run covers: ids, a subset, a shard of it, a limit.

Order of operations, always the same so that CI matrices and resumes agree:
ids or subset (default ``all``) -> sorted by id -> shard K/N -> limit. Sharding is round-robin
over the sorted ids (task number i, counting from 0, goes to shard ``i % N + 1``): no hashing, so
the split only changes when the task list does, and neighbouring (often similar-sized) tasks land
in different shards.

Tasks that cannot run (a dataset problem or a suite exclusion) stay in the selection as
``skipped`` with their reason: they are reported, never run, and they count in the "over all
tasks" pass rates, which is how the official benchmark counts them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.exceptions import UserError
from spider2local.suite.model import BUILTIN_SUBSETS


@dataclass(frozen=True)
class Shard:
    index: int
    """1-based: shard 1 of 4 is ``Shard(1, 4)``."""
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class Selection:
    tasks: tuple[TaskSpec, ...]
    """The tasks to run, sorted by id."""
    skipped: tuple[tuple[str, str], ...] = ()
    """(task id, reason) of selected tasks that cannot run."""
    graded: Mapping[str, int] = field(default_factory=dict)
    """Graded tables of every selected task, runnable or not (0 without an evaluation): a
    skipped task's tables still count as failed in the "of all selected" table rate."""

    @property
    def ids(self) -> tuple[str, ...]:
        """Every selected id, runnable or not, sorted."""
        return tuple(sorted([t.id for t in self.tasks] + [tid for tid, _ in self.skipped]))


def parse_shard(text: str) -> Shard:
    """``"2/4"`` -> ``Shard(2, 4)``; anything else is a one-line :class:`UserError`."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise UserError(f"--shard {text!r} is not K/N", fix="write e.g. --shard 1/4")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 1 <= index <= count:
        raise UserError(f"--shard {text}: K must be between 1 and N",
                        fix="shards are numbered 1..N, e.g. --shard 1/4")
    return Shard(index, count)


def subset_ids(data: Dataset, name: str) -> tuple[str, ...]:
    """Ids of a built-in subset (all, runnable, has-gold) or of one named in the suite file."""
    if name == "all":
        return data.ids()
    if name == "runnable":
        return tuple(t.id for t in data.tasks if t.runnable)
    if name == "has-gold":
        return tuple(t.id for t in data.tasks if t.has_gold)
    if name in data.suite.subsets:
        return data.suite.subsets[name]
    known = ", ".join([*BUILTIN_SUBSETS, *sorted(data.suite.subsets)])
    raise UserError(f"unknown subset {name!r}", path=data.suite.path, fix=f"known: {known}")


GLOB_CHARS = frozenset("*?[")


def expand_globs(data: Dataset, ids: Sequence[str]) -> tuple[str, ...]:
    """Task ids as given, a shell-style pattern (``'gym*'``, ``'xero_new00?'``) replaced by
    every id it matches (``fnmatchcase``: ids are case-sensitive folder names). A pattern that
    matches nothing is one line naming it, as an unknown id is."""
    out: list[str] = []
    empty: list[str] = []
    for tid in ids:
        if not GLOB_CHARS & set(tid):
            out.append(tid)
            continue
        matched = [known for known in data.ids() if fnmatch.fnmatchcase(known, tid)]
        if not matched:
            empty.append(tid)
        out.extend(matched)
    if empty:
        raise UserError(f"no task id matches {', '.join(map(repr, empty))}", path=data.root,
                        fix="see `spider2local list` for the task ids")
    return tuple(out)


def select_tasks(data: Dataset, ids: Sequence[str] = (), *, subset: str | None = None,
                 shard: Shard | None = None, limit: int | None = None) -> Selection:
    """Resolve the command line's selection against ``data`` (see the module docstring).

    Unknown ids (given or listed in a suite subset) raise :class:`UserError` naming them.
    """
    if ids and subset is not None:
        raise UserError("give task ids or --subset, not both")
    if limit is not None and limit < 1:
        raise UserError(f"--limit {limit} must be at least 1")
    wanted = expand_globs(data, ids) if ids else subset_ids(data, subset or "all")
    unknown = sorted({tid for tid in wanted if data.get(tid) is None})
    if unknown:
        where = f"subset {subset!r}" if subset else "the command line"
        raise UserError(f"unknown task id(s) in {where}: {', '.join(unknown)}",
                        path=data.root, fix="see `spider2local list` for the task ids")
    chosen = sorted(set(wanted))
    if shard is not None:
        chosen = [tid for i, tid in enumerate(chosen) if i % shard.count == shard.index - 1]
    if limit is not None:
        chosen = chosen[:limit]
    specs = [t for t in (data.get(tid) for tid in chosen) if t is not None]
    return Selection(tuple(t for t in specs if t.runnable),
                     tuple((t.id, t.status) for t in specs if not t.runnable),
                     {t.id: len(t.graded_tables) for t in specs})

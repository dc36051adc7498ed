"""Kill every process working inside a folder: the last line of defence against orphans.

Its own module because three places need it and none should import the others: the runner after
each attempt, ``shell`` after the user's shell exits, and the run folder when it finds the
workspace of a run that was SIGKILLed (whose processes nobody else will ever stop). How they are
killed is the one policy of :mod:`spider2local.proc.kill`; this module only says which.

The runner also names the task database's files (``holding``): a process the agent detached
from its workspace (``env -i``, ``cd /``, a double fork) works nowhere near it, but while it
holds the database open its lock fails the checkpoint, and it would outlive the run.
"""

from __future__ import annotations

import functools
from collections.abc import Collection
from pathlib import Path

from spider2local.proc.kill import Finder, akill_processes, kill_processes
from spider2local.proc.procfs import FileId, holding, working_in

REAP_GRACE = 0.5
"""Seconds between SIGTERM and SIGKILL for workspace stragglers. Shorter than run_process's
grace because the reap runs after every attempt, its workspace is deleted right after, and
what it finds is already abandoned work (a forgotten ``dbt run &``): half a second lets such a
process run its SIGTERM handler and release the task database's lock, without making an
attempt that left stragglers wait long. Costs nothing when nothing is left (the usual case)."""


def _leftovers(root: Path, files: Collection[FileId]) -> list[int]:
    return [*working_in(root), *holding(files)]


def _finder(root: Path, files: Collection[FileId]) -> Finder:
    return functools.partial(_leftovers, root, frozenset(files))


def reap(root: Path, *, grace: float = REAP_GRACE,
         files: Collection[FileId] = ()) -> list[int]:
    """Kill every process whose working folder is inside ``root`` (a workspace), or that holds
    one of ``files`` open (:func:`~spider2local.proc.procfs.holding`); sync callers.

    run_process kills its own groups and the SDK its CLI, but a background ``dbt run &`` started
    by an agent belongs to neither. Such a process would keep the task database locked and
    outlive the run. Our own process is never touched. Returns the pids signalled.
    """
    return list(kill_processes(_finder(root, files), grace=grace).signalled)


async def areap(root: Path, *, grace: float = REAP_GRACE,
                files: Collection[FileId] = ()) -> list[int]:
    """:func:`reap` for async code: never blocks the event loop, never stopped halfway."""
    result = await akill_processes(_finder(root, files), grace=grace)
    return list(result.signalled)

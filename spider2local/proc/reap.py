"""Kill every process working inside a folder: the last line of defence against orphans.

Its own module because three places need it and none should import the others: the runner after
each attempt, ``shell`` after the user's shell exits, and the run folder when it finds the
workspace of a run that was SIGKILLed (whose processes nobody else will ever stop). How they are
killed is the one policy of :mod:`spider2local.proc.kill`; this module only says which.
"""

from __future__ import annotations

import functools
from pathlib import Path

from spider2local.proc.kill import akill_processes, kill_processes
from spider2local.proc.procfs import working_in

REAP_GRACE = 0.5
"""Seconds between SIGTERM and SIGKILL for workspace stragglers. Shorter than run_process's
grace because the reap runs after every attempt, its workspace is deleted right after, and
what it finds is already abandoned work (a forgotten ``dbt run &``): half a second lets such a
process run its SIGTERM handler and release the task database's lock, without making an
attempt that left stragglers wait long. Costs nothing when nothing is left (the usual case)."""


def reap(root: Path, *, grace: float = REAP_GRACE) -> list[int]:
    """Kill every process whose working folder is inside ``root`` (a workspace); sync callers.

    run_process kills its own groups and the SDK its CLI, but a background ``dbt run &`` started
    by an agent belongs to neither. Such a process would keep the task database locked and
    outlive the run. Our own process is never touched. Returns the pids signalled.
    """
    return list(kill_processes(functools.partial(working_in, root), grace=grace).signalled)


async def areap(root: Path, *, grace: float = REAP_GRACE) -> list[int]:
    """:func:`reap` for async code: never blocks the event loop, never stopped halfway."""
    result = await akill_processes(functools.partial(working_in, root), grace=grace)
    return list(result.signalled)

"""Kill every process working inside a folder: the last line of defence against orphans.

Its own module because three places need it and none should import the others: the runner after
each attempt, ``shell`` after the user's shell exits, and the run folder when it finds the
workspace of a run that was SIGKILLed (whose processes nobody else will ever stop).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from spider2local.proc.procfs import PROC, live_pids


def reap(root: Path) -> list[int]:
    """Kill every process whose working folder is inside ``root`` (a workspace).

    run_process kills its own groups and the SDK its CLI, but a background ``dbt run &`` started
    by an agent belongs to neither. Such a process would keep the task database locked and
    outlive the run. Our own process is never touched. Returns the pids killed.
    """
    killed: list[int] = []
    prefix = str(root)
    for pid in live_pids():
        try:
            cwd = str((PROC / str(pid) / "cwd").readlink())
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + os.sep):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                continue
    return killed

"""The live processes of this machine, read from /proc.

Three cleanups need "which processes are still alive" with different tests (a process group, a
working folder inside a workspace, a marker in the environment). They share this walk so that
all of them skip our own process and zombies the same way: ``kill(pid, 0)`` cannot tell a zombie
from a live process, and a zombie needs no killing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

PROC = Path("/proc")


def stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...), or
    ``None`` when the process is gone. The command name may hold spaces and parentheses."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def live_pids() -> Iterator[int]:
    """Every live, non-zombie process except our own."""
    me = os.getpid()
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        fields = stat_fields(int(entry.name))
        if fields and fields[0] != "Z":
            yield int(entry.name)

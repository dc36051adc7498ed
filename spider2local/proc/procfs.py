"""The live processes of this machine, read from /proc, and the finders built on them.

Four cleanups need "which processes are still alive" with different tests (a process group, a
working folder inside a workspace, a marker in the environment, a file held open): one finder
each, below, and :mod:`spider2local.proc.kill` kills what any of them finds the same way. They
share this walk so that all of them skip our own process and zombies the same way:
``kill(pid, 0)`` cannot tell a zombie from a live process, and a zombie needs no killing.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
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


# The finders: each answers "which live processes belong to this cleanup?" for one test, so
# that proc.kill can apply the one kill policy to any of them (bind the argument with
# functools.partial to get a :data:`spider2local.proc.kill.Finder`).


def group_members(pgid: int) -> list[int]:
    """Live processes of process group ``pgid``: what run_process started (it gives each child
    its own session).

    ``killpg(pgid, 0)`` is not enough: it succeeds while only unreaped zombies remain.
    """
    return [pid for pid in live_pids()
            if (fields := stat_fields(pid)) is not None and len(fields) > 2
            and int(fields[2]) == pgid]


def working_in(root: Path) -> list[int]:
    """Live processes whose working folder is ``root`` or inside it: what an agent left running
    in its workspace, whichever group or session it put itself in (``setsid dbt run &``)."""
    prefix = str(root)
    found = []
    for pid in live_pids():
        try:
            cwd = str((PROC / str(pid) / "cwd").readlink())
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + os.sep):
            found.append(pid)
    return found


def carrying_env(name: str, value: str) -> list[int]:
    """Live processes whose environment holds ``name=value``: a marker every descendant
    inherits, whichever group it is in or folder it works in (the Claude CLI's session).

    ``/proc/<pid>/environ`` is the environment the process started with, so a descendant that
    later unsets the variable is still found; one that was started without it is not.
    """
    needle = f"{name}={value}".encode()
    found = []
    for pid in live_pids():
        try:
            if needle in (PROC / str(pid) / "environ").read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:
            continue
    return found


FileId = tuple[int, int]
"""A file's ``(st_dev, st_ino)``: what it is, whichever name a process opened it by."""


def holding(files: Collection[FileId]) -> list[int]:
    """Live processes with one of ``files`` open: what keeps a task's database locked after its
    agent ended, wherever that process works and whatever its group, session or environment
    (a detached leftover: ``env -i``, ``cd /``, a double fork).

    Matched by identity, not by name: the kernel names an open file by the path it has now,
    and a file opened through another name (a hard link, a folder renamed since) is the same
    file, with the same DuckDB lock. The identities come from the caller's ``lstat`` of a
    plain file (never through a symlink), so this never finds a process for holding a file
    the agent only pointed at. Processes whose descriptors this user cannot read are skipped
    (they are not ours to kill either).
    """
    if not files:
        return []
    found = []
    for pid in live_pids():
        try:
            entries = list((PROC / str(pid) / "fd").iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                if not str(entry.readlink()).startswith("/"):
                    continue  # a pipe, a socket, an anonymous inode: never a file of ours
                info = entry.stat()
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in files:
                found.append(pid)
                break
    return found

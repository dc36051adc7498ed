"""What the runner may trust of what an agent left in its workspace: one rule, used by everyone
who reads a workspace file from outside the sandbox (checkpoint, scoring, the query tool,
artifacts, the kept database).

The agent can put anything in its workspace, including a symlink whose target it cannot see:
the path of a gold file is guessable from upstream's layout even where the sandbox hides it. The
runner sees every path, so following that link would hand the agent the gold (scored against
itself, opened read-write by the checkpoint, queried through the tool) or copy a runner-side file
into the run folder. A hard link to a file outside is the same attack by other means (impossible
across the sandbox's mounts, possible without isolation). So a workspace file is trusted only
when every component of its path below the workspace root is a real folder (no symlink), and it
is itself a regular file with a single link.

Light on purpose (stdlib only): the query tool's child process imports it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from spider2local.exceptions import ScoringError


class OutsideWorkspace(ScoringError):
    """A workspace path leads outside the workspace, or is not a plain regular file."""


class LockedOut(OutsideWorkspace):
    """The agent made a workspace file (or a folder on its way) unopenable for the runner:
    ``chmod 000``, ``chattr +i``. The runner made every such file writable, so the OS's
    "permission denied" there is the agent's doing, not the machine's: a verdict (no usable
    result), never an ``infrastructure`` error that a resume would run again for ever."""


def workspace_file(root: Path, path: Path) -> os.stat_result:
    """Check that ``path`` is a plain regular file inside ``root`` and return its ``lstat``.

    Raises :class:`FileNotFoundError` when it (or a folder on the way) does not exist, and
    :class:`OutsideWorkspace` when a component is a symlink or not a folder, or the file is not
    a regular file (a FIFO, a device, a folder) or has more than one link.
    """
    rel = path.relative_to(root)  # a path of ours: ValueError here is a bug, not an attack
    current = root
    for i, part in enumerate(rel.parts):
        current = current / part
        info = os.lstat(current)
        last = i == len(rel.parts) - 1
        if stat.S_ISLNK(info.st_mode):
            raise OutsideWorkspace(f"{current}: a symlink left in the workspace; "
                                   "not followed (it could lead outside)")
        if not last and not stat.S_ISDIR(info.st_mode):
            raise OutsideWorkspace(f"{current}: not a folder")
        if last and not stat.S_ISREG(info.st_mode):
            raise OutsideWorkspace(f"{current}: not a regular file")
        if last and info.st_nlink != 1:
            raise OutsideWorkspace(f"{current}: a hard link ({info.st_nlink} names); "
                                   "not read (it could be a file outside the workspace)")
    return info


WAL_SUFFIXES = (".wal", ".wal.recovery", ".wal.checkpoint")
"""The files DuckDB itself opens beside a database (and allows its SQL to read, even with
external access off): each one, where it exists, is held to the same rule as the database."""


def database_files(root: Path, db: Path) -> os.stat_result:
    """:func:`workspace_file` for ``db`` and each of its WAL siblings that exists (a symlink
    ``<db>.wal.recovery -> <gold>`` would be opened by DuckDB, or read by the agent's SQL
    through the one path DuckDB allows); returns the database's ``lstat``."""
    info = workspace_file(root, db)
    for suffix in WAL_SUFFIXES:
        sibling = db.with_name(db.name + suffix)
        if os.path.lexists(sibling):
            workspace_file(root, sibling)
    return info


def database_ids(root: Path, db: Path) -> tuple[tuple[int, int], ...]:
    """``(st_dev, st_ino)`` of ``db`` and of each WAL sibling that is a plain file of the
    workspace (:func:`workspace_file`): the files whose holders the runner kills after the
    agent stage (:func:`spider2local.proc.procfs.holding`). A symlink, a hard link or a special
    file is left out, so the agent can never point the runner at a file outside (and at the
    processes that hold it); the checkpoint refuses such a database anyway."""
    ids = []
    for path in (db, *(db.with_name(db.name + suffix) for suffix in WAL_SUFFIXES)):
        try:
            info = workspace_file(root, path)
        except (OSError, OutsideWorkspace):
            continue
        ids.append((info.st_dev, info.st_ino))
    return tuple(ids)


def is_workspace_file(root: Path, path: Path) -> bool:
    """:func:`workspace_file` as a yes/no (missing counts as no)."""
    try:
        workspace_file(root, path)
    except (OSError, OutsideWorkspace):
        return False
    return True


def opened_by_us(root: Path, path: Path) -> bool | None:
    """Did this process open ``path`` itself, and not a file a symlink swapped in meanwhile?

    Asked after a library (DuckDB) opened ``path`` by name, to close the window between our
    check and its ``open``: the kernel names each open file by the path it really has. ``None``
    where /proc/self/fd does not exist (not Linux): the check before the open has to do.
    Only ``root`` is resolved: below it a symlink swapped in must not be followed here either.
    """
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        return None
    wanted = Path(os.path.realpath(root)) / path.relative_to(root)
    for fd in fds.iterdir():
        try:
            if fd.readlink() == wanted:
                return True
        except OSError:
            continue
    return False

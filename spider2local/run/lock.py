"""One invocation at a time per run folder.

Two invocations with the same ``--run-id`` would each reset and re-run the other's unfinished
tasks (deleting its transcripts and workspaces mid-flight) and interleave run.json writes. An
advisory ``flock`` on ``<run>/.lock``, held for the whole invocation, prevents that. The kernel
drops the lock when its holder dies, even by SIGKILL, so a killed run never blocks its resume;
the file itself only records the holder's pid for the error message and is never deleted (a
deleted lock file could be locked twice through two different inodes).

Taking the lock is also the moment to clean up after an invocation that was killed: every
command on a run takes it, and holding it proves that invocation is gone
(:func:`spider2local.run.stale.recover_run`).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.layout import LOCK
from spider2local.run.stale import recover_run


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


@contextmanager
def run_lock(folder: RunFolder) -> Iterator[None]:
    """Hold the run's lock for the ``with`` block, or raise a one-line :class:`UserError`."""
    path = folder.root / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UserError(f"cannot open the run's lock file: {exc.strerror or exc}", path=path,
                        fix="pass a writable --runs-dir") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"run {folder.run_id} is in use by another spider2local process "
                            f"(pid {_holder(fd)})", path=folder.root,
                            fix="wait for it to finish, or pick another --run-id") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        recover_run(folder.root)
        yield
    finally:
        os.close(fd)  # releases the lock

"""One invocation at a time per run folder.

Two invocations with the same ``--run-id`` would each reset and re-run the other's unfinished
tasks (deleting its transcripts and workspaces mid-flight) and interleave run.json writes. An
advisory ``flock`` on ``<run>/.lock``, held for the whole invocation, prevents that. The kernel
drops the lock when its holder dies, even by SIGKILL, so a killed run never blocks its resume;
the file itself only records the holder's pid for the error message.

The file is removed when the invocation ends, so a finished run folder holds only results (a
``.lock`` left behind reads as "still running" to people and to tools copying the folder). A
deleted lock file could be locked twice through two inodes (one process waiting on the old
inode while another creates a new file), so the holder unlinks it while still holding the lock,
and whoever locks a file checks afterwards that it is still the one at the path, else starts
again on the new one (the usual pattern for removable lock files). Only a SIGKILLed invocation
leaves the file; the next one takes it over.

Taking the lock is also the moment to clean up after an invocation that was killed: every
command on a run takes it, and holding it proves that invocation is gone
(:func:`spider2local.run.stale.recover_run`).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from spider2local.core.layout import LOCK
from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.stale import recover_run


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def _still_at(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (its holder may have removed it meanwhile)."""
    try:
        seen = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (seen.st_dev, seen.st_ino) == (mine.st_dev, mine.st_ino)


def _locked_fd(folder: RunFolder, path: Path) -> int:
    """An fd holding the exclusive lock on the file at ``path`` (see the module docstring)."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UserError(f"cannot open the run's lock file: {exc.strerror or exc}",
                            path=path, fix="pass a writable --runs-dir") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UserError(f"run {folder.run_id} is in use by another spider2local process "
                            f"(pid {holder})", path=folder.root,
                            fix="wait for it to finish, or pick another --run-id") from None
        except BaseException:
            os.close(fd)
            raise
        if _still_at(fd, path):
            return fd
        os.close(fd)  # its holder removed it as we locked it: lock the new one


@contextmanager
def run_lock(folder: RunFolder) -> Iterator[None]:
    """Hold the run's lock for the ``with`` block, or raise a one-line :class:`UserError`;
    the lock file is gone once the block ends."""
    path = folder.root / LOCK
    fd = _locked_fd(folder, path)
    try:
        with suppress(OSError):  # the pid is only for the "in use" message: a full disk
            os.ftruncate(fd, 0)  # refuses it, and the lock holds without it
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        recover_run(folder.root)
        yield
    finally:
        # Unlinked before the close, while nobody else can hold it; in a folder that refuses
        # (made read-only meanwhile) the file stays and the next holder takes it over.
        with suppress(OSError):
            path.unlink(missing_ok=True)
        os.close(fd)  # releases the lock


def _left_behind(fd: int) -> bool:
    """Whether the lock file open at ``fd`` is held by nobody: a leftover of an invocation
    killed with SIGKILL (a merge reading this run). Then this reader adopts it, and removes it
    when done as if it had made it; only a run taking the lock removed it before, so a source
    of a killed merge kept its ``.lock`` for good."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held (shared by another reader, or by a run)
    return True


@contextmanager
def reading(folder: RunFolder) -> Iterator[None]:
    """Keep ``folder`` from being written while a command reads it whole (``merge``): a shared
    lock on its lock file for the ``with`` block, so an invocation starting on the run meanwhile
    refuses ("in use") instead of changing results half-copied; raises a one-line
    :class:`UserError` when an invocation holds it now. A folder we may not write (a read-only
    copy, a downloaded artifact) cannot be written by a run either: it is read as it is. A lock
    file this made is removed again, under the lock (the module docstring's protocol)."""
    path = folder.root / LOCK
    while True:
        made = False
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            made = True
        except FileExistsError:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # removed between the two opens: try again
            except OSError:
                fd = -1
            else:
                made = _left_behind(fd)
        except OSError:
            fd = -1
        if fd < 0:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise UserError(f"run {folder.run_id} is still being written (pid {holder})",
                            path=folder.root, fix="wait for it to finish, then merge") from None
        if _still_at(fd, path):
            break
        os.close(fd)
    try:
        yield
    finally:
        if made:
            with suppress(OSError):
                path.unlink()
        os.close(fd)


def in_use(folder: RunFolder) -> bool:
    """Whether an invocation holds the run's lock now (``spider2local runs`` says
    "running"). Looked at without creating or taking anything: a shared lock that cannot be
    had means an exclusive holder; no lock file, or one nobody holds, means nobody runs it (a
    file left by kill -9 holds no lock: the kernel dropped it)."""
    try:
        fd = os.open(folder.root / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False

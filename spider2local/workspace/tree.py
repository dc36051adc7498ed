"""Walk, read and delete trees an agent made: iteratively, never through a symlink, plain files.

Every tree the runner walks after an agent (its workspace to clean up, copy, collect, scan and
fingerprint) may be hostile. ``os.walk``, ``Path.rglob`` and ``shutil.rmtree`` recurse once per
level in Python 3.11: a 1,200-level tree (``mkdir -p $(printf 'd/%.0s' {1..1200})``) raised
RecursionError in the workspace clean-up, crashing the run, and every resume crashed the same
way on the same stale workspace. So the walks here keep their own stack, the removal goes down
and up by directory descriptors (no path grows past PATH_MAX, and at most two descriptors are
open at any depth), and a file is read only when it is a regular file: opening a FIFO the agent
left (its writer died with the sandbox) blocks for ever, and a device is not the agent's work.

Light on purpose (stdlib only): the integrity scan and the query tool's child import it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

Check = Callable[[], None]
"""Called once per entry walked: raises to stop a walk (the stage deadline of
:mod:`spider2local.proc.watchdog`)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SpecialFile(OSError):
    """A path that should be a regular file is a FIFO, socket, device or folder."""


def _nothing() -> None:
    return None


def walk_files(top: Path, *, skip_top: Collection[str] = (),
               check: Check | None = None) -> Iterator[tuple[Path, os.stat_result]]:
    """Every regular file under ``top`` with its ``lstat``, in sorted depth-first order.

    Symlinks are neither followed nor yielded (a link to ``/`` would walk the runner's whole
    file system), nor is a ``top`` that is itself a symlink; FIFOs, sockets and devices are
    skipped; a folder that cannot be listed (removed meanwhile, made unreadable, a path past
    PATH_MAX) is skipped. ``skip_top``: names left out at the top level. ``check`` is called
    for each entry and may raise to stop the walk."""
    tick = check or _nothing
    try:
        if not stat.S_ISDIR(os.lstat(top).st_mode):
            return
    except OSError:
        return
    stack: list[Path] = [top]
    while stack:
        folder = stack.pop()
        tick()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for entry in entries:
            tick()
            if folder == top and entry.name in skip_top:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                subdirs.append(Path(entry.path))
            elif stat.S_ISREG(info.st_mode):
                yield Path(entry.path), info
        stack.extend(reversed(subdirs))  # popped in sorted order


def walk_dirs(top: Path, *, check: Check | None = None) -> Iterator[Path]:
    """Every real folder under ``top`` (``top`` included), never through a symlink."""
    tick = check or _nothing
    stack = [top]
    while stack:
        folder = stack.pop()
        tick()
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                continue
            with os.scandir(folder) as it:
                subdirs = sorted(Path(e.path) for e in it if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        yield folder
        stack.extend(reversed(subdirs))


def open_regular(path: Path) -> int:
    """Open ``path`` read-only when it is a regular file, never following a final symlink and
    never blocking (``O_NONBLOCK``: a FIFO opens at once, then is refused). Raises
    :class:`SpecialFile` for anything else (asked before opening too: opening a device can act
    on it); the caller closes the descriptor."""
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise SpecialFile(errno.EINVAL, "not a regular file", str(path))
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecialFile(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The content of a regular file (at most ``limit`` bytes), refusing a symlink, a FIFO, a
    socket or a device (:class:`SpecialFile`, an OSError: callers that skip unreadable files
    skip these too)."""
    with os.fdopen(open_regular(path), "rb") as fh:
        return fh.read() if limit is None else fh.read(limit)


def copy_regular(src: Path, dst: Path) -> None:
    """Copy a regular file's content to ``dst``, refusing special files as :func:`read_regular`
    does (``shutil.copyfile`` checks with a separate ``stat``, which a swap can pass)."""
    with os.fdopen(open_regular(src), "rb") as fin, dst.open("wb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)


def remove_tree(root: Path) -> None:
    """Delete ``root`` and everything under it, at any depth, even where the agent took the
    permissions away (``chmod 000`` folders are given back ``0700`` on the way down).

    Iterative, by descriptors: the current folder is the only one open; going up is ``..``
    from it (nothing moves the tree: its processes are dead). A symlink is removed, never
    followed. Raises OSError for what cannot be removed (``chattr +i``, a busy mount)."""
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        root.unlink()
        return
    root.chmod(0o700)
    fd = os.open(root, _DIR_FLAGS)
    stack: list[tuple[str, list[str]]] = [("", _clear(fd))]
    try:
        while True:
            name, subdirs = stack[-1]
            if subdirs:
                sub = subdirs.pop()
                os.chmod(sub, 0o700, dir_fd=fd)  # a folder (seen by lstat), not a link
                child = os.open(sub, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                stack.append((sub, _clear(fd)))
                continue
            stack.pop()
            if not stack:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
    root.rmdir()


def _clear(fd: int) -> list[str]:
    """Unlink every entry of the folder ``fd`` that is not a folder; return the folders."""
    subdirs = []
    with os.scandir(fd) as it:
        entries = list(it)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            subdirs.append(entry.name)
        else:
            os.unlink(entry.name, dir_fd=fd)
    return subdirs


def disk_usage(top: Path, *, check: Check | None = None) -> int:
    """Bytes of disk the tree under ``top`` holds (allocated blocks of every entry, so a sparse
    file counts what it really takes), never through a symlink; 0 when ``top`` is gone."""
    tick = check or _nothing
    total = 0
    stack = [top]
    while stack:
        folder = stack.pop()
        tick()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += info.st_blocks * 512
            if stat.S_ISDIR(info.st_mode):
                stack.append(Path(entry.path))
    return total

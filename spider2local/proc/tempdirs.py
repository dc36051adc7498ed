"""Temporary folders named after the process that owns them, so a later command can find the
ones a killed process left and remove them safely.

The runner removes its temporary folders (the agent sandbox's launcher folder, the snapshot of a
database, ``shell``'s scratch folder, the probe file of the header check, date derivation's
rebuilds) in ``finally`` blocks; only a kill it cannot catch (SIGKILL, the OOM killer, power
loss) leaves one behind, and a workspace's record in the run folder does not name them. So each
is named ``spider2local-tmp-<kind>-<pid>-<start>-<random>``: the owner's pid and its start time
(clock ticks since boot, from /proc, so a recycled pid is not mistaken for the owner).
:func:`remove_orphans` deletes the folders of that shape whose owner no longer runs, and nothing
else: any other name, a symlink, or a live owner is left alone.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spider2local.proc.procfs import stat_fields

PREFIX = "spider2local-tmp-"
_OWNED = re.compile(rf"^{re.escape(PREFIX)}([a-z]+)-(\d+)-(\d+)-")


def _start_ticks(pid: int) -> int:
    """The process's start time in clock ticks since boot, or 0 where /proc does not say."""
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields else 0
    except (IndexError, ValueError):
        return 0


@functools.cache
def _own_tag() -> str:
    return f"{os.getpid()}-{_start_ticks(os.getpid())}"


def owned_prefix(kind: str) -> str:
    """The name prefix of a temporary folder of ``kind`` owned by this process."""
    if os.getpid() != int(_own_tag().split("-")[0]):  # a forked child: its own tag
        _own_tag.cache_clear()
    return f"{PREFIX}{kind}-{_own_tag()}-"


def make_owned_dir(kind: str, parent: Path | None = None) -> Path:
    """``mkdtemp`` with a name :func:`remove_orphans` can attribute to this process."""
    return Path(tempfile.mkdtemp(prefix=owned_prefix(kind), dir=parent))


def _owner_alive(pid: int, start: int) -> bool:
    if pid == os.getpid():
        return start == _start_ticks(pid) or start == 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: not ours to judge
    now = _start_ticks(pid)
    return start == 0 or now == 0 or now == start


def orphans(parent: Path | None = None) -> list[Path]:
    """The owned temporary folders in ``parent`` (default: the system temp folder) whose
    owner is gone."""
    base = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = _OWNED.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir():
            continue
        if not _owner_alive(int(match.group(2)), int(match.group(3))):
            found.append(entry)
    return sorted(found)


def remove_orphans(parent: Path | None = None) -> list[Path]:
    """Delete :func:`orphans`; returns those removed (one that resists is skipped)."""
    removed = []
    for folder in orphans(parent):
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            removed.append(folder)
    return removed


@contextmanager
def owned_tempdir(kind: str) -> Iterator[Path]:
    """:func:`make_owned_dir` for a ``with`` block, removed at its end
    (``tempfile.TemporaryDirectory`` with an attributable name)."""
    folder = make_owned_dir(kind)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)

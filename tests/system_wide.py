"""Tests that touch what the whole machine sees, kept apart by a lock rather than by a worker.

Some tests put gold where every process on the machine sees it (``/opt``, ``/usr/local``, the
venv: tests/agents/claude/test_hide_by_real_path.py); others search the whole file system from
inside a sandbox (``find / -name '*.duckdb'``) and fail if they find a database that belongs to
no dataset of their run. The first kind *writes* machine-wide, the second *searches* it:

- ``@pytest.mark.system_wide("writes")`` holds an exclusive lock from setup to teardown;
- ``@pytest.mark.system_wide("searches")`` holds it shared (searches never disturb each other).

Why a lock and not ``xdist_group`` with ``--dist loadgroup``: that grouping silently stopped
working with pytest 9.2, whose structured node ids ignore the suffix xdist writes
(pytest-dev/pytest-xdist#1386, open; measured here: the writers and the searches ran on three
workers at once and CI failed on a gold file another worker had just made). A lock holds
whatever the scheduler does, and also between two test sessions on one machine (a CI clone and a
developer's run): the lock file is in the machine's temporary folder, the files it guards are
machine-wide too.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Generator
from pathlib import Path

import pytest

MARK = "system_wide"
MODES = {"writes": fcntl.LOCK_EX, "searches": fcntl.LOCK_SH}

LOCK_FILE = Path(os.environ.get("SPIDER2LOCAL_TESTS_SYSTEM_WIDE_LOCK")
                 or Path(tempfile.gettempdir()) / "spider2local-tests-system-wide.lock")
"""Shared by every session on the machine (by every user too: created world-readable, and a
read-only descriptor is enough for ``flock``). The variable gives the plugin's own test a lock
of its own (tests/test_helpers.py)."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARK}(mode): 'writes' or 'searches' what the whole machine sees; "
                   "kept apart by a machine-wide lock (tests/system_wide.py)")


def _open_lock(path: Path) -> int:
    """A descriptor on the lock file, made if missing. Opened without ``O_CREAT`` first: in a
    sticky /tmp, ``fs.protected_regular`` refuses ``O_CREAT`` on a file another user made."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    except FileExistsError:  # another session made it meanwhile
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    os.fchmod(fd, 0o444)  # whatever the umask: every user's sessions open it
    return fd


def _mode(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker(MARK)
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("mode"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A mark with another mode fails its test, naming the two (a typo must not leave a test
    unguarded)."""
    mode = _mode(item)
    if mode is not None and mode not in MODES:
        pytest.fail(f"@pytest.mark.{MARK} takes 'writes' or 'searches', not {mode!r}",
                    pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item,
                            nextitem: pytest.Item | None) -> Generator[None, object, object]:
    """Holds the lock from the item's setup to its teardown (function-scoped fixtures, which
    make and remove the machine-wide files, run inside it)."""
    operation = MODES.get(_mode(item) or "")
    if operation is None:
        return (yield)
    fd = _open_lock(LOCK_FILE)
    try:
        fcntl.flock(fd, operation)  # retried after a signal (PEP 475)
        return (yield)
    finally:
        os.close(fd)  # releases the lock

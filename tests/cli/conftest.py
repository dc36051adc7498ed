"""Fixtures shared by the CLI's end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def kill_leftovers() -> Iterator[set[int]]:
    """Pids a test deliberately orphans (SIGKILL of the runner); killed at the end."""
    pids: set[int] = set()
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.kill(pid, signal.SIGKILL)

"""Is a DuckDB error a lock held by another process, and how long to wait for it to go away.

A running ``dbt run`` (the agent's, or one just killed) holds DuckDB's exclusive file lock, which
blocks even read-only readers. Three places wait on it: the start-database snapshot (then reads a
copy), the checkpoint before scoring (then a ScoringError, recorded as the task's checkpoint error
with its traceback in error.txt) and the agent's query child (then tells the agent). They share
one test (:func:`spider2local.core.faults.is_lock_error`, owned with the other fault rules)
and this one retry loop, so a corrupt file ("Corrupt database file ... in block
...": "block" holds "lock") is never mistaken for a lock and waited on, and the three never drift
apart on what a lock looks like.

The query child (``python -m spider2local.dbtools.query``) imports this module on every
agent query, so it imports only the standard library: duckdb is never needed to recognise the
message, and the caller already holds the exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from spider2local.core.faults import DatabaseLocked, is_lock_error

__all__ = ["DatabaseLocked", "LockWait", "is_lock_error", "retry_on_lock"]
T = TypeVar("T")


@dataclass(frozen=True)
class LockWait:
    """How long to keep trying a locked file: a deadline, with exponential backoff between tries.

    A deadline rather than a count of attempts, because what the callers promise is time ("the
    query waits up to 20 s"); backoff because a lock held by a whole ``dbt run`` lasts seconds,
    one left by a killed process a few milliseconds.
    """

    seconds: float
    """Total time to keep trying; no attempt starts after it has passed."""
    first_delay: float = 0.1
    max_delay: float = 2.0


def retry_on_lock(action: Callable[[], T], wait: LockWait) -> T:
    """Run ``action`` until it does not fail on a lock, or ``wait`` runs out.

    Any other exception passes through at once (a corrupt or missing file does not heal by
    waiting). Raises :class:`DatabaseLocked`, chained to the last lock error, when the next
    sleep would pass the deadline.
    """
    started = time.monotonic()
    deadline = started + wait.seconds
    delay = wait.first_delay
    attempts = 0
    while True:
        attempts += 1
        try:
            return action()
        except Exception as exc:
            if not is_lock_error(exc):
                raise
            if time.monotonic() + delay > deadline:
                raise DatabaseLocked(exc, attempts, time.monotonic() - started) from exc
        time.sleep(delay)
        delay = min(delay * 2, wait.max_delay)

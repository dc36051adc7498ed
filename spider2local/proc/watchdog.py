"""Deadlines for the stages after the agent: checkpoint, score, scan and collect.

Each of them reads what the agent left, in a worker thread of the runner, and each could be
made to hang by it: a FIFO left as the database's ``.wal`` blocked the checkpoint for ever, and
graded tables left as views that never finish (a recursive CTE without end, a cross join of
two ranges of 10^8) blocked the scorer for ever, with no deadline anywhere after the agent.

How a stage is stopped, measured (duckdb 1.5, 2 loaded cores):

- DuckDB's ``interrupt()`` from a timer thread stopped both views in 10-30 ms
  (``InterruptException``), and the connection stays usable; it cannot stop a blocking system
  call (a FIFO's ``read``) nor pandas/numpy work. Costs nothing when nothing hangs.
- A child process per stage can always be killed, but each costs a fresh interpreter importing
  duckdb and pandas: 2.6-3.3 s per task measured under load (0.4-0.7 s for duckdb alone), paid
  by every task and every test run of the runner.

So a stage runs in the runner's worker thread under a :class:`Watchdog`: every DuckDB
connection the stage opens is registered (:func:`watched`) and interrupted when the deadline
passes; the runner's own loops (tree walks, the scan's lines) call :func:`check` per entry and
stop there; and blocking system calls are not left to the deadline at all: FIFOs, sockets and
devices are refused before anything opens them (:mod:`spider2local.workspace.tree`,
:mod:`spider2local.workspace.guard`). Should a stage still not return ``GRACE`` seconds after
its deadline, the runner stops waiting for it (the worker thread is abandoned, said in the
result) so that the task still gets a result and the run goes on.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread

from spider2local.exceptions import DeadlinePassed

T = TypeVar("T")
GRACE = 5.0
"""Seconds after a stage's deadline before the runner stops waiting for its thread."""
_current = threading.local()


class Interruptible(Protocol):
    def interrupt(self) -> None: ...


class Watchdog:
    """The deadline of one stage running in one worker thread."""

    def __init__(self, stage: str, seconds: float) -> None:
        self.stage, self.seconds = stage, seconds
        self.expired = threading.Event()
        self._lock = threading.Lock()
        self._connections: list[Interruptible] = []

    def register(self, con: Interruptible) -> None:
        with self._lock:
            self._connections.append(con)
            late = self.expired.is_set()
        if late:
            _interrupt(con)

    def expire(self) -> None:
        """The deadline passed: interrupt every connection, make :func:`check` raise."""
        with self._lock:
            self.expired.set()
            connections = list(self._connections)
        for con in connections:
            _interrupt(con)

    def check(self) -> None:
        if self.expired.is_set():
            raise DeadlinePassed(self.stage, self.seconds)

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call ``fn`` in this thread under the deadline; raises :class:`DeadlinePassed` when
        it passed, whatever ``fn`` returned or raised meanwhile (an interrupted read of a
        graded table scores 0 inside the scorer: that must not become a verdict)."""
        timer = threading.Timer(self.seconds, self.expire)
        timer.daemon = True
        _current.dog = self
        timer.start()
        try:
            value = fn(*args, **kwargs)
        except DeadlinePassed:
            raise
        except Exception as exc:
            if self.expired.is_set():
                raise DeadlinePassed(self.stage, self.seconds) from exc
            raise
        finally:
            timer.cancel()
            _current.dog = None
        if self.expired.is_set():
            raise DeadlinePassed(self.stage, self.seconds)
        return value


def _interrupt(con: Interruptible) -> None:
    with contextlib.suppress(Exception):  # a closed connection has nothing left to stop
        con.interrupt()


def watched(con: T) -> T:
    """Register a DuckDB connection with the stage running in this thread (if any), so that
    its deadline interrupts the query in progress; returns ``con``."""
    dog: Watchdog | None = getattr(_current, "dog", None)
    if dog is not None:
        dog.register(con)  # type: ignore[arg-type]
    return con


def check() -> None:
    """Raise :class:`DeadlinePassed` when the stage running in this thread is past its
    deadline; nothing outside a stage."""
    dog: Watchdog | None = getattr(_current, "dog", None)
    if dog is not None:
        dog.check()


async def bounded(stage: str, seconds: float, fn: Callable[..., T], *args: Any,
                  **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` in a worker thread under a deadline of ``seconds``.

    Raises :class:`DeadlinePassed` once the deadline passed and the stage stopped, or, when
    it did not stop within :data:`GRACE` more seconds, abandons the thread and raises it then
    (with that said): the task ends within its deadline plus the grace, whatever it left."""
    dog = Watchdog(stage, seconds)
    call = functools.partial(dog.run, fn, *args, **kwargs)
    with anyio.move_on_after(seconds + GRACE) as scope:
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    assert scope.cancelled_caught
    raise DeadlinePassed(stage, seconds, f"still running {GRACE:g}s later; its thread was "
                                         "abandoned")

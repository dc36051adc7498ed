"""The one way this program kills a set of processes.

Three cleanups kill processes (a finished or timed-out process group, whatever an agent left
running in its workspace, a Claude CLI session and its children); they differ only in how they
FIND their processes (the finders of :mod:`spider2local.proc.procfs`), never in how they kill:

1. SIGTERM every process found, so dbt and DuckDB can release their locks and exit cleanly;
2. wait up to ``grace`` seconds for the finder to come back empty;
3. SIGKILL whatever the finder still finds (also anything forked meanwhile), and wait again;
4. unlink the ``/dev/shm`` files libfaketime leaves behind for every pid that was signalled.

Our own process is never signalled, whatever the finder returns; zombies do not count as alive
(the finders are built on :func:`~spider2local.proc.procfs.live_pids`): a zombie runs nothing
and only its parent can make it go away.

The policy is written once, as a generator that yields how long to sleep before its next step
(the "sans-I/O" style of h11/httpx), and driven twice: :func:`kill_processes` sleeps with
``time.sleep`` for sync callers; :func:`akill_processes` runs each step (a /proc walk, about
20 ms on a loaded machine) in a worker thread and sleeps with ``anyio.sleep``, so it never
blocks the event loop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

Finder = Callable[[], Iterable[int]]
"""Returns the live pids (no zombies) that the kill is about; called again at every step."""

KILL_GRACE = 2.0
"""Default seconds between SIGTERM and SIGKILL: lets dbt/DuckDB release file locks cleanly."""
KILL_WAIT = 5.0
"""Seconds to wait for SIGKILLed processes to disappear (a process in uninterruptible I/O
takes a moment) before reporting that some are still there."""
POLL = 0.05
"""Seconds between two checks: nothing notifies us when a process that is not our child
exits, so we poll; each check is a /proc walk, so not much faster than this."""
SHM_DIR = Path("/dev/shm")
_hurried = threading.Event()


def hurry() -> None:
    """From now on, kills skip their grace: SIGKILL at once (the user asked twice to stop).

    Process-wide on purpose: it is what a second Ctrl-C means, for every kill in progress and
    every one still to come in the shutdown. Kills already past their SIGTERM stop waiting at
    their next poll."""
    _hurried.set()


def unhurry() -> None:
    """A new run starts (:func:`spider2local.run.plan.until_signal`): kills get their grace
    again. Only matters where one process runs several times (tests, library use)."""
    _hurried.clear()


@dataclass(frozen=True)
class KillResult:
    """What a kill did: the pids that received a signal, and whether the finder came back
    empty at the end (False: something survived SIGKILL, e.g. stuck in the kernel)."""

    signalled: tuple[int, ...]
    gone: bool


def faketime_leftovers(pid: int) -> tuple[Path, Path]:
    """The shared-memory files libfaketime creates for ``pid`` (a segment and a semaphore).

    Its exit handler removes them, which a signal skips: without the cleanup every killed faked
    process (each timed-out dbt) would leak two files into /dev/shm.
    """
    return SHM_DIR / f"faketime_shm_{pid}", SHM_DIR / f"sem.faketime_sem_{pid}"


def _found(find: Finder) -> list[int]:
    me = os.getpid()
    return [pid for pid in dict.fromkeys(find()) if pid != me]


def _send(pids: Iterable[int], sig: signal.Signals, signalled: dict[int, None]) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:  # gone meanwhile, or not ours to signal
            continue
        signalled[pid] = None


def _policy(find: Finder, grace: float, kill_wait: float) -> Generator[float, None, KillResult]:
    """The kill policy, step by step; yields the seconds to sleep before the next step."""
    signalled: dict[int, None] = {}  # ordered set: the order signals went out
    left = _found(find)
    if not left:
        return KillResult(signalled=(), gone=True)
    # Only the processes found now get SIGTERM: one forked later (a trap's cleanup command,
    # say) is left to finish its work until the grace ends, as with a killpg.
    _send(left, signal.SIGTERM, signalled)
    deadline = time.monotonic() + grace
    while (left := _found(find)) and time.monotonic() < deadline and not _hurried.is_set():
        yield POLL
    deadline = time.monotonic() + kill_wait
    settled = False
    while left or not settled:
        if not left:
            # Empty once is not gone yet: under load a shell's two background children were
            # seen to outlive the kill of their group (forked as it died, listed a moment
            # later). Look once more after a poll; only kills that found something pay it.
            settled = True
            yield POLL
            left = _found(find)
            continue
        _send(left, signal.SIGKILL, signalled)  # again each round: catches late forks
        if time.monotonic() >= deadline:
            break
        yield POLL
        left = _found(find)
    for pid in signalled:
        for path in faketime_leftovers(pid):
            with contextlib.suppress(OSError):
                path.unlink()
    return KillResult(signalled=tuple(signalled), gone=not left)


def _step(policy: Generator[float, None, KillResult]) -> float | KillResult:
    """Advance the policy by one step: a sleep to do, or the final result. (A StopIteration
    must not cross a thread or coroutine boundary, hence the translation.)"""
    try:
        return next(policy)
    except StopIteration as stop:
        result: KillResult = stop.value
        return result


def kill_processes(find: Finder, *, grace: float = KILL_GRACE,
                   kill_wait: float = KILL_WAIT) -> KillResult:
    """Kill what ``find`` finds (SIGTERM, ``grace``, SIGKILL), from sync code. Blocks up to
    ``grace + kill_wait`` seconds when something resists; returns at once when nothing is
    found."""
    policy = _policy(find, grace, kill_wait)
    while True:
        step = _step(policy)
        if isinstance(step, KillResult):
            return step
        time.sleep(step)


async def akill_processes(find: Finder, *, grace: float = KILL_GRACE,
                          kill_wait: float = KILL_WAIT) -> KillResult:
    """:func:`kill_processes` for async code: the /proc walks run in a worker thread, the
    waits are ``anyio.sleep``.

    Shielded from cancellation on its own: a kill stopped halfway (SIGTERM sent, SIGKILL
    never) is the worst outcome, and this is always cleanup. It returns within
    ``grace + kill_wait`` seconds (plus the walks), and a pending cancellation is delivered
    at the caller's next checkpoint.
    """
    with anyio.CancelScope(shield=True):
        result = await _drive(_policy(find, grace, kill_wait))
    return result


async def _drive(policy: Generator[float, None, KillResult]) -> KillResult:
    """Run the policy from async code: each step in a worker thread, each wait on the loop."""
    while True:
        step = await anyio.to_thread.run_sync(_step, policy)
        if isinstance(step, KillResult):
            return step
        await anyio.sleep(step)

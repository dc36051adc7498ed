"""``clock_selftest``: prove on this machine that the fake clock works and cannot hang dbt.

A libfaketime that loads is not enough: the wrong build or recipe fakes the date but makes
``time.sleep`` fail or thread-pool waits hang, which shows up hours later as a stuck task. So the
doctor runs the real thing in child processes: the date DuckDB sees, and a threaded workload
with sleeps and queue timeouts that must finish in bounded time.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path
from typing import NamedTuple

import anyio

from spider2local.clock.faketime import Clock, find_library, find_real_dbt, strip_fake_clock
from spider2local.exceptions import ClockError
from spider2local.proc.run import run_process
from spider2local.resources import faketime_dir

SELFTEST_DATE = datetime.date(2024, 1, 15)
"""Far from any real "today", so a check that passes cannot be a coincidence."""

_DATE_SCRIPT = "import duckdb; print(duckdb.sql('select current_date').fetchone()[0])"

# Each task waits on a queue timeout and a sleep (they hang if the monotonic clock is faked);
# then 4 threads fight for the GIL on pure CPU work (without FAKETIME_FORCE_MONOTONIC_FIX=0 the
# GIL's timed waits spin). Prints the slowest wait and the CPU time of the CPU phase, all
# threads: CPU, not the phase's wall time, since spinning threads burn both cores (measured:
# 2.0 s of CPU against 0.22 s, in 1.1 s of wall against 0.22 s) whereas the wall time ratio was
# 4-5x and, with 0.5 s allowed for noise, let the spinning recipe pass a check now and then.
# CPU time hardly moves with the machine's load (0.22-0.23 s with three busy loops beside it,
# where the spinning recipe still used 0.9-1.6 s), so the allowance is small. getrusage is not
# faked by the preload (0.22 s faked and real).
_THREAD_SCRIPT = """
import concurrent.futures, queue, resource, time
def cpu():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime
def wait(i):
    start = time.monotonic()
    try:
        queue.Queue().get(timeout=0.2)
    except queue.Empty:
        pass
    time.sleep(0.1)
    return time.monotonic() - start
def burn(i):
    total = 0
    for k in range(1_000_000):
        total += k
    return total
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    slowest = max(pool.map(wait, range(8)))
    start = cpu()
    list(pool.map(burn, range(8)))
    print(slowest, cpu() - start)
"""
CPU_SLOWDOWN_LIMIT = 2.0
"""Faked CPU phase may use at most this many times the unfaked one's CPU, plus
:data:`CPU_NOISE`."""
CPU_NOISE = 0.1
"""Seconds of CPU allowed beyond the ratio (see the script's comment)."""


class SelfCheck(NamedTuple):
    """One line of the doctor's report."""

    name: str
    ok: bool
    detail: str


async def check_fake_date(env: dict[str, str], limit: float) -> SelfCheck:
    name = "fake date in a child (DuckDB current_date)"
    result = await run_process([sys.executable, "-c", _DATE_SCRIPT], env=env, timeout=limit)
    seen = result.stdout.strip()
    if result.timed_out or result.returncode != 0:
        return SelfCheck(name, False, f"child failed: {result.stderr.strip()[-300:] or 'timeout'}")
    ok = seen == SELFTEST_DATE.isoformat()
    return SelfCheck(name, ok, f"expected {SELFTEST_DATE}, DuckDB said {seen}")


class _ChildFailed(Exception):
    """The thread script hung or crashed; the message says which."""


async def _thread_timings(env: dict[str, str], limit: float) -> tuple[float, float]:
    """(slowest wait, CPU seconds of the CPU phase) of the thread script; :class:`_ChildFailed`
    if it hung or crashed."""
    result = await run_process([sys.executable, "-c", _THREAD_SCRIPT], env=env, timeout=limit)
    if result.timed_out:
        raise _ChildFailed(f"hung: killed after {limit:.0f}s")
    if result.returncode != 0:
        raise _ChildFailed(f"child failed: {result.stderr.strip()[-300:]}")
    slowest, cpu = (float(x) for x in result.stdout.split())
    return slowest, cpu


async def check_threads(env: dict[str, str], limit: float) -> SelfCheck:
    name = "threads, sleep and queue timeouts under the preload"
    try:
        slowest, cpu = await _thread_timings(env, limit)
    except _ChildFailed as exc:
        return SelfCheck(name, False, str(exc))
    try:
        real_cpu = (await _thread_timings(strip_fake_clock(env), limit))[1]
    except _ChildFailed as exc:
        return SelfCheck(name, False, f"unfaked {exc}")
    # Each task must really wait its 0.3 s: a much shorter wait means timeouts fire at once.
    ok = slowest >= 0.29 and cpu <= CPU_SLOWDOWN_LIMIT * real_cpu + CPU_NOISE
    return SelfCheck(name, ok, f"slowest wait {slowest:.2f}s (expect 0.3), 4-thread CPU "
                               f"{cpu:.2f}s faked vs {real_cpu:.2f}s real")


def _check_shim() -> SelfCheck:
    name = "dbt shim and real dbt"
    shim = faketime_dir() / "dbt"
    if not os.access(shim, os.X_OK):
        return SelfCheck(name, False, f"{shim} is missing or not executable")
    try:
        real = find_real_dbt(faketime_dir())
    except ClockError as exc:
        return SelfCheck(name, False, str(exc))
    return SelfCheck(name, True, f"shim {shim} -> {real}")


async def run_clock_selftest(library: Path | None = None, *,
                             limit: float = 60.0) -> list[SelfCheck]:
    """Run every check (each child gets `limit` seconds); a failed check never raises."""
    try:
        found = find_library(library)
    except ClockError as exc:
        return [SelfCheck("libfaketime library", False, str(exc))]
    env = Clock(SELFTEST_DATE, found).faked_env(os.environ)
    return [
        SelfCheck("libfaketime library", True, str(found)),
        await check_fake_date(env, limit),
        await check_threads(env, limit),
        _check_shim(),
    ]


def clock_selftest(library: Path | None = None) -> list[SelfCheck]:
    """Synchronous entry point for ``spider2local doctor`` (not for use inside an event loop)."""
    return anyio.run(run_clock_selftest, library)

"""The one subprocess helper: every child process of the runner goes through :func:`run_process`.

Children (dbt, python checks, the agent's tools) can hang, spawn their own children, or print
megabytes. So every child gets its own session/process group, both pipes are drained at the same
time (a full stderr pipe must never block a child we only read stdout from), the deadline is an
anyio deadline, and whatever way the call ends (normal exit, timeout, cancellation) the whole
group is killed (SIGTERM, a short grace, SIGKILL) inside a shielded scope: no orphan survives.

A timeout is not an exception: it is the ordinary result of a slow task, so it comes back as a
:class:`ProcessResult` with ``timed_out=True`` (returncode is then the negative signal number).
Cancellation is propagated after the cleanup. A missing executable raises the usual
``OSError`` from the start.

A ``kill -9`` of the runner skips all of that: so each child is also told to die with its parent
(Linux's ``PR_SET_PDEATHSIG``) through util-linux ``setpriv --pdeathsig KILL``, which sets it
and then execs the program (same pid, ~1 ms per call measured, against ~11 ms for a Python
wrapper calling ``prctl``; anyio's ``open_process`` has no ``preexec_fn``). The signal follows
the THREAD that forked the child: anyio forks from the event loop's thread, which lives as long
as the runner. It reaches the child only, not what the child forks (the shim execs dbt, so dbt
is the child): the next command on the run reaps the rest (:mod:`spider2local.run.stale`).
Without ``setpriv`` (macOS, util-linux < 2.33) children start as before, and ``doctor`` says so.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc

from spider2local.proc.kill import KILL_GRACE, akill_processes
from spider2local.proc.procfs import group_members

DEFAULT_OUTPUT_LIMIT = 1 << 20
"""Bytes kept per stream (the tail): enough for any dbt log worth reading, bounded memory."""


@dataclass(frozen=True)
class ProcessResult:
    """How a child process ended; ``stdout``/``stderr`` keep the last ``output_limit`` bytes."""

    args: tuple[str, ...]
    pid: int
    """Also the process group id: lets callers and tests check the whole group is gone."""
    returncode: int
    stdout: str
    stderr: str
    duration: float
    timed_out: bool
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class _Tail:
    """A byte buffer that keeps only the last ``limit`` bytes (amortised trimming)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.data = bytearray()
        self.truncated = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > 2 * self.limit + 65536:
            self._trim()

    def _trim(self) -> None:
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]
            self.truncated = True

    def text(self) -> str:
        self._trim()
        return self.data.decode("utf-8", errors="replace")


async def kill_process_group(pgid: int, *, grace: float = KILL_GRACE) -> bool:
    """Kill process group ``pgid`` with the one kill policy (:mod:`spider2local.proc.kill`):
    SIGTERM, up to ``grace`` seconds, SIGKILL, libfaketime leftovers removed.

    Returns True if the group is gone afterwards. Safe to call on a group that already ended;
    never interrupted halfway by a cancellation.
    """
    result = await akill_processes(functools.partial(group_members, pgid), grace=grace)
    return result.gone


async def _drain(stream: anyio.abc.ByteReceiveStream | None, tail: _Tail) -> None:
    if stream is None:
        return
    async for chunk in stream:
        tail.add(chunk)


async def _feed(stream: anyio.abc.ByteSendStream | None, data: bytes) -> None:
    if stream is None:
        return
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(data)
    await stream.aclose()


async def _supervise(process: anyio.abc.Process, out: _Tail, err: _Tail,
                     input: bytes | None, grace: float) -> None:
    """Drain both pipes and feed stdin until the child exits and its pipes reach EOF.

    When the leader exits, leftover group members (background children) may keep the pipes
    open forever: they are killed so the drains can finish.
    """
    async with anyio.create_task_group() as tg:
        tg.start_soon(_drain, process.stdout, out)
        tg.start_soon(_drain, process.stderr, err)
        if input is not None:
            tg.start_soon(_feed, process.stdin, input)
        await process.wait()
        await kill_process_group(process.pid, grace=grace)


@functools.cache
def text_file_busy(exc: BaseException) -> bool:
    """Did starting a program fail with ETXTBSY: a script we had just written, still open for
    writing in a child that another thread forked meanwhile (it closes it at its own exec, a
    moment later)? Retrying is the fix; see :attr:`spider2local.sandbox.launcher.Launcher.argv`
    for how our own starts avoid it."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ETXTBSY:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def pdeathsig_wrapper() -> tuple[str, ...]:
    """The argv prefix that makes a child die with the runner (empty when unavailable)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return ()
    try:
        probe = subprocess.run([setpriv, "--pdeathsig", "KILL", "true"], capture_output=True,
                               timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return (setpriv, "--pdeathsig", "KILL") if probe.returncode == 0 else ()


def _program(argv0: str, env: Mapping[str, str] | None,
             cwd: str | os.PathLike[str] | None) -> str:
    """``argv0`` as the wrapper will exec it, checked now: a missing program must still raise
    FileNotFoundError here, not become the wrapper's exit code 127."""
    if os.sep in argv0:
        path = Path(argv0) if cwd is None else Path(cwd) / argv0  # "/" keeps an absolute one
        if not os.access(path, os.X_OK) or path.is_dir():
            raise FileNotFoundError(errno.ENOENT, "no such executable", argv0)
        return str(path)
    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    found = shutil.which(argv0, path=search)
    if found is None:
        raise FileNotFoundError(errno.ENOENT, "not found on PATH", argv0)
    return found


async def run_process(
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None,  # noqa: ASYNC109 (a plain argument is the API every caller wants)
    input: bytes | None = None,
    output_limit: int = DEFAULT_OUTPUT_LIMIT,
    grace: float = KILL_GRACE,
) -> ProcessResult:
    """Run ``args`` to completion (or ``timeout`` seconds) and return its :class:`ProcessResult`.

    ``env`` replaces the environment entirely (None inherits ours). ``timeout=None`` means no
    deadline, which callers must choose explicitly. stdin is /dev/null unless ``input`` is given.
    """
    argv = tuple(os.fspath(a) for a in args)
    out, err = _Tail(output_limit), _Tail(output_limit)
    started = time.monotonic()
    wrapper = pdeathsig_wrapper()
    command = (*wrapper, _program(argv[0], env, cwd), *argv[1:]) if wrapper else argv
    # Shielded: the child exists once the fork is done, but open_process still awaits its
    # pipes; a cancellation there lost the process object, so nothing killed the child
    # (measured under load: a cancelled `sh -c 'sleep 90 & sleep 60'` left both sleeps). A
    # pending cancellation now arrives at the first await below, whose finally kills.
    with anyio.CancelScope(shield=True):
        process = await anyio.open_process(
            command, cwd=cwd, env=dict(env) if env is not None else None,
            start_new_session=True,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
    try:
        with anyio.move_on_after(timeout) as deadline:
            await _supervise(process, out, err, input, grace)
    finally:
        with anyio.CancelScope(shield=True):
            await kill_process_group(process.pid, grace=grace)
            await process.aclose()
    returncode = process.returncode
    return ProcessResult(
        args=argv, pid=process.pid,
        returncode=returncode if returncode is not None else -signal.SIGKILL,
        stdout=out.text(), stderr=err.text(), duration=time.monotonic() - started,
        timed_out=deadline.cancelled_caught,
        stdout_truncated=out.truncated, stderr_truncated=err.truncated,
    )

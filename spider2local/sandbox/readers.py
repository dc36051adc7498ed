"""Sandboxes for the runner's own DuckDB readers: the query tool's child, the checkpoint, the
start-database snapshot and the scorer each run as a child process in a sandbox of their own.

Why, when :mod:`spider2local.db.connect` already locks every connection down: a reader runs SQL
the agent wrote (its views, its queries) with the runner's rights, outside the agent's sandbox.
One DuckDB setting that allows more than it should (the temp directory did: issue 19) hands
the agent the host. So the reader's whole process sees only what it needs: the Python runtime
and the package, read-only, and the files of its job (the result; the gold file for the
scorer; the workspace and the start copy for the query tool). A view over any host path, a
``<database>.tmp`` symlink, ``read_*``, ``glob``, ``ATTACH``, ``COPY`` or an extension then
finds nothing of the host to read even if DuckDB let it through: the second line of defence.

The sandbox is the agent's launcher (:mod:`.launcher`, user/mount/PID namespaces through
util-linux ``unshare``) around ``python -I -m <module>``; it is used wherever
:func:`.probe.probe` says namespaces work, whatever ``--isolation`` the agent got (a reader's
cost is a few tens of ms: ``benchmarks/bench_readers.py``). Where they do not work (macOS, a
restricted container), readers run as plain children, locked down by their configuration
alone, and the first one says so on stderr: visibly, never silently.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from spider2local.core.faults import died_of_memory
from spider2local.exceptions import SandboxFailed
from spider2local.proc.run import ProcessResult, run_process
from spider2local.sandbox.launcher import Launcher, SandboxSpec
from spider2local.sandbox.probe import probe
from spider2local.sandbox.reply import answer_of
from spider2local.sandbox.spec import always_hidden, installed_package, runtime_paths

log = logging.getLogger(__name__)

READER_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
              "HOME": "/nonexistent"}
"""A reader's whole environment unless the caller gives one (the query tool gives the task's
clock): nothing of the runner's (API keys, tokens) reaches a process that runs agent SQL."""


IN_PROCESS_ENV = "SPIDER2LOCAL_READERS"
"""Set to ``in-process`` by the test suite, never by a user: the readers of the ``sandbox``
package (checkpoint, snapshot, graded copy, scorer) then do their job in a worker thread of
the runner instead of a sandboxed child. Why it exists: a trial starts three reader children,
each a fresh interpreter importing duckdb (the scorer pandas too); for a test's trial that
builds a three-model project or nothing at all they cost more CPU than the trial itself
(measured: a noop trial of the sample suite, 1.5 s of CPU, nearly all of it in them), and the
suite runs hundreds of trials whose subject is neither the readers nor their sandbox. What it
gives up, which is why it is for tests only: agent SQL runs in the runner's own process with
its rights, its environment and its memory, and a reader stuck in a system call can only be
abandoned, not killed. Said on stderr once, as the fallback without namespaces is."""
IN_PROCESS = "in-process"


def reader_mode() -> tuple[bool, str] | None:
    """What :data:`IN_PROCESS_ENV` asks for: ``None`` when unset, else whether the readers run
    in-process and the one line that says so (read at each call: a test sets it for itself
    alone). The one owner of the rule: the runner's warning and doctor's check both read it.
    Any value but ``in-process`` is refused aloud and the readers stay in their sandboxes."""
    value = os.environ.get(IN_PROCESS_ENV, "")
    if not value:
        return None
    if value == IN_PROCESS:
        return True, (f"DuckDB readers run IN THE RUNNER'S PROCESS ({IN_PROCESS_ENV}="
                      f"{IN_PROCESS}, a mode for the test suite): agent SQL is not sandboxed")
    return False, (f"{IN_PROCESS_ENV}={value!r} is not a mode (only {IN_PROCESS!r}, for "
                   "tests); DuckDB readers stay in their sandboxes")


def in_process() -> bool:
    """Whether the readers run in-process (:func:`reader_mode`), said on stderr once."""
    mode = reader_mode()
    if mode is None:
        return False
    _say_mode(mode[1])
    return mode[0]


@functools.cache
def _say_mode(line: str) -> None:
    """On stderr, once per process and line."""
    print(f"warning: {line}", file=sys.stderr)


@dataclass(frozen=True)
class ReaderFiles:
    """What one reader may see besides the runtime: each path bound at its own path."""

    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    """What must stay absent where it lies under a bound folder (the run's off-limits list)."""


def reader_spec(program: Path, files: ReaderFiles) -> SandboxSpec:
    """The sandbox of one reader: the runtime and the package read-only, then its files."""
    package = installed_package()
    hidden = [p for p in (*always_hidden(), *files.hidden) if p != package]
    return SandboxSpec(program=program,
                       read_only=(*runtime_paths(), package, *files.read_only),
                       writable=files.writable, hidden=tuple(hidden))


@functools.cache
def unsandboxed_reason() -> str | None:
    """Why readers run without a sandbox here (``None``: they are sandboxed); said once."""
    found = probe()
    if found.ok:
        return None
    reason = f"DuckDB readers run WITHOUT a sandbox ({found.reason}); only their locked-down " \
             f"configuration keeps agent SQL off the host. To sandbox them: {found.fix}"
    print(f"warning: {reason}", file=sys.stderr)
    return found.reason


def import_root() -> Path:
    """The ``sys.path`` entry this process imported spider2local from (a checkout's root for an
    editable install, site-packages for a wheel)."""
    return installed_package().parent


_RUN_MODULE = ("import runpy, sys; sys.path.insert(0, {root!r}); "
               "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def python_module(module: str) -> list[str]:
    """``python -m module`` in isolated mode (``-I``: no cwd, no user site, no PYTHON* variables
    on the path), importing the spider2local this runner runs: its :func:`import_root` goes
    first on the child's path. ``-I`` alone left the child to find the package through
    site-packages, which is another copy (or none: "No module named 'spider2local'") when the
    runner's came from ``PYTHONPATH`` or from a venv whose ``lib`` is a symlink."""
    return [sys.executable, "-I", "-c",
            _RUN_MODULE.format(root=str(import_root()), module=module)]


async def run_reader(argv: Sequence[str], files: ReaderFiles, *, input: bytes,
                     timeout: float | None,  # noqa: ASYNC109 (run_process's API)
                     env: Mapping[str, str] | None = None,
                     output_limit: int | None = None) -> ProcessResult:
    """Run ``argv`` (a Python reader child) in its own sandbox holding ``files``; without
    namespaces here, as a plain child (see the module docstring). Raises
    :class:`~spider2local.exceptions.SandboxFailed` when the sandbox could not be built."""
    env = dict(READER_ENV if env is None else env)
    extra: dict[str, Any] = {} if output_limit is None else {"output_limit": output_limit}
    if unsandboxed_reason() is not None:
        return await run_process(argv, cwd="/", env=env, timeout=timeout, input=input, **extra)
    # planned in a worker thread: the plan stats every off-limits path (hundreds), which
    # blocked the event loop, and every other task of the run with it, for as long
    launcher = await anyio.to_thread.run_sync(Launcher, reader_spec(Path(argv[0]), files))
    try:
        done = await run_process([*launcher.argv, *argv[1:]], cwd="/", env=env,
                                 timeout=timeout, input=input, **extra)
        failure = None if done.returncode == 0 or done.timed_out else launcher.failure()
    finally:
        launcher.remove()
    if failure is not None:  # the reader never ran: no answer of it to read
        raise SandboxFailed(failure)
    return done


class ReaderFailed(Exception):
    """A reader child ended without its answer (killed, crashed, timed out)."""


async def ask_reader(module: str, request: Mapping[str, Any], files: ReaderFiles, *,
                     timeout: float | None) -> dict[str, Any]:  # noqa: ASYNC109
    """Send ``request`` as JSON to ``python -I -m module`` in its sandbox and return the one
    JSON object it prints last. Raises :class:`ReaderFailed` when there is none. In the test
    suite's mode (:data:`IN_PROCESS_ENV`) a reader of this package answers in-process."""
    if in_process() and module.startswith(f"{__package__}."):
        return await _ask_in_process(module, request, timeout=timeout)
    done = await run_reader(python_module(module), files, input=json.dumps(request).encode(),
                            timeout=timeout)
    if done.timed_out:
        raise ReaderFailed(f"{module} ran longer than {timeout:g} s and was stopped")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        failed = ReaderFailed(f"{module} failed (exit {done.returncode}): {tail}")
        if died_of_memory(done.returncode, done.stderr):
            # died of the machine (a MemoryError, DuckDB's out of memory, the kernel's
            # SIGKILL): chained so the one classifier records infrastructure, not a verdict
            raise failed from MemoryError(tail)
        raise failed
    return answer


async def _ask_in_process(module: str, request: Mapping[str, Any], *,
                          timeout: float | None) -> dict[str, Any]:  # noqa: ASYNC109
    """:func:`ask_reader`'s answer from the module's ``_job`` run in a worker thread (see
    :data:`IN_PROCESS_ENV`): the request and the answer go through JSON as the child's do, so
    the caller reads exactly what a child would have printed. A job past ``timeout`` (or
    cancelled by the caller's deadline) is abandoned to finish on its own."""
    job = importlib.import_module(module)._job  # each reader module's handler
    sent = json.loads(json.dumps(request))
    scope = anyio.fail_after(timeout) if timeout is not None else contextlib.nullcontext()
    try:
        with scope:
            answer = await anyio.to_thread.run_sync(answer_of, job, sent,
                                                    abandon_on_cancel=True)
    except TimeoutError:
        raise ReaderFailed(f"{module} ran longer than {timeout:g} s and was stopped") from None
    read: dict[str, Any] = json.loads(json.dumps(answer, default=str))
    return read


def ask_reader_sync(module: str, request: Mapping[str, Any], files: ReaderFiles, *,
                    timeout: float | None) -> dict[str, Any]:
    """:func:`ask_reader` from synchronous code: the CLI's ``score``, or a worker thread of the
    runner (the workspace's snapshot, the checkpoint), each in a loop of its own.

    In a worker thread the reader also ends when the task that started the thread is
    cancelled (Ctrl-C, SIGTERM, a stage's deadline; not inside a shielded scope): its child is
    killed and reaped in this loop, and the thread raises that cancellation. A cancelled task
    used to wait for its reader (a checkpoint waiting on a lock: its whole lock time), and a
    child killed with the run's tree could end after this loop closed (asyncio's watcher then
    logged "Loop ... that handles pid N is closed"). Not by running the child in the runner's
    own loop (:func:`anyio.from_thread.run`): a review found 40 waiting threads deadlock it
    (the child's kill steps need a token of the default thread limiter they hold), and a
    thread whose task was cancelled just before it asked left the loop spinning for ever."""
    ask = functools.partial(ask_reader, module, request, files, timeout=timeout)
    try:
        anyio.from_thread.check_cancelled()  # cancelled already: asks nothing
    except RuntimeError:  # not an anyio worker thread: nothing to follow
        return anyio.run(ask)
    answer = anyio.run(_unless_host_cancelled, ask)
    if answer is None:
        anyio.from_thread.check_cancelled()  # raises the host's cancellation, as anyio would
        raise AssertionError("the reader was stopped without a cancelled host")
    return answer


HOST_POLL = 0.2
"""Seconds between two looks at the cancel scope of the task waiting for a worker thread:
anyio tells a thread it is cancelled only when asked (:func:`anyio.from_thread.check_cancelled`)."""


async def _unless_host_cancelled(
        ask: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any] | None:
    """``ask()``'s answer, or ``None`` once the host task is cancelled (the reader cancelled,
    its child killed and reaped by :func:`~spider2local.proc.run.run_process`)."""
    answer: dict[str, Any] | None = None
    failed: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_host, tg.cancel_scope)
        try:
            answer = await ask()
        except Exception as exc:  # raised as it is below, not in the task group's group
            failed = exc
        tg.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return answer


async def _watch_host(scope: anyio.CancelScope) -> None:
    # polled: anyio has no event for a host's cancellation, only the question
    while not _host_cancelled():  # noqa: ASYNC110
        await anyio.sleep(HOST_POLL)
    scope.cancel()


def _host_cancelled() -> bool:
    try:
        anyio.from_thread.check_cancelled()
    except anyio.get_cancelled_exc_class():
        return True
    return False


def bound(paths: Iterable[Path]) -> tuple[Path, ...]:
    """Each existing path and its ``.wal`` (DuckDB reads committed data from it), absolute as
    given: the launcher binds both that and the real path (a gold file opened through the
    dataset's ``evaluation_suite`` symlink keeps its name, which its views are bound to)."""
    found: list[Path] = []
    for path in paths:
        for p in (path, path.with_name(path.name + ".wal")):
            if p.exists():
                found.append(Path(os.path.abspath(p)))  # noqa: PTH100 (links not resolved)
    return tuple(dict.fromkeys(found))

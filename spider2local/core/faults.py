"""Is an error the machine's fault? The one classifier every place that records a task error asks.

A full disk, a permission refused on our own folders, a database locked by another process, too
many open files or no memory say nothing about the agent's work: scoring such a task would turn
a fault of the machine into a verdict (a reference run that should pass 4/4 stayed 0/4 after the
disk was freed). So a task that fails this way is recorded with ``ErrorKind.INFRASTRUCTURE``,
never scored, and run again by a resume (:func:`spider2local.run.resume.is_finished`). Except
when the agent caused it: a disk its own workspace filled (:mod:`.blame` owns that rule, the
runner asks it after the agent started) is a verdict, never a free re-run.

The exception is walked with its causes (``raise ... from``) and contexts, because ours wrap
the OS's: a ScoringError "cannot checkpoint" carries DuckDB's IO error, which carries the text
"No space left on device". DuckDB's errors have no errno, only their message, so for them (and
for the output of a dbt process, which is text by then) the message is what is read.
"""

from __future__ import annotations

import errno
import re
import signal
from collections.abc import Iterator

from spider2local.exceptions import SandboxFailed

_LOCK_MESSAGE = re.compile(r"(?:IO Error: )?Could not set lock on file ")
"""DuckDB's message, anchored at its start: ``IO Error: Could not set lock on file "<path>":
Conflicting lock is held in <program> (PID <n>)``. Anchored so a path or any other text that
merely contains the words (or "lock" inside "block") never matches."""


def is_lock_error(exc: BaseException) -> bool:
    """True only for DuckDB's "Could not set lock on file" (another process holds the file)."""
    return _LOCK_MESSAGE.match(str(exc)) is not None


class DatabaseLocked(Exception):
    """The file stayed locked for the whole :class:`LockWait`."""

    def __init__(self, last: BaseException, attempts: int, waited: float) -> None:
        super().__init__(f"still locked after {attempts} attempts over {waited:.1f} s: {last}")
        self.last = last
        self.attempts = attempts
        self.waited = waited


MACHINE_ERRNOS = frozenset({
    errno.ENOSPC,  # no space left on device
    errno.EDQUOT,  # disk quota exceeded
    errno.EROFS,  # read-only file system
    errno.EACCES,  # permission denied
    errno.EPERM,  # operation not permitted
    errno.EMFILE,  # too many open files (this process)
    errno.ENFILE,  # too many open files (the system)
    errno.ENOMEM,  # cannot allocate memory
})
"""OS errors that no change to a task or to the agent's work can cause or cure."""

_MEMORY_TEXT = re.compile(r"Cannot allocate memory|Out of Memory Error"
                          r"|failed to allocate data of size|can't start new thread"
                          r"|\bMemoryError\b|std::bad_alloc")
"""Running out of memory as the OS (``ENOMEM``'s strerror), DuckDB, Python and C++ word it. A
thread whose stack cannot be mapped is ``RuntimeError: can't start new thread``, which under
``ulimit -v 450000`` made dbt fail and the task score ``failed``, kind agent."""

_TLS_ABORT_EXIT = 127
_TLS_ABORT_TEXT = "cannot allocate memory for thread-local data: ABORT"
"""glibc's loader ends a process whose thread cannot get its thread-local block so, with exit
127, as dbt did under ``ulimit -v 330000`` with duckdb 1.5.2 (the task scored ``failed``, kind
agent). Counted only with that exit: dbt exits 0, 1 or 2 itself, and a model's own error text
(``select error('...')``, which an agent writes) comes with those, so the agent cannot forge it
into a re-run. Not glibc's "cannot allocate memory in static TLS block": a library too big for
the static block fails alike on every run."""

_MACHINE_TEXT = re.compile(
    r"No space left on device|Disk quota exceeded|Read-only file system|Too many open files|"
    + _MEMORY_TEXT.pattern)
"""How the machine's faults read in DuckDB's messages and in a dbt process's output: the
OS's strerror texts and every :data:`_MEMORY_TEXT`."""

KILLED_EXITS = frozenset({-signal.SIGKILL, 128 + signal.SIGKILL})
"""How a child we started reports a SIGKILL we did not send (-9 from the child itself, 137
through a shell such as the dbt shim): the kernel's out-of-memory killer. Callers leave out
the kills of their own timeouts, which are the agent's verdict."""
_PERMISSION_TEXT = re.compile(r"Permission denied|Operation not permitted")


def names_machine_fault(text: str) -> bool:
    """True when ``text`` (a dbt process's output, an error message) reports a full disk, a
    read-only file system, too many open files or no memory.

    Permission and lock messages are left out on purpose: in free text they may be about a
    file the agent's own SQL tried to read, or a lock its own background dbt holds.
    """
    return _MACHINE_TEXT.search(text) is not None


CANNOT_EXECUTE = 126
"""The exit code of a shell (the dbt shim's ``exec``) that found the program but could not run it:
its file or its interpreter not executable, or unreadable, for this user."""
_EXEC_REFUSED_TEXT = re.compile(r"Permission denied|Operation not permitted|Exec format error"
                                r"|cannot execute|bad interpreter")


def is_machine_failure(returncode: int | None, output: str) -> bool:
    """True when a process we started (dbt, through the shim; a reader child) ended for the
    machine's sake: its output names a fault of :func:`names_machine_fault`, it was killed
    by a SIGKILL (:data:`KILLED_EXITS`; the caller rules out its own timeout kill first), or
    it could not be executed at all (exit 126 with the shell's "Permission denied"; the venv's
    interpreter unreadable for this user). dbt itself exits 0, 1 or 2, so 126 and 137 are
    never a verdict on the SQL it ran; a reference task failed ``0/1`` as the agent's fault
    before this."""
    if names_machine_fault(output) or died_of_memory(returncode, output):
        return True
    return returncode == CANNOT_EXECUTE and _EXEC_REFUSED_TEXT.search(output) is not None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then its causes and contexts, each once (a cycle in the chain is possible)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)


def _is_duckdb(exc: BaseException) -> bool:
    # Read by module rather than isinstance so this module never imports duckdb (the agent's
    # query child and every CLI call import the run package).
    return type(exc).__module__.split(".")[0] in {"duckdb", "_duckdb"}


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The machine faults an agent can cause on purpose by writing: see :mod:`.blame`."""
_DISK_FULL_TEXT = re.compile(r"No space left on device|Disk quota exceeded")


def names_disk_full(text: str) -> bool:
    """True when ``text`` (an agent's recorded error, a DuckDB message) reports ENOSPC or
    EDQUOT by their strerror texts."""
    return _DISK_FULL_TEXT.search(text) is not None


def is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` or anything it wraps is a full disk or an exceeded quota: an OS error
    in :data:`DISK_FULL_ERRNOS`, or a DuckDB error whose message says so. A subset of
    :func:`is_machine_fault`: the one fault an agent can bring about by itself."""
    return any((isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS)
               or (_is_duckdb(err) and names_disk_full(str(err))) for err in _chain(exc))


def is_locked(exc: BaseException) -> bool:
    """True when ``exc`` or anything it wraps is a DuckDB file held by another process (a
    lock that outlived its wait, :class:`DatabaseLocked`, or DuckDB's own lock message)."""
    return any(isinstance(err, DatabaseLocked) or is_lock_error(err) for err in _chain(exc))


def is_machine_fault(exc: BaseException) -> bool:
    """True when ``exc`` or anything it wraps is a fault of the machine: an OS error in
    :data:`MACHINE_ERRNOS`, :class:`MemoryError`, a sandbox that could not be built, a
    DuckDB file locked by another process (:func:`spider2local.db.locks.is_lock_error`, the
    one owner of that test), or a DuckDB
    error whose message reports one of those faults."""
    for err in _chain(exc):
        if isinstance(err, MemoryError | DatabaseLocked | SandboxFailed):
            return True
        if isinstance(err, OSError) and err.errno in MACHINE_ERRNOS:
            return True
        if is_lock_error(err):
            return True
        if _is_duckdb(err) and (names_machine_fault(str(err))
                                or _PERMISSION_TEXT.search(str(err))):
            return True
    return False


def died_of_memory(returncode: int | None, output: str) -> bool:
    """True when a child we started ended for want of memory: its output says so
    (:data:`_MEMORY_TEXT`), it was killed by a SIGKILL we did not send (:data:`KILLED_EXITS`)
    or glibc ended it for a thread's memory (:data:`_TLS_ABORT_TEXT`, with its exit).
    Narrower than :func:`is_machine_failure`: a full disk is left to :mod:`.blame`, which may
    make it the agent's verdict."""
    return (returncode in KILLED_EXITS or _MEMORY_TEXT.search(output) is not None
            or (returncode == _TLS_ABORT_EXIT and _TLS_ABORT_TEXT in output))


def is_out_of_memory(exc: BaseException) -> bool:
    """True when ``exc`` or anything it wraps (task groups' exception groups included) is
    :class:`MemoryError` or the :class:`RuntimeError` of a thread that could not be started
    (its stack could not be mapped): the runner itself cannot go on, and the command ends
    with one line saying so instead of a traceback."""
    return any(isinstance(err, MemoryError)
               or (isinstance(err, RuntimeError) and "can't start new thread" in str(err))
               for err in _chain(exc))


def describe(exc: BaseException) -> str:
    """The message recorded for a machine fault: the innermost OS or DuckDB text (what is
    full, which path), prefixed by our own one-line context when that says something else."""
    inner = [e for e in _chain(exc) if isinstance(e, OSError) or _is_duckdb(e)]
    outer = str(exc) or type(exc).__name__
    if not inner or inner[0] is exc or str(inner[0]) in outer:
        return outer
    return f"{outer}: {inner[0]}"

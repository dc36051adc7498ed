"""Warm dbt: one server per workspace forks a child per dbt call (see README.md here).

Two roles in one standalone file (the spider2local package is hidden inside the sandbox; this
folder is not): ``serve`` is the server, started once per workspace under the task's fake clock
(libfaketime preloaded with the shim's one recipe); it imports dbt, dbt-duckdb and what a run
loads, and never parses a project nor opens a database. Anything else is the CLIENT, run by the
dbt shim instead of the real dbt: it passes its argv, working folder (as a descriptor), environment,
umask and standard streams (SCM_RIGHTS) to the server, which forks one child per call. The child
takes them over, puts libfaketime's clock back to noon of the task's date (a forked child would
otherwise continue the server's clock, which started when the server did), and runs dbt's own
console entry point in-process. Its exit status becomes the client's.

The client falls back to a cold ``exec`` of the real dbt whenever the warm path cannot serve
the call exactly as a cold dbt would (no server, a dead server, another protocol, another date,
library, dbt or start-up environment), and says so once in ``SPIDER2LOCAL_DBT_RUNS``.

Signals sent to the client (INT, TERM, HUP, QUIT, USR1, USR2) are forwarded to the child; the
child watches its connection and kills its process group when the client is gone (a kill -9 of
the client included), so a child never outlives its caller. PR_SET_PDEATHSIG would tie the
child to the SERVER, its parent, which is the wrong process; the connection is the caller's.

Only the standard library here (the client starts in ~15 ms with ``-I -S``).
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import datetime
import functools
import io
import json
import os
import platform
import selectors
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable

PROTOCOL = "spider2local-warm-dbt/1"
SOCKET_ENV = "SPIDER2LOCAL_WARM_DBT"
"""The server's socket; set (by the runner) only where a warm server is started."""
LIBRARY_ENV = "SPIDER2LOCAL_LIBFAKETIME"
REAL_DBT_ENV = "SPIDER2LOCAL_REAL_DBT"
RUNS_ENV = "SPIDER2LOCAL_DBT_RUNS"
STARTING_NAME = "starting"
"""Beside the socket while the server imports: its pid. A call then waits for the server
instead of running cold beside it (both would pay the same imports, on the same CPUs)."""
START_WAIT = 90.0
NOTE_NAME = "warm-dbt.txt"
"""In ``SPIDER2LOCAL_DBT_RUNS``: the one note of why a call went cold (the runner reads it)."""
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)
MAX_MESSAGE = 1 << 20
STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_")
STARTUP_NAMES = ("LANG", "LANGUAGE", "TZ", "HOME")
"""Variables a Python process or dbt reads once at start-up or import (the interpreter, the
dynamic loader, the locale, the time zone, ``~``): a call whose values differ from the server's
runs cold, since a forked child cannot re-read them."""
PRELOADS = ("dbt.cli.main", "dbt.adapters.duckdb", "dbt.adapters.duckdb.impl", "duckdb",
            "dbt.parser.manifest", "dbt.task.run", "dbt.task.build", "dbt.task.compile",
            "dbt.task.show", "dbt.task.test", "dbt.task.seed", "dbt.task.snapshot",
            "dbt.task.list", "dbt.task.debug", "dbt.task.clean", "dbt.task.run_operation",
            "dbt.task.docs.generate", "dbt.task.freshness", "dbt.task.retry", "dbt.task.clone",
            "dbt.task.deps", "dbt.context.providers", "dbt.parser.models", "dbt.parser.schemas",
            "dbt.parser.sources", "dbt.parser.generic_test", "dbt.parser.macros",
            "dbt.compilation", "dbt.graph.selector", "dbt.artifacts.schemas.run",
            "dbt.contracts.graph.manifest", "agate", "jinja2", "msgpack",
            "dbt_common.clients.jinja",
            "dbt.mp_context", "multiprocessing.dummy", "concurrent.futures.thread",
            "dbt.adapters.duckdb.environments.local", "dbt_common.clients.agate_helper",
            "google.protobuf.descriptor_pb2", "babel.dates", "_strptime",
            "multiprocessing.resource_tracker", "resource")
"""What a ``dbt run`` of a DuckDB project imports, imported once by the server (missing ones
are skipped: the list is an optimisation, never a requirement)."""
SCHEMAS = ("dbt.contracts.project.ProjectFlags", "dbt.contracts.project.ProfileConfig",
           "dbt.contracts.project.Project", "dbt.contracts.project.PackageConfig",
           "dbt.contracts.project.Configuration", "dbt.contracts.selection.SelectorFile",
           "dbt.adapters.duckdb.credentials.DuckDBCredentials", "dbt.task.test.TestResultData")
"""Classes dbt validates a project, profile or test result against on every call: their JSON
schemas are built once per process (``dbtClassMixin.json_schema`` is an ``lru_cache``), 0.6 s
of a warm ``dbt run`` here. The server builds them; missing names are skipped."""
COMPILED = ("to_dict", "from_dict", "from_msgpack")
"""mashumaro methods dbt's dataclasses compile on first use (``lazy_compilation``): a call
compiled ~110 of them, 1.3 s of a 2.4 s warm ``dbt run --select`` (measured, library001).
Each child tells the server which it compiled; the server compiles those (:func:`learned`),
so the next calls find them done."""
MAX_LEARNED = 60_000
"""Bytes a child may report (a pipe's buffer holds them without blocking the child)."""
WARM_SLICE = 0.05
"""Seconds of warming between two looks at the socket: a call waits at most about this."""
_SYS_CLOCK_GETTIME = {"x86_64": 228, "amd64": 228, "aarch64": 113, "arm64": 113}
_CLOCKS = (time.CLOCK_REALTIME, time.CLOCK_MONOTONIC, getattr(time, "CLOCK_MONOTONIC_RAW", 4),
           getattr(time, "CLOCK_BOOTTIME", 7))
"""libfaketime's ``struct system_time_s``: real, mon, mon_raw, boot (Linux has CLOCK_BOOTTIME)."""


class Refused(Exception):
    """The warm path cannot serve this call as a cold dbt would: run it cold."""


class ChildExit(BaseException):
    """Raised in a forked child once dbt is done: unwinds to :func:`serve_main`, which exits
    through the interpreter's normal shutdown (atexit handlers, flushed streams), as cold."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# ----------------------------------------------------------------------------------- framing
def _send(sock: socket.socket, kind: str, data: object = None,
          fds: list[int] | None = None) -> None:
    payload = json.dumps({"kind": kind, "data": data}).encode()
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def _recv(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, object] | None, list[int]]:
    """One message (SOCK_SEQPACKET keeps boundaries); None at end of file."""
    if max_fds:
        payload, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE, max_fds)
    else:
        payload, fds = sock.recv(MAX_MESSAGE), []
    if not payload:
        for fd in fds:
            os.close(fd)
        return None, []
    message = json.loads(payload)
    if not isinstance(message, dict):
        raise ValueError("malformed message")
    return message, list(fds)


def _address(path: str) -> str:
    """A Unix socket path short enough for ``sun_path`` (108 bytes): long workspace paths are
    reached through the folder's descriptor in /proc (the caller keeps that descriptor open)."""
    if len(path.encode()) < 100:
        return path
    folder = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{folder}/{os.path.basename(path)}"


def startup_env(env: dict[str, str]) -> dict[str, str]:
    """The start-up variables of ``env``; empty ones count as unset (as Python, the loader and
    the locale read them: the Claude CLI blanks the runner's variables instead of removing
    them), except TZ, where empty means UTC."""
    return {k: v for k, v in env.items()
            if (k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES) and (v or k == "TZ")}


# ------------------------------------------------------------------------------ fake clock
def _elf_symbols(path: str, names: tuple[str, ...]) -> dict[str, int]:
    """Offsets of ``names`` in the ELF symbol tables of ``path`` (64-bit little-endian only)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    found: dict[str, int] = {}
    for sh_type, sh_link, offset, size, entsize in (
            (s[1], s[6], s[4], s[5], s[9]) for s in sections):
        if sh_type not in (2, 11) or not entsize:  # SYMTAB, DYNSYM
            continue
        strtab = sections[sh_link][4]
        for i in range(size // entsize):
            st_name, _info, _other, _shndx, value, _size = struct.unpack_from(
                "<IBBHQQ", data, offset + i * entsize)
            end = data.index(b"\0", strtab + st_name)
            name = data[strtab + st_name:end].decode(errors="replace")
            if name in names and value:
                found[name] = value
    return found


class _Inert:
    """A value every use of fails (no attribute, no item, no iteration, no membership): what
    the server hands a freshly compiled deserialiser, so it stops before doing anything."""

    __slots__ = ()


_INERT = _Inert()


def _lazy_stub(cls: type, attr: str) -> Callable[..., object] | None:
    """``cls``'s own not-yet-compiled mashumaro method ``attr`` (the function whose body
    compiles the real one), or None."""
    found = cls.__dict__.get(attr)
    function = getattr(found, "__func__", found)
    code = getattr(function, "__code__", None)
    if code is None or "CodeBuilder" not in code.co_names:
        return None
    return function


def _compile(cls: type, attr: str, stub: Callable[..., object]) -> None:
    """Let ``stub`` compile the real method onto ``cls``; it then calls it, on a blank instance
    (``to_*``) or on :data:`_INERT` (``from_*``), which fails at once."""
    with _ignoring(Exception):
        if attr.startswith("from_"):
            stub(cls, _INERT)
        else:
            stub(object.__new__(cls))


def _load_base(library: str) -> int | None:
    real = os.path.realpath(library)
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == real and int(parts[2], 16) == 0:
                return int(parts[0].split("-")[0], 16)
    return None


class ClockReset:
    """Puts libfaketime's start instant to "now" in a forked child, so its ``@date`` clock
    starts at noon again, as in a freshly exec'd dbt (and forces it to re-read FAKETIME).

    libfaketime keeps the start in a static ``ftpl_starttime``: found through the library's
    symbol table and its load address; the real clocks are read with the raw system call
    (libc's ``clock_gettime`` is the faked one). Anything missing: :class:`Refused` at start-up.
    """

    def __init__(self, library: str) -> None:
        symbols = _elf_symbols(library, ("ftpl_starttime", "force_cache_expiration"))
        base = _load_base(library)
        number = _SYS_CLOCK_GETTIME.get(platform.machine().lower())
        if base is None or "ftpl_starttime" not in symbols or number is None:
            raise Refused(f"cannot reset libfaketime's clock per call ({library}: "
                          f"symbols {sorted(symbols)}, loaded {base is not None}, "
                          f"machine {platform.machine()})")
        self.start = base + symbols["ftpl_starttime"]
        self.expire = base + symbols["force_cache_expiration"] \
            if "force_cache_expiration" in symbols else None
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.number = number

    def _real(self, clock: int) -> tuple[int, int]:
        spec = (ctypes.c_long * 2)()
        if self.libc.syscall(ctypes.c_long(self.number), ctypes.c_long(clock), spec) != 0:
            raise OSError(ctypes.get_errno(), "clock_gettime")
        return spec[0], spec[1]

    def reset(self) -> None:
        values = (ctypes.c_long * 8)(*[v for clock in _CLOCKS for v in self._real(clock)])
        ctypes.memmove(self.start, values, ctypes.sizeof(values))
        if self.expire is not None:
            ctypes.c_int.from_address(self.expire).value = 1


def faked_start(spec: str) -> float | None:
    """The instant an ``@YYYY-MM-DD HH:MM:SS`` FAKETIME starts at (local time, as libfaketime)."""
    if not spec.startswith("@"):
        return None
    try:
        return time.mktime(time.strptime(spec[1:].strip(), "%Y-%m-%d %H:%M:%S"))
    except ValueError:
        return None


def check_clock(spec: str, slack: float = 120.0) -> str | None:
    """None if this process's clock is at ``spec``'s start (within ``slack`` s) and running."""
    start = faked_start(spec)
    if start is None:
        return f"FAKETIME={spec!r} is not an @date spec"
    first = time.time()
    time.sleep(0.002)
    second = time.time()
    if not start <= first <= start + slack:
        return (f"the clock reads {datetime.datetime.fromtimestamp(first)} instead of "
                f"{datetime.datetime.fromtimestamp(start)}")
    if second <= first:
        return "the fake clock does not run"
    return None


def _check_duckdb(spec: str) -> str | None:
    """None if DuckDB, in this (forked) process, answers a query with the fake date."""
    start = faked_start(spec)
    if "duckdb" not in sys.modules or start is None:
        return None
    import duckdb

    with duckdb.connect(":memory:") as con:
        row = con.execute("select current_date").fetchone()
    expected = datetime.date.fromtimestamp(start)
    return None if row is not None and row[0] == expected else \
        f"duckdb's current_date is {row[0] if row else None}, not {expected}"


Step = tuple[str, Callable[[], object]]
Stub = tuple[type, str, Callable[..., object]]


def schema_steps() -> list[Step]:
    """Build the JSON schemas of :data:`SCHEMAS` (pure computation, cached per process)."""
    import importlib

    steps: list[Step] = []
    for name in SCHEMAS:
        module, _, attribute = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except Exception:  # an optimisation: skip what is missing
            continue
        if callable(getattr(found, "json_schema", None)):
            steps.append(("schema", found.json_schema))
    return steps


def lazy_stubs() -> dict[str, Stub]:
    """Every not-yet-compiled :data:`COMPILED` method of the dbt dataclasses imported so far,
    by ``module:qualname:method``: what a child may report as compiled, and nothing else."""
    try:
        from dbt_common.dataclass_schema import dbtClassMixin
    except Exception:
        return {}
    seen: set[type] = set()
    stack: list[type] = [dbtClassMixin]
    while stack:
        for sub in stack.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    found: dict[str, Stub] = {}
    for dataclass in seen:
        for attr in COMPILED:
            stub = _lazy_stub(dataclass, attr)
            if stub is not None:
                found[f"{dataclass.__module__}:{dataclass.__qualname__}:{attr}"] = \
                    (dataclass, attr, stub)
    return found


def compiled_since(pending: dict[str, Stub]) -> list[str]:
    """In a child: which of the server's ``pending`` stubs this process has compiled."""
    return [key for key, (cls, attr, _stub) in pending.items() if _lazy_stub(cls, attr) is None]


def learned(report: bytes, pending: dict[str, Stub]) -> list[Step]:
    """The compile steps for what a child reported (one key per line), taken out of
    ``pending``. Only known keys count: the child ran the agent's project (Python models
    included), so its report is data, never names to import or call."""
    steps: list[Step] = []
    for line in report[:MAX_LEARNED].decode("utf-8", "replace").splitlines():
        stub = pending.pop(line.strip(), None)
        if stub is not None:
            steps.append(("compile", functools.partial(_compile, *stub)))
    return steps


# ---------------------------------------------------------------------------------- server
class Server:
    def __init__(self, path: str, real_dbt: str, log: io.TextIOBase) -> None:
        self.path, self.real_dbt, self.log = path, real_dbt, log
        self.library = os.environ.get("LD_PRELOAD", "")
        self.faketime = os.environ.get("FAKETIME", "")
        self.startup = startup_env(dict(os.environ))
        self.children: dict[int, socket.socket] = {}
        self.learning: dict[int, int] = {}
        """Per child, the read end of the pipe it reports its compiled serialisers on."""
        self.pending: dict[str, Stub] = {}
        self.steps: collections.deque[Step] = collections.deque()
        self.work: dict[str, int] = {"schema": 0, "compile": 0}
        self.working = 0.0
        self.clock = ClockReset(self.library)

    def say(self, text: str) -> None:
        self.log.write(f"{datetime.datetime.now().isoformat(timespec='milliseconds')} {text}\n")
        self.log.flush()

    def preload(self) -> None:
        started = time.monotonic()
        import importlib

        for name in PRELOADS:
            try:
                importlib.import_module(name)
            except Exception as exc:  # an optimisation: skip what is missing
                self.say(f"preload {name}: {type(exc).__name__}: {exc}")
        # duckdb >= 1.5 starts an idle scheduler thread for its default database at import
        # (blocked in sem_wait, holding no lock): the fork is safe, the child never uses that
        # database, and the self-test below runs a query in a forked child to prove it.
        threads = len(os.listdir("/proc/self/task"))
        self.say(f"imported {len(sys.modules)} modules in {time.monotonic() - started:.2f}s; "
                 f"threads {threads}")
        if threading.active_count() != 1:
            raise Refused(f"{threading.active_count()} Python threads after the imports: "
                          "forking would be unsafe")

    def self_test(self) -> None:
        """Fork once, reset the clock, check it reads the task's date at noon and runs."""
        pid = os.fork()
        if pid == 0:
            try:
                self.clock.reset()
                problem = check_clock(self.faketime) or _check_duckdb(self.faketime)
            except BaseException as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                sys.stderr.write(f"warm dbt self-test: {problem}\n")
            os._exit(0 if problem is None else 1)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise Refused("the per-call clock reset failed its self-test")

    def refuse(self, request: dict[str, object]) -> str | None:
        if request.get("protocol") != PROTOCOL:
            return f"protocol {request.get('protocol')!r}, server {PROTOCOL!r}"
        env = request.get("env")
        if not isinstance(env, dict):
            return "no environment"
        if request.get("real_dbt") != self.real_dbt:
            return f"real dbt {request.get('real_dbt')!r}, server {self.real_dbt!r}"
        if env.get("LD_PRELOAD") != self.library or env.get("FAKETIME") != self.faketime:
            return (f"clock LD_PRELOAD={env.get('LD_PRELOAD')!r} FAKETIME="
                    f"{env.get('FAKETIME')!r}, server {self.library!r} {self.faketime!r}")
        if startup_env(env) != self.startup:
            names = sorted(set(startup_env(env).items()) ^ set(self.startup.items()))
            return f"start-up variables differ: {', '.join(sorted({n for n, _ in names}))}"
        return None

    def serve(self, starting: str) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        temporary = f"{self.path}.{os.getpid()}.tmp"
        with _removing(temporary):
            listener.bind(_address(temporary))
            listener.listen(64)
            os.replace(temporary, self.path)  # appears only once it listens
        with _ignoring(OSError):
            os.unlink(starting)
        self.say(f"serving {self.path} (pid {os.getpid()}, protocol {PROTOCOL})")
        mine = os.stat(self.path).st_ino

        def stop(signum: int, _frame: object) -> None:
            self.withdraw(mine)
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGHUP, stop)
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, "accept")
        selector.register(wake_r, selectors.EVENT_READ, "child")
        self.pending = lazy_stubs()
        self.steps.extend(schema_steps())
        while True:
            for key, _ in selector.select(timeout=0.0 if self.steps else 5.0):
                if key.data == "accept":
                    self.accept(listener)
                else:
                    with _ignoring(BlockingIOError):
                        os.read(wake_r, 4096)
            self.reap()
            if not os.path.exists(self.path):  # deleted: nobody can reach us any more
                self.say("socket removed; exiting")
                return
            if self.steps and not self.warm_slice(mine):
                return

    def withdraw(self, mine: int) -> None:
        """Remove our socket (inode ``mine``), never a newer server's at the same path: the
        next call then runs cold."""
        with _ignoring(OSError):
            if os.stat(self.path).st_ino == mine:
                os.unlink(self.path)

    def warm_slice(self, mine: int) -> bool:
        """Run warm-up steps for up to :data:`WARM_SLICE` seconds; False if the server must
        stop (a thread appeared: never fork beside one)."""
        started = time.monotonic()
        while self.steps and time.monotonic() < started + WARM_SLICE:
            kind, step = self.steps.popleft()
            try:
                step()
                self.work[kind] += 1
            except Exception as exc:  # an optimisation: the child compiles it itself
                self.say(f"warm-up step skipped: {type(exc).__name__}: {exc}")
        self.working += time.monotonic() - started
        if self.steps:
            return True
        if threading.active_count() != 1:
            self.say(f"warm dbt unavailable: {threading.active_count()} Python threads after "
                     "the warm-up; exiting")
            self.withdraw(mine)
            return False
        self.say(f"warmed: {self.work['schema']} schemas, {self.work['compile']} serialisers "
                 f"in {self.working:.2f}s; resident {_rss_kib()} KiB")
        return True

    def accept(self, listener: socket.socket) -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        fds: list[int] = []
        pid = -1
        try:
            conn.settimeout(5.0)
            request, fds = _recv(conn, max_fds=4)
            if request is None or len(fds) != 4:
                raise ValueError("incomplete request")
            data = request.get("data")
            if not isinstance(data, dict):
                raise ValueError("malformed request")
            reason = self.refuse(data)
            if reason is not None:
                self.say(f"refused: {reason}")
                _send(conn, "refused", reason)
                conn.close()
                return
            learn_r, learn_w = os.pipe()
            try:
                pid = os.fork()
            except OSError:
                os.close(learn_r)
                os.close(learn_w)
                raise
            if pid == 0:
                listener.close()
                os.close(learn_r)
                for other in self.children.values():
                    other.close()  # a sibling's caller waits for every copy to close
                for other_fd in self.learning.values():
                    os.close(other_fd)
                self.child(conn, data, fds, learn_w)  # raises ChildExit
            os.close(learn_w)
            os.set_blocking(learn_r, False)
            self.children[pid] = conn
            self.learning[pid] = learn_r
            self.say(f"call {pid}: {data.get('argv')}")
            with _ignoring(OSError):
                _send(conn, "started", pid)
        except (OSError, ValueError) as exc:
            self.say(f"bad request: {exc}")
            conn.close()
        finally:
            if pid != 0:
                for fd in fds:
                    os.close(fd)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.learn(pid)
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            self.say(f"call {pid}: exit {os.waitstatus_to_exitcode(status)}")
            with _ignoring(OSError):
                _send(conn, "exited", os.waitstatus_to_exitcode(status))
            conn.close()

    def learn(self, pid: int) -> None:
        """Queue the serialisers child ``pid`` compiled, so the next calls find them done."""
        fd = self.learning.pop(pid, None)
        if fd is None:
            return
        chunks: list[bytes] = []
        with _ignoring(OSError):
            while sum(map(len, chunks)) < MAX_LEARNED and (chunk := os.read(fd, 65536)):
                chunks.append(chunk)
        os.close(fd)
        steps = learned(b"".join(chunks), self.pending)
        if steps:
            self.steps.extend(steps)
            self.say(f"call {pid}: compiled {len(steps)} serialisers; compiling them here")

    # --------------------------------------------------------------------------- the child
    def child(self, conn: socket.socket, request: dict[str, object], fds: list[int],
              learn_w: int) -> None:
        """Become the caller's dbt; raises :class:`ChildExit` with its exit status."""
        try:
            for number, fd in enumerate(fds[:3]):
                os.dup2(fd, number)
            os.fchdir(fds[3])
            for fd in fds:
                os.close(fd)
            for sig in (signal.SIGCHLD, *FORWARDED):
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            if request.get("sigint_ignored"):
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            else:
                signal.signal(signal.SIGINT, signal.default_int_handler)
            os.setpgid(0, 0)
            conn.settimeout(None)
            # Without FAKETIME_SHARED: a faked program dbt execs starts its own clock at noon
            # (a cold dbt's would continue dbt's), and libfaketime's exit handler in this
            # child leaves the server's shared memory alone.
            env = {str(k): str(v) for k, v in dict(request["env"]).items()  # type: ignore[call-overload]
                   if k != "FAKETIME_SHARED"}
            os.environ.clear()
            os.environ.update(env)
            umask = request.get("umask")
            os.umask(int(umask) if isinstance(umask, int) else 0o022)
            time.tzset()
            self.clock.reset()
            problem = check_clock(self.faketime)
            if problem is not None:
                _send(conn, "retry", f"clock: {problem}")
                os._exit(3)
            _reopen_stdio()
            threading.Thread(target=_watch, args=(conn,), daemon=True).start()
            given = request.get("argv")
            argv = [str(a) for a in given] if isinstance(given, list) else []
            sys.argv = [self.real_dbt, *argv]
        except BaseException as exc:  # set-up failed: the caller runs cold
            with _ignoring(OSError):
                _send(conn, "retry", f"child set-up: {type(exc).__name__}: {exc}")
            os._exit(3)
        code = _run_dbt()
        _flush()
        with _ignoring(Exception):  # what this call compiled, for the server's next children
            os.set_blocking(learn_w, False)
            os.write(learn_w, "\n".join(compiled_since(self.pending)).encode()[:MAX_LEARNED])
        with _ignoring(OSError):
            os.close(learn_w)
        with _ignoring(OSError):
            _send(conn, "result", code)
        raise ChildExit(code)


def _run_dbt() -> int:
    """dbt's console entry point, with the interpreter's own handling of how it ends."""
    try:
        from dbt.cli.main import cli

        cli()
    except SystemExit as stop:
        if stop.code is None:
            return 0
        if isinstance(stop.code, int):
            return stop.code
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as Python itself ends on an uncaught Ctrl-C
        return 130
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with _ignoring(Exception):
            stream.flush()


def _reopen_stdio() -> None:
    """New ``sys.std*`` over the received descriptors: buffering follows what they are now
    (line-buffered on a terminal), as Python decides at start-up."""
    encoding = sys.stdout.encoding if sys.stdout is not None else "utf-8"
    errors = sys.stdout.errors if sys.stdout is not None else "strict"
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding=encoding, errors=errors)
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                  encoding=encoding, errors=errors, line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                  encoding=encoding, errors="backslashreplace",
                                  line_buffering=True)


def _next_message(conn: socket.socket) -> dict[str, object] | None:
    """The next message on ``conn``; ``None`` at its end or when it broke (both sides treat a
    broken connection as its end)."""
    try:
        message, _ = _recv(conn)
    except (OSError, ValueError):
        return None
    return message


def _watch(conn: socket.socket) -> None:
    """In the child: the caller's forwarded signals, and its end (end of file: kill us all)."""
    while True:
        message = _next_message(conn)
        if message is None:
            os.killpg(0, signal.SIGKILL)
            os._exit(137)
        signum = message.get("data")
        if message.get("kind") == "signal" and isinstance(signum, int):
            os.kill(os.getpid(), signum)


class _removing:
    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        with _ignoring(OSError):
            os.unlink(self.path)


class _ignoring:
    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, tb: object) -> bool:
        return isinstance(value, self.kinds)


def serve_main(args: list[str]) -> int:
    options = dict(zip(args[::2], args[1::2], strict=False))
    path, real_dbt = options.get("--socket"), options.get("--real-dbt")
    if not path or not real_dbt:
        print("usage: warmdbt.py serve --socket PATH --real-dbt DBT [--log FILE]",
              file=sys.stderr)
        return 2
    log: io.TextIOBase = open(options["--log"], "a", encoding="utf-8") \
        if options.get("--log") else sys.stderr  # type: ignore[assignment]  # noqa: SIM115
    with _ignoring(OSError):
        os.setsid()  # its own session: a kill of the starter's group is not the server's end
    starting = os.path.join(os.path.dirname(path), STARTING_NAME)
    with _ignoring(OSError), open(starting, "w", encoding="utf-8") as marker:
        marker.write(f"{os.getpid()}\n")
    try:
        server = Server(path, real_dbt, log)
        server.preload()
        server.self_test()
        rss = _rss_kib()
        server.say(f"ready: resident {rss} KiB")
        server.serve(starting)
    except Refused as exc:
        log.write(f"warm dbt unavailable: {exc}\n")
        log.flush()
        with _ignoring(OSError):
            os.unlink(starting)
        return 3
    except ChildExit as done:
        _end_child(done.code)
    return 0


def _end_child(code: int) -> None:
    """End a forked child as the interpreter ends a cold dbt, minus C-level teardown.

    Python's own shutdown steps run (non-daemon threads joined, atexit handlers: dbt-duckdb's
    closes its database, which checkpoints it and releases its lock; streams flushed), then
    ``_exit``: the C++ destructors of the server's duckdb module would join a scheduler thread
    the fork did not copy (std::terminate, measured), and libfaketime's would unlink the
    server's shared memory."""
    with _ignoring(Exception):
        threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    _flush()
    os._exit(code)


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


# ---------------------------------------------------------------------------------- client
def note(reason: str) -> None:
    """Say once, in the run's records folder, why a dbt call ran cold."""
    runs = os.environ.get(RUNS_ENV)
    if not runs:
        return
    with _ignoring(OSError):
        os.makedirs(runs, exist_ok=True)
        fd = os.open(os.path.join(runs, NOTE_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"warm dbt unavailable, dbt ran cold: {reason}\n")


def cold(argv: list[str], reason: str | None) -> None:
    """exec the real dbt under the fake clock: what the shim does without a warm server."""
    if reason is not None:
        note(reason)
    env = dict(os.environ)
    env["LD_PRELOAD"] = env.get(LIBRARY_ENV, "")
    real = env.get(REAL_DBT_ENV, "dbt")
    os.execve(real, [real, *argv], env)


def _await_server(path: str) -> str | None:
    """None once ``path`` is a socket; why not otherwise. A server still importing (its
    ``starting`` marker names a live process) is waited for, up to :data:`START_WAIT`."""
    starting = os.path.join(os.path.dirname(path), STARTING_NAME)
    deadline = time.monotonic() + START_WAIT
    while True:
        if os.path.exists(path):
            return None
        try:
            with open(starting, encoding="utf-8") as marker:
                pid = int(marker.read().strip() or "0")
            os.kill(pid, 0)
        except (OSError, ValueError):
            return f"no server socket at {path}"
        if time.monotonic() > deadline:
            return f"the server was still starting after {START_WAIT:g}s"
        time.sleep(0.05)


def client(argv: list[str]) -> int:
    path = os.environ.get(SOCKET_ENV, "")
    waited = _await_server(path)
    if waited is not None:
        cold(argv, waited)
    env = dict(os.environ)
    env["LD_PRELOAD"] = env.get(LIBRARY_ENV, "")
    request = {"protocol": PROTOCOL, "argv": argv, "env": env,
               "real_dbt": env.get(REAL_DBT_ENV, ""), "umask": _umask(),
               "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def forward(signum: int, _frame: object) -> None:
        with _ignoring(OSError):
            _send(conn, "signal", signum)

    for sig in FORWARDED:  # before the call starts: a signal in between reaches the child too
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, forward)
    try:
        conn.connect(_address(path))
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        _send(conn, "call", request, [0, 1, 2, cwd])
        os.close(cwd)
        conn.settimeout(30.0)
        first, _ = _recv(conn)
    except (OSError, ValueError) as exc:
        cold(argv, f"cannot reach the server at {path} ({exc})")
        return 2
    if first is None or first.get("kind") != "started":
        reason = first.get("data") if first else "the server closed the connection"
        cold(argv, f"the server refused the call: {reason}")
        return 2
    conn.settimeout(None)
    result: int | None = None
    while True:
        message = _next_message(conn)
        if message is None:
            break
        kind, data = message.get("kind"), message.get("data")
        if kind == "retry" and result is None:
            conn.close()
            cold(argv, str(data))
        if kind == "result" and isinstance(data, int):
            result = data
        if kind == "exited" and isinstance(data, int):
            result = data
            break
    if result is None:
        print("spider2local dbt shim: the warm dbt server lost this call", file=sys.stderr)
        return 2
    if result < 0:  # killed by a signal: end the same way, so the caller sees 128+n
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), -result)
        return 128 - result
    return result


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve_main(argv[1:])
    if argv[:1] == ["--client"]:
        return client(argv[1:])
    print("usage: warmdbt.py serve ... | --client DBT-ARGS...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

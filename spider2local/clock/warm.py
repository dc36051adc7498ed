"""Warm dbt: the runner's side of ``faketime/warmdbt.py`` (where the server's socket and log
live, the command that starts it under the task's clock, what it reported).

Each dbt call is a cold Python process that spends 1-5 s importing dbt before 0.1-0.3 s of work;
a server that imported dbt once and forks a child per call cuts that (benchmarks/bench_dbt.py).
The server runs where the agent's processes run: inside the agent's sandbox (started by the
launcher, :func:`spider2local.sandbox.launcher.launcher_script`'s services, so it dies with the
sandbox's PID namespace), or, without one, as a child of the runner with a death signal
(:func:`start_server`). The shim uses it when its socket exists and falls back to a cold dbt
otherwise, saying so once (:data:`NOTE_NAME`, collected by :func:`report`).

Started when the agent starts rather than on the first dbt call: importing dbt costs 1.2 s idle
and 4-9 s under load (measured); started with the agent, that overlaps the agent's first API
round trips, while a lazy start would make the first call pay it on top of a cold run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from spider2local.clock.faketime import (
    FAKE_DATE_ENV,
    LIBRARY_ENV,
    REAL_DBT_ENV,
    RUNS_ENV,
    Clock,
    find_library,
    find_real_dbt,
)
from spider2local.exceptions import ClockError
from spider2local.proc.run import kill_process_group, pdeathsig_wrapper
from spider2local.resources import faketime_dir

SOCKET_ENV = "SPIDER2LOCAL_WARM_DBT"
"""The server's socket, in the environment of every process that may call dbt."""
PYTHON_ENV = "SPIDER2LOCAL_PYTHON"
"""The Python that runs warmdbt.py (the client in the shim, the server): the runner's own."""
WARM_DIR = ".warm-dbt"
"""In the workspace root (writable by the agent, outside its project): socket and log."""
SOCKET_NAME = "dbt.sock"
STARTING_NAME = "starting"
"""Beside the socket while the server starts: its pid (warmdbt.py's ``STARTING_NAME``). The
server writes it itself, but its starter writes it first: a dbt call made before the server's
interpreter is up then waits for it instead of running cold."""
LOG_NAME = "server.log"
NOTE_NAME = "warm-dbt.txt"
"""In the shim's records folder: why a call ran cold (written once, by the shim or client)."""
SCRIPT_NAME = "warmdbt.py"
PROBE_DATE = dt.date(2024, 1, 15)
START_WAIT = 120.0
"""Seconds :func:`wait_ready` waits for a server (imports take 4-9 s under load)."""


def script() -> Path:
    return faketime_dir() / SCRIPT_NAME


def socket_path(root: Path) -> Path:
    return root / WARM_DIR / SOCKET_NAME


def starting_path(root: Path) -> Path:
    return root / WARM_DIR / STARTING_NAME


def log_path(root: Path) -> Path:
    return root / WARM_DIR / LOG_NAME


def warm_env(env: Mapping[str, str], root: Path) -> dict[str, str]:
    """``env`` (a workspace environment) with this workspace's server socket named."""
    return {**env, SOCKET_ENV: str(socket_path(root)), PYTHON_ENV: sys.executable}


def server_command(env: Mapping[str, str], root: Path) -> tuple[list[str], dict[str, str]]:
    """The server's argv and environment: the workspace's environment under the task's clock,
    preloaded exactly as the shim preloads every faked dbt (:meth:`Clock.faked_env`)."""
    clock = Clock(dt.date.fromisoformat(env[FAKE_DATE_ENV]), Path(env[LIBRARY_ENV]))
    argv = [env.get(PYTHON_ENV, sys.executable), str(script()), "serve",
            "--socket", str(socket_path(root)), "--real-dbt", env[REAL_DBT_ENV],
            "--log", str(log_path(root))]
    server_env = clock.faked_env(env)
    server_env.pop(RUNS_ENV, None)
    return argv, server_env


def prepare_dir(root: Path) -> None:
    (root / WARM_DIR).mkdir(mode=0o700, exist_ok=True)


@dataclass
class Server:
    """A server the runner started (no sandbox); :meth:`stop` ends it and its calls."""

    process: anyio.abc.Process
    root: Path

    async def stop(self) -> None:
        with anyio.CancelScope(shield=True):
            await kill_process_group(self.process.pid)
            await self.process.aclose()
            with contextlib.suppress(OSError):
                socket_path(self.root).unlink()


async def start_server(env: Mapping[str, str], root: Path) -> Server:
    """Start the workspace's server as the runner's child: its own session (a kill of an
    agent's group is not its end), the runner's death signal (a kill -9 of the runner ends it;
    its children end when their callers go), its working folder in the workspace (so the
    stale-workspace reap finds it too)."""
    prepare_dir(root)
    argv, server_env = server_command(env, root)
    with anyio.CancelScope(shield=True):  # a cancelled open_process loses the child (run.py)
        process = await anyio.open_process([*pdeathsig_wrapper(), *argv], cwd=root,
                                           env=server_env, start_new_session=True,
                                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
    with contextlib.suppress(OSError):  # the server writes it too; setpriv execs: same pid
        starting_path(root).write_text(f"{process.pid}\n", encoding="utf-8")
    return Server(process, root)


async def wait_ready(root: Path, timeout: float = START_WAIT,  # noqa: ASYNC109
                     process: anyio.abc.Process | None = None) -> bool:
    """Wait until the server listens (or gave up: False)."""
    with anyio.move_on_after(timeout):
        while not socket_path(root).is_socket():
            if process is not None and process.returncode is not None:
                return False
            if "warm dbt unavailable" in _read(log_path(root)):
                return False
            await anyio.sleep(0.05)
        return True
    return False


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


_READY = re.compile(r"ready: resident (\d+) KiB")
_IMPORTED = re.compile(r"imported (\d+) modules in ([0-9.]+)s")
_CALL = re.compile(r"call \d+: exit")
_WARMED = re.compile(r"warmed: (\d+) schemas, (\d+) serialisers in ([0-9.]+)s; "
                     r"resident (\d+) KiB")


def report(root: Path, runs: Path | None) -> dict[str, Any]:
    """What the workspace's server said (resident size, import time, calls served, why it is
    unavailable) and the shim's note of a call that ran cold: for the task's transcript."""
    log = _read(log_path(root))
    found: dict[str, Any] = {"calls": len(_CALL.findall(log))}
    if (ready := _READY.search(log)) is not None:
        found["resident_kib"] = int(ready.group(1))
    if (imported := _IMPORTED.search(log)) is not None:
        found["modules"], found["import_seconds"] = int(imported.group(1)), \
            float(imported.group(2))
    if warmed := _WARMED.findall(log):  # the last: the server compiles as it learns
        schemas, serialisers, seconds, resident = warmed[-1]
        found["warmed"] = {"schemas": int(schemas), "serialisers": int(serialisers),
                           "seconds": float(seconds), "resident_kib": int(resident)}
    unavailable = [line for line in log.splitlines() if "warm dbt unavailable" in line]
    if unavailable:
        found["unavailable"] = unavailable[-1]
    note = _read(runs / NOTE_NAME).strip() if runs is not None else ""
    if note:
        found["cold_note"] = note
    return found


def runs_dir(env: Mapping[str, str]) -> Path | None:
    value = env.get(RUNS_ENV)
    return Path(value) if value else None


def available() -> str | None:
    """None when warm dbt can work here, else why not (for ``doctor``)."""
    if not sys.platform.startswith("linux"):
        return "warm dbt needs Linux (fork, /proc, SCM_RIGHTS with libfaketime)"
    if not script().is_file():
        return f"{script()} is missing (reinstall spider2local)"
    if not os.access(sys.executable, os.X_OK):
        return f"{sys.executable} is not executable"
    return None


def probe(timeout: float = START_WAIT) -> tuple[bool, str]:
    """Start a server in a scratch folder and wait until it serves (its self-test forks a
    child, resets the clock and queries DuckDB under the fake date): (works, detail)."""
    reason = available()
    if reason is not None:
        return False, reason
    try:
        library = find_library()
        real_dbt = find_real_dbt(faketime_dir())
    except ClockError as exc:
        return False, str(exc)
    env = {**Clock(PROBE_DATE, library).agent_env(os.environ, faketime_dir())}
    with tempfile.TemporaryDirectory(prefix="spider2local-warm-") as folder:
        root = Path(folder)
        prepare_dir(root)
        env[REAL_DBT_ENV] = str(real_dbt)
        argv, server_env = server_command(warm_env(env, root), root)
        started = time.monotonic()
        with subprocess.Popen(argv, env=server_env, cwd=root, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True) as process:
            try:
                while not socket_path(root).is_socket() and process.poll() is None \
                        and time.monotonic() - started < timeout:
                    time.sleep(0.05)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        found = report(root, None)
    if "resident_kib" not in found:
        return False, found.get("unavailable", "the server did not start")
    return True, (f"server ready in {time.monotonic() - started:.1f}s "
                  f"(imports {found.get('import_seconds', 0):.1f}s), "
                  f"resident {found['resident_kib'] // 1024} MiB per workspace")

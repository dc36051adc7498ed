"""The deterministic clock: which libfaketime to preload, and the environments built around it.

Spider2-DBT gold tables were built on some date in 2024; about half of the projects read the clock
(``current_date``, ``now()``), so every dbt process must see the task's own date. LD_PRELOAD only
acts when a process starts, so the fake clock lives in child processes only:

* dbt children get :meth:`Clock.preload_env` (the one recipe measured safe: see faketime/README.md);
* the agent (the Claude CLI) gets :meth:`Clock.agent_env`: NOT preloaded, because TLS to the real
  API fails under a 2024 clock, but with the ``faketime/dbt`` shim first on PATH so every dbt the
  agent starts is faked anyway;
* the runner itself is never preloaded.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spider2local.exceptions import ClockError

LIBRARY_ENV = "SPIDER2LOCAL_LIBFAKETIME"
"""Overrides the libfaketime library; also how the shim learns which library to preload."""
FAKE_DATE_ENV = "SPIDER2LOCAL_FAKE_DATE"
"""The task's date (YYYY-MM-DD) as the shim reads it."""
REAL_DBT_ENV = "SPIDER2LOCAL_REAL_DBT"
"""The real dbt executable the shim execs (the shim must never find itself on PATH)."""
RUNS_ENV = "SPIDER2LOCAL_DBT_RUNS"
"""Optional: the folder where the shim keeps each faked call's ``run_results.json`` as
``NNN-<command>.json`` (dbt overwrites its one file on every call; see faketime/README.md)."""

TELEMETRY_ENV: Mapping[str, str] = {"DO_NOT_TRACK": "1", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
"""Runs are offline and must not phone home; both are honoured by dbt 1.11."""

FAKE_TIME_OF_DAY = "12:00:00"
"""Noon, so that any timezone offset up to +-12 h keeps the same calendar date."""

_WHEEL_LIBRARY = Path("vendor") / "libfaketime" / "src" / "libfaketime.so.1"
_FIX = (
    "pip install 'libfaketime>=3,<4' into this Python environment, "
    f"or set {LIBRARY_ENV} to a libfaketime.so.1"
)

# Variables that would fake (or half-fake) a process: stripped from environments that must see
# the real clock, so an inherited preload can never leak into the agent.
_FAKETIME_VARS = (
    "FAKETIME",
    "FAKETIME_DONT_FAKE_MONOTONIC",
    "FAKETIME_FORCE_MONOTONIC_FIX",
    "FAKETIME_DONT_RESET",
    "FAKETIME_NO_CACHE",
    "FAKETIME_SHARED",
    "DONT_FAKE_MONOTONIC",
)


def _wheel_library() -> Path | None:
    """The library inside the installed ``libfaketime`` package, located without importing it.

    Importing the package would pull in dateutil/pytz and run its module code; ``find_spec``
    only asks the import system where the package lives.
    """
    spec = importlib.util.find_spec("libfaketime")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / _WHEEL_LIBRARY
        if candidate.is_file():
            return candidate
    return None


def find_library(override: Path | None = None) -> Path:
    """Return the libfaketime shared library to preload.

    Precedence: ``override``, then ``$SPIDER2LOCAL_LIBFAKETIME``, then the copy shipped in the
    PyPI ``libfaketime`` wheel (Debian's build breaks ``time.sleep`` in Python: never fall back
    to system paths). Raises :class:`ClockError` when nothing usable is found.
    """
    if override is None and os.environ.get(LIBRARY_ENV):
        override = Path(os.environ[LIBRARY_ENV])
    if override is not None:
        if not override.is_file():
            raise ClockError("libfaketime library not found", path=override, fix=_FIX)
        return override.resolve()
    library = _wheel_library()
    if library is None:
        raise ClockError("the libfaketime package (with its bundled library) is not installed",
                         fix=_FIX)
    return library.resolve()


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _is_shim(path: Path, shim_dir: Path | None) -> bool:
    if shim_dir is None:
        return False
    shim = shim_dir / "dbt"
    try:
        return shim.exists() and path.samefile(shim)
    except OSError:
        return False


def find_real_dbt(shim_dir: Path | None = None, path: str | None = None) -> Path:
    """Return the real dbt of this Python environment, never the shim.

    The dbt next to ``sys.executable`` comes first (the venv spider2local runs in, whose
    dbt-duckdb versions are pinned); otherwise the first ``dbt`` on ``path`` (default $PATH)
    that is not the shim. ``sys.executable`` is deliberately not resolved: in a venv it is a
    symlink to the base interpreter, whose folder has no dbt.
    """
    beside = Path(sys.executable).parent / "dbt"
    if _is_executable(beside) and not _is_shim(beside, shim_dir):
        return beside
    search = os.environ.get("PATH", "") if path is None else path
    for folder in search.split(os.pathsep):
        if not folder:
            continue
        candidate = Path(folder) / "dbt"
        if _is_executable(candidate) and not _is_shim(candidate, shim_dir):
            return candidate
    raise ClockError("no real dbt executable found next to the Python interpreter or on PATH",
                     fix="pip install 'dbt-duckdb>=1.11,<1.12' into spider2local's environment")


def strip_fake_clock(env: Mapping[str, str]) -> dict[str, str]:
    """Copy ``env`` without any libfaketime variables (and without libfaketime in LD_PRELOAD)."""
    clean = {key: value for key, value in env.items() if key not in _FAKETIME_VARS}
    preload = [item for item in clean.pop("LD_PRELOAD", "").split(":")
               if item and "libfaketime" not in Path(item).name]
    if preload:
        clean["LD_PRELOAD"] = ":".join(preload)
    return clean


def env_date(env: Mapping[str, str], *, through_shim: bool) -> datetime.date | None:
    """The fake date a process started with ``env`` sees (``None``: the real clock).

    ``through_shim``: the process is the dbt shim, which fakes with ``SPIDER2LOCAL_FAKE_DATE``
    (its unfaked ``deps`` never parses, so the answer only matters for commands it fakes);
    otherwise the clock is faked only by a libfaketime preload with an ``@date`` spec.
    """
    try:
        if through_shim:
            return datetime.date.fromisoformat(env.get(FAKE_DATE_ENV, ""))
        preloaded = any("libfaketime" in Path(item).name
                        for item in env.get("LD_PRELOAD", "").split(":") if item)
        spec = env.get("FAKETIME", "")
        if preloaded and spec.startswith("@"):
            return datetime.date.fromisoformat(spec[1:].split()[0])
    except (ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True)
class Clock:
    """A task's fixed date and the library that fakes it."""

    date: datetime.date
    library: Path

    @property
    def faketime_spec(self) -> str:
        """``@`` makes the clock start at that instant and run (a frozen clock breaks timeouts)."""
        return f"@{self.date.isoformat()} {FAKE_TIME_OF_DAY}"

    def preload_env(self) -> dict[str, str]:
        """The exact variables that fake a child process's clock; nothing else is safe.

        Faking the monotonic clock hangs ``time.sleep`` and ``Queue.get(timeout)``; leaving it
        real without ``FAKETIME_FORCE_MONOTONIC_FIX=0`` makes CPU-bound threads spin (a 4-thread
        ``dbt run`` took 3x longer). ``FAKETIME_DONT_RESET=1`` makes children of a faked process
        continue the parent's clock instead of restarting at noon.
        """
        return {
            "LD_PRELOAD": str(self.library),
            "FAKETIME": self.faketime_spec,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
            "FAKETIME_DONT_RESET": "1",
            **TELEMETRY_ENV,
        }

    def faked_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` plus the preload: for a child the runner itself starts under the fake clock."""
        return {**strip_fake_clock(base), **self.preload_env()}

    def agent_env(self, base: Mapping[str, str], shim_dir: Path) -> dict[str, str]:
        """The environment of the agent and of every dbt it runs: real clock, shim first on PATH.

        The shim reads the ``SPIDER2LOCAL_*`` variables and preloads the library only into the
        dbt it execs. Raises :class:`ClockError` when no real dbt can be found.
        """
        env = strip_fake_clock(base)
        shim_dir = shim_dir.resolve()
        path = [p for p in env.get("PATH", os.defpath).split(os.pathsep)
                if p and Path(p).resolve() != shim_dir]
        real_dbt = find_real_dbt(shim_dir, os.pathsep.join(path))
        env.update(TELEMETRY_ENV)
        env["PATH"] = os.pathsep.join([str(shim_dir), *path])
        env[FAKE_DATE_ENV] = self.date.isoformat()
        env[LIBRARY_ENV] = str(self.library)
        env[REAL_DBT_ENV] = str(real_dbt)
        return env


"""Helpers shared by tests: tiny DuckDB files and upstream-shaped tasks, built by code, and
the work one test session does once and shares between its processes (see tests/conftest.py)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from spider2local.dataset.load import load_dataset
from spider2local.dataset.sample import ensure_built
from spider2local.dataset.task import Dataset
from spider2local.suite.load import load_suite

HYPOTHESIS_PROFILE = (os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI") else "dev"))
"""``dev`` (the default on a developer's machine): a few hundred property examples, for a quick
loop; ``ci`` (wherever ``CI`` is set, as in GitHub Actions and .ci/run's CI): the full plans."""
FULL_PROPERTIES = HYPOTHESIS_PROFILE == "ci"


def make_duckdb(path: Path, tables: Mapping[str, str]) -> Path:
    """Create a DuckDB file whose tables are built by the given SELECT statements."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    try:
        for name, select in tables.items():
            con.execute(f"CREATE TABLE {name} AS {select}")
    finally:
        con.close()
    return path


def write_task(root: Path, tid: str, *, instruction: str = "Build the orders model.",
               db: str = "shop", gold_tables: Mapping[str, str] | None = None,
               evaluation: dict[str, Any] | None = None, packages_yml: str | None = None,
               with_start_db: bool = True, with_gold: bool = True) -> None:
    """Add one task in upstream's layout (project, start db, eval line, gold db)."""
    project = root / "examples" / tid
    (project / "models").mkdir(parents=True, exist_ok=True)
    (project / "dbt_project.yml").write_text(
        f"name: {tid}\nprofile: {db}\nversion: '1.0'\nconfig-version: 2\n"
        "models:\n  " + tid + ":\n    materialized: table\n")
    (project / "profiles.yml").write_text(
        f"{db}:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: \"./{db}.duckdb\"\n      schema: main\n")
    (project / "models" / "schema.yml").write_text(
        "version: 2\nmodels:\n  - name: orders\n    columns:\n      - name: id\n")
    if packages_yml is not None:
        (project / "packages.yml").write_text(packages_yml)
    if with_start_db:
        make_duckdb(project / f"{db}.duckdb", {"raw_orders": "SELECT 1 AS id"})
    with (root / "examples" / "spider2-dbt.jsonl").open("a") as fh:
        fh.write(json.dumps({"instance_id": tid, "instruction": instruction, "type": "DBT"}) + "\n")
    gold_dir = root / "evaluation_suite" / "gold"
    gold_dir.mkdir(parents=True, exist_ok=True)
    ev = evaluation or {"func": "duckdb_match", "parameters": {
        "gold": f"{db}.duckdb", "condition_tabs": ["orders"], "condition_cols": [[0]],
        "ignore_orders": [True]}}
    with (gold_dir / "spider2_eval.jsonl").open("a") as fh:
        fh.write(json.dumps({"instance_id": tid, "evaluation": ev}) + "\n")
    if with_gold:
        make_duckdb(gold_dir / tid / f"{db}.duckdb",
                    gold_tables or {"orders": "SELECT 1 AS id"})


TINY_SOLVE = (f"{shlex.quote(sys.executable)} -c 'import duckdb; duckdb.connect(\"shop.duckdb\")"
              ".execute(\"CREATE TABLE orders AS SELECT 1 AS id\")'")
"""A command agent's command that solves a task of :func:`write_task` (its defaults) the way
gold has it, in a fraction of a second: no dbt (a cold ``dbt run`` costs about 4 s of CPU).
For tests whose subject is what happens around passing trials (trials, rounds, resumes,
merges), not the build; the reference agent's own tests keep real dbt."""


def count_trial(counter: Path) -> str:
    """Shell for a command agent that sets ``n`` to how many trials of this task began before
    this one: each trial leaves ``counter/<task id>/<n>`` (a task's trials start in order)."""
    return (f'c={shlex.quote(str(counter))}/"$SPIDER2_TASK_ID"; mkdir -p "$c"; '
            'n=$(ls "$c" | wc -l); mkdir "$c/$n"; ')


def held_solve(counter: Path, hold: Path, task: str | None = None) -> str:
    """A command agent's command that solves like :data:`TINY_SOLVE`, except that a task's
    second and later trials (only ``task``'s, when given) wait while ``hold`` exists: a test
    stops a run mid-trial with no race against a fast machine (the wait costs no CPU);
    ``counter`` (:func:`count_trial`) says when a wait has begun."""
    only = "" if task is None else f' && [ "$SPIDER2_TASK_ID" = {shlex.quote(task)} ]'
    wait = f"while [ -e {shlex.quote(str(hold))} ]; do sleep 0.05; done"
    return count_trial(counter) + f'if [ "$n" -gt 0 ]{only}; then {wait}; fi; {TINY_SOLVE}'


@contextmanager
def hold_lock(db: Path) -> Iterator[Callable[[], None]]:
    """Hold ``db`` read-write in another process, as a running ``dbt run`` does.

    Yields ``release()`` to let go early (e.g. from a timer); the lock is gone on exit anyway.
    """
    code = ("import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
            "sys.stdin.read(); c.close()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)

    def release() -> None:
        if proc.poll() is None:
            proc.communicate("", timeout=30)

    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield release
    finally:
        release()


def tiny_disk_prefix(mountpoint: Path, size: str) -> list[str]:
    """A command prefix that runs the rest with ``mountpoint`` on a tmpfs of ``size``: a real
    full disk, made without root (an unprivileged user and mount namespace, util-linux
    ``unshare``); the tmpfs vanishes with the command. Skips when namespaces are refused
    (Ubuntu 24.04's AppArmor restriction, macOS)."""
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True, check=False) \
        if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("unprivileged user namespaces are not available (unshare -Urm)")
    mountpoint.mkdir(parents=True, exist_ok=True)
    return ["unshare", "-Urm", "sh", "-c",
            f'mount -t tmpfs -o size={size} none "$0" && exec "$@"', str(mountpoint)]


def full_disk_prefix(mountpoint: Path, *copy_in: Path) -> list[str]:
    """Like :func:`tiny_disk_prefix` (a 1 MiB tmpfs), with ``copy_in`` copied onto it first and
    then every byte left taken: the rest runs on a disk that is already full."""
    prefix = tiny_disk_prefix(mountpoint, "1m")
    copies = " ".join(f'cp -a "{path}" "$0"/ &&' for path in copy_in)
    script = (f'mount -t tmpfs -o size=1m none "$0" && {copies} '
              '{ dd if=/dev/zero of="$0/.fill" bs=4096 2>/dev/null; true; } && exec "$@"')
    return [*prefix[:4], script, str(mountpoint)]


def heavy_imports(modules: Sequence[str], watched: Sequence[str]) -> list[str]:
    """Which of ``watched`` a fresh interpreter has loaded after importing ``modules``: what
    every process importing them (a CLI call, a query child) pays for at start-up."""
    code = (f"import sys; import {', '.join(modules)}; "
            f"print(','.join(sorted(m for m in {list(watched)!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    return [m for m in out.stdout.strip().split(",") if m]

# --- work done once per test session -------------------------------------------------------


def session_folder(basetemp: Path) -> Path:
    """The folder every process of this test session shares, given this process's base temp.

    Under pytest-xdist each worker's base temp is ``<session>/popen-gwN``, so the session's is
    its parent; without xdist the base temp is the session's own (its parent is shared by every
    past session of this user, so it must not be used).
    """
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


@dataclass(frozen=True)
class Outcome:
    """How a command run by :func:`run_once` ended, as every process that asked reads it."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    """Wall time of the command: an upper bound for any duration it recorded itself."""


OUTCOME_FILE = "outcome.json"


def run_once(folder: Path, command: Sequence[str], *, timeout: float,
             env: Mapping[str, str] | None = None) -> Outcome:
    """Run ``command`` in ``folder`` (its cwd) unless a process of this session already did.

    The first caller runs it holding an exclusive lock on ``<folder>.lock``; the others block
    on that lock, then read the recorded outcome: one build, whatever the number of xdist
    workers. The outcome is recorded only once the command ended, so a folder left by a
    process killed half-way holds none and is built again from scratch. ``fcntl.flock`` rather
    than the filelock package: that is not a dependency, and the kernel drops a flock when its
    holder dies, so a killed worker never wedges the others. A timeout is an outcome (exit code
    -1), recorded like any other, so the tests that share it all fail with it instead of each
    waiting ``timeout`` again.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    recorded = folder / OUTCOME_FILE
    with folder.with_name(folder.name + ".lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file is closed
        if not recorded.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            started = time.monotonic()
            try:
                done = subprocess.run(list(command), cwd=folder, env=env, capture_output=True,
                                      text=True, timeout=timeout, check=False)
                code, out, err = done.returncode, done.stdout, done.stderr
            except subprocess.TimeoutExpired as exc:
                code, out = -1, _text(exc.stdout)
                err = f"{command[0]}: timed out after {timeout:g}s\n{_text(exc.stderr)}"
            outcome = Outcome(code, out, err, round(time.monotonic() - started, 3))
            partial = folder / f".{OUTCOME_FILE}.tmp"
            partial.write_text(json.dumps(asdict(outcome)), encoding="utf-8")
            partial.replace(recorded)
    return Outcome(**json.loads(recorded.read_text(encoding="utf-8")))


def _text(data: str | bytes | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


XDG_BASES = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME")
"""Base folders that, when set, win over ``$HOME`` for the programs a test starts (the
sample's cache is one: ``$XDG_CACHE_HOME/spider2local``): unset in the session, so that
everything follows the session's own home."""

HOST_LOCATIONS: dict[str, str | None] = {name: os.environ.get(name)
                                         for name in ("HOME", *XDG_BASES)}
"""``HOME`` and the XDG base folders as this process found them, before
:func:`isolate_session` replaced them (this module is imported by tests/conftest.py before any
fixture runs): where :func:`cached_venv` keeps the interpreters built once per machine, and what
its pip reads its configuration from (here the package index lives in ~/.config/pip)."""


@dataclass(frozen=True)
class SessionHome:
    """The home folder and spider2local cache every process of one test session uses instead
    of the developer's (see :func:`isolate_session`)."""

    home: Path
    cache: Path
    sample: Path
    """The sample suite's dataset root, built in :attr:`cache` once for the session."""


def isolate_session(session: Path, monkeypatch: pytest.MonkeyPatch) -> SessionHome:
    """Give this process ``<session>/home`` as ``$HOME`` and ``<session>/cache`` as
    ``$SPIDER2LOCAL_CACHE``, with the XDG base folders unset; then build the sample suite there
    unless a process of this session already did.

    Why: a test must pass on a fresh machine, and must neither read what a developer's earlier
    builds left nor write into their home. The sample suite is built on first use and two builds
    of the same DuckDB file differ in bytes, so a cache kept between sessions hid tests that
    only passed against one machine's build; and every run appends the folders it used to the
    cache's registry of what agents must never see (:mod:`spider2local.dataset.known`), which
    grew with each session's temporary runs. Every xdist worker computes the same ``session``
    (:func:`session_folder`), so they share one cache; the build runs under an exclusive
    ``flock`` so the first worker builds and the others wait and reuse it (``ensure_built``
    alone is safe to race, but would build once per worker). The home matters beyond the cache:
    a code path that forgets ``$SPIDER2LOCAL_CACHE`` falls back to ``~/.cache`` here, and the
    programs tests start (the Claude CLI, dbt, tmux, a browser) keep their state under it.
    """
    home, cache = session / "home", session / "cache"
    home.mkdir(parents=True, exist_ok=True)
    cache.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPIDER2LOCAL_CACHE", str(cache))
    for name in XDG_BASES:
        monkeypatch.delenv(name, raising=False)
    with cache.with_name(cache.name + ".lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file is closed
        sample = ensure_built()
    return SessionHome(home, cache, sample)


REFERENCE_RUN_ARGS = ("run", "--agent", "reference", "--keep-db", "--jobs", "2",
                      "--runs-dir", "runs", "--run-id", "reference")
"""The sample suite's reference run, exactly as a user types it (the bundled suite: no
tasks.toml in its folder)."""


@dataclass(frozen=True)
class ReferenceRun:
    """``spider2local run --agent reference --keep-db --jobs 2`` over the bundled sample suite,
    done once per test session (the ``reference_run`` fixture) for every test that needs the
    reference solutions built by real dbt. The run folder is shared by every test of the
    session and must be left as it is: copy it first to change anything."""

    run_dir: Path
    outcome: Outcome

    def manifest(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.run_dir / "run.json").read_text())
        return data

    def dataset(self) -> Dataset:
        """The sample as the run loaded it: the suite file and dataset root its manifest names
        (task dates, solutions and gold all come from there)."""
        manifest = self.manifest()
        suite = load_suite(Path(manifest["suite"]["path"]))
        return load_dataset(suite.with_dataset(Path(manifest["dataset"])))


def build_reference_run(folder: Path) -> ReferenceRun:
    """The sample's reference run in ``folder``, run by the first process that asks."""
    outcome = run_once(folder, [sys.executable, "-m", "spider2local", *REFERENCE_RUN_ARGS],
                       env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=900)
    return ReferenceRun(folder / "runs" / "reference", outcome)


# --- interpreters of other stacks, built once per machine ----------------------------------

def cache_dir() -> Path:
    """Where tests keep what outlives a session (built venvs): the developer's
    ``$XDG_CACHE_HOME`` or ``~/.cache`` (:data:`HOST_LOCATIONS`, not the session's fresh home:
    a venv costs 30 s to 30 min of pip, and holds only pinned packages from the index, nothing
    this project built), under ``spider2local-test``."""
    base = HOST_LOCATIONS["XDG_CACHE_HOME"] or str(Path(HOST_LOCATIONS["HOME"] or Path.home())
                                                   / ".cache")
    return Path(base) / "spider2local-test"


def host_env() -> dict[str, str]:
    """This process's environment with the developer's home and XDG folders back: for pip,
    whose index and cache are configured there."""
    return {**os.environ, **{k: v for k, v in HOST_LOCATIONS.items() if v is not None}}


class VenvUnavailable(Exception):
    """The venv could not be built (offline, no wheel for this platform...): skip, saying why."""


def cached_venv(name: str, requirements: Sequence[str], *, imports: Sequence[str] = (),
                timeout: float = 600) -> Path:
    """The python of a venv holding exactly ``requirements``, built on first use and kept in
    :func:`cache_dir` under ``<name>-<hash of requirements and Python version>``, with the
    bytecode of ``imports`` (and what they import) written.

    Built under an exclusive ``flock`` (concurrent sessions and xdist workers build it once) in
    a scratch folder renamed into place only when the install succeeded, so a killed or failed
    build leaves nothing that looks usable and the next session tries again (the venv's console
    scripts keep the scratch folder's name in their shebangs: run tools as ``python -m``). Raises
    :class:`VenvUnavailable` with the installers' last words when it cannot be built.
    """
    key = json.dumps([sorted(requirements), list(sys.version_info[:2])])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    folder = cache_dir() / f"{name}-{digest}"
    python = folder / "bin" / "python"
    if python.is_file():
        return python
    folder.parent.mkdir(parents=True, exist_ok=True)
    with folder.with_name(folder.name + ".lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if python.is_file():
            return python
        scratch = folder.with_name(folder.name + ".building")
        failures = []
        for install in (_uv_install, _pip_install):
            shutil.rmtree(scratch, ignore_errors=True)
            try:
                install(scratch, requirements, timeout)
                _compile_imports(scratch, imports)
                break
            except subprocess.CalledProcessError as exc:
                words = (exc.stderr or exc.stdout or "").strip().splitlines()
                failures.append(f"{install.__name__[1:]}: {words[-1] if words else exc}")
            except subprocess.TimeoutExpired:
                failures.append(f"{install.__name__[1:]}: took over {timeout:g}s")
            except OSError as exc:  # no uv beside this interpreter
                failures.append(f"{install.__name__[1:]}: {exc}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
            raise VenvUnavailable(f"cannot install {' '.join(requirements)}: "
                                  f"{'; '.join(failures)}")
        scratch.rename(folder)  # a venv's python finds its packages through pyvenv.cfg
    return python


def _uv_install(venv: Path, requirements: Sequence[str], timeout: float) -> None:
    """The venv made and filled by uv (a dev dependency, beside this interpreter): mini-swe-agent
    cost pip 45 CPU-seconds (its venv's own pip from ensurepip, resolving, compiling every
    module's bytecode) and uv 2.7, measured with empty caches; the same versions resolved.
    Modules are compiled when first imported instead, by the tests that import them."""
    uv = str(Path(sys.executable).with_name("uv"))
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True,
                   capture_output=True, text=True, timeout=120, env=host_env())
    subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                    *requirements], check=True, capture_output=True, text=True,
                   timeout=timeout, env=host_env())


def _compile_imports(venv: Path, imports: Sequence[str]) -> None:
    """Import ``imports`` once in the new venv, writing their bytecode: uv writes none, and a
    sandboxed run cannot write it into the cache (read-only there), so each would compile them
    again (litellm: 7 s to import uncompiled, 3.6 s compiled, measured; uv's own
    ``--compile-bytecode`` compiles every module of the venv, 18 CPU-s for mini-swe-agent's)."""
    if imports:
        env = {k: v for k, v in host_env().items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run([str(venv / "bin" / "python"), "-c",
                        "; ".join(f"import {module}" for module in imports)], check=True,
                       capture_output=True, text=True, timeout=300, env=env)


def _pip_install(venv: Path, requirements: Sequence[str], timeout: float) -> None:
    """pip's way, where uv cannot install (an index configured for pip alone)."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                   capture_output=True, text=True, timeout=120)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", *requirements], check=True,
                   capture_output=True, text=True, timeout=timeout, env=host_env())


def manifest_json(folder: Any) -> dict[str, Any] | None:
    """run.json of ``folder`` (a RunFolder) as the JSON written, ``None`` when it has none."""
    manifest = folder.read_manifest()
    return None if manifest is None else dict(manifest.to_json())


def by_task(results: Any) -> dict[str, Any]:
    """Trial 1 of each task of ``{(task id, trial): result}``, by task id (1-trial runs)."""
    return {tid: r for (tid, trial), r in sorted(results.items()) if trial == 1}


def host_secrets(root: Path, secret: str) -> dict[str, Path]:
    """``secret`` in a text, CSV, JSON, Parquet and DuckDB file under ``root/host``: files
    outside the agent's folder that no reader of an agent's database may reach (by name)."""
    outside = root / "host"
    outside.mkdir()
    (outside / "secret.txt").write_text(secret)
    (outside / "secret.csv").write_text(f"a\n{secret}\n")
    (outside / "secret.json").write_text(f'{{"a": "{secret}"}}')
    con = duckdb.connect(str(outside / "gold.duckdb"))
    con.execute(f"CREATE TABLE t AS SELECT '{secret}' AS a")
    con.execute(f"COPY t TO '{outside / 'secret.parquet'}' (FORMAT parquet)")
    con.close()
    return {p.name: p for p in outside.iterdir()}



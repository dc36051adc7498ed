"""Shared fixtures: the session's own home and cache, the real Spider2-DBT tasks in ../shared,
tiny upstream-shaped datasets, and the sample suite's reference run, done once per test
session."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from spider2local.core.layout import WORKSPACE_RECORD
from spider2local.run.stale import remove_stale_workspaces
from spider2local.sandbox.readers import IN_PROCESS, IN_PROCESS_ENV
from tests.helpers import (
    HYPOTHESIS_PROFILE,
    ReferenceRun,
    SessionHome,
    build_reference_run,
    isolate_session,
    session_folder,
    write_task,
)

pytest_plugins = ("tests.tiers", "tests.system_wide", "tests.schedule", "tests.cputime")

# The suite starts hundreds of Python processes (the CLI, dbt, the query child); with
# PYTHONDONTWRITEBYTECODE set (as on this project's machines) each of them compiled spider2local
# from source again. Caching bytecode under __pycache__ (git-ignored) took the quick loop from
# 77 s to 67 s on 2 cores. Set here, before xdist starts its workers, so they inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Tests send SIGINT, SIGHUP and SIGQUIT to the processes they start (a Ctrl-C of the CLI, a
# signalled dbt shim). Started under `nohup` or as `cmd &` from a script, pytest inherits those
# signals ignored, and so would every child (an ignored signal stays ignored across exec):
# measured, three such tests hung for 30 s. The suite runs with them at their defaults.
for _sig, _handler in ((signal.SIGINT, signal.default_int_handler),
                       (signal.SIGHUP, signal.SIG_DFL), (signal.SIGQUIT, signal.SIG_DFL)):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, _handler)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the default, pyproject's addopts): with every tier, one worker more than
    CPUs, since many tests wait on a subprocess, a lock or a deadline rather than compute (a
    third worker on 2 cores took that loop from 60 s to 52 s, measured); the pure tier alone
    computes, and one worker per CPU is faster there (79 s against 92 s on 2 cores, measured
    together: every worker imports the whole suite)."""
    cpus = os.cpu_count() or 1
    everything = config.getoption("--full") or config.option.markexpr
    return cpus + 1 if everything else cpus


@contextlib.contextmanager
def _in_process_if_marked(node: pytest.Item | pytest.Collector) -> Iterator[None]:
    """The readers in-process for as long as it lasts, when ``node`` is marked
    ``in_process_readers`` (itself or its module)."""
    with pytest.MonkeyPatch.context() as patch:
        if node.get_closest_marker("in_process_readers") is not None:
            patch.setenv(IN_PROCESS_ENV, IN_PROCESS)
        yield


@pytest.fixture(scope="module", autouse=True)
def in_process_readers(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module marked ``in_process_readers`` runs every run of its tests (in the test's own
    process and in the CLI processes it starts, which inherit the environment) with the
    readers in-process (``SPIDER2LOCAL_READERS``, spider2local/sandbox/readers.py): for
    modules whose subject is the run's bookkeeping (trials, rounds, merges, reports), where
    three reader children per trial were most of the CPU of a trial (a noop run of the four
    sample tasks: 7.7 s of CPU with them, 2.1 s without, measured together). Module-scoped
    and autouse, so it is set before the module's own fixtures build their runs. Never for a
    module whose subject is a reader, its sandbox, a hang or a deadline of the stages."""
    with _in_process_if_marked(request.node):
        yield


@pytest.fixture(autouse=True)
def in_process_readers_here(request: pytest.FixtureRequest) -> Iterator[None]:
    """The same for one test marked ``in_process_readers`` in a module of mixed subjects
    (tests/cli/test_run_command.py: its kill -9 at the scoring stage needs the children, its
    noop and reference runs do not)."""
    with _in_process_if_marked(request.node):
        yield


settings.register_profile("dev", max_examples=25, print_blob=True)
settings.register_profile("ci", max_examples=100, print_blob=True)
settings.load_profile(HYPOTHESIS_PROFILE)

SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "spider2-dbt"


def tree_digest(root: Path) -> dict[str, str]:
    """``relative path -> sha256`` of every file under ``root`` (the .duckdb files too)."""
    found = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        with path.open("rb") as fh:
            found[path.relative_to(root).as_posix()] = hashlib.file_digest(fh, "sha256").hexdigest()
    return found


# xdist's workers export COLUMNS=80 and LINES=24 (execnet sets them); a piped `spider2local run`
# (CI, a script) has neither, and the CLI fits its tables to $COLUMNS when set. The tests see
# what a user's pipe sees; those about widths set COLUMNS themselves.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionHome]:
    """Every test, and every program it starts, sees a home folder and a spider2local cache of
    this session's own, shared by its xdist workers, with the sample suite built there once:
    the session passes on a fresh machine or fails on this one, and never reads or writes the
    developer's ~/.cache/spider2local (see :func:`tests.helpers.isolate_session`). A fixture
    rather than a ``pytest_configure`` hook: the base temp is only public through
    ``tmp_path_factory``, and no test module reads the cache while being collected."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield isolate_session(session_folder(tmp_path_factory.getbasetemp()), monkeypatch)


@pytest.fixture(scope="session", autouse=True)
def shared_dataset_untouched() -> Iterator[None]:
    """No test may change the real tasks: every file is hashed before the session and again
    after it (each xdist worker checks its own tests; about 20 ms for the two tasks)."""
    if not SHARED_DATASET.is_dir():
        yield
        return
    before = tree_digest(SHARED_DATASET)
    yield
    after = tree_digest(SHARED_DATASET)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    assert changed == [], f"tests changed {SHARED_DATASET}: {changed}"


@pytest.fixture
def shared_dataset() -> Path:
    """The two real tasks (playbook001, mrr001); read-only: copy before writing."""
    if not (SHARED_DATASET / "examples" / "spider2-dbt.jsonl").is_file():
        pytest.skip(f"real Spider2-DBT tasks not found at {SHARED_DATASET}")
    return SHARED_DATASET


@pytest.fixture
def tiny_dataset(tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``tiny_dataset("t1", "t2", ...)`` makes a valid dataset root with those tasks."""
    root = tmp_path / "spider2-dbt"

    def build(*ids: str, **kwargs: Any) -> Path:
        (root / "examples").mkdir(parents=True, exist_ok=True)
        for tid in ids:
            write_task(root, tid, **kwargs)
        return root

    return build


@pytest.fixture(autouse=True)
def no_workspace_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test's runs leave no workspace in the system temp folder: after a test with a
    ``tmp_path``, every workspace its run folders record (``workspace.json``, a transcript's
    attempts) is reaped and removed, as the next command on a run would do
    (:func:`spider2local.run.stale.remove_stale_workspaces`). Without it a ``--keep`` or a
    killed runner left a workspace (~1 MB, with its Claude CLI's config) in /tmp on every
    machine that ran the suite: four a session, 97 found here after a day of runs."""
    # asked now: by this fixture's teardown, tmp_path's own is done and its value gone
    tmp_path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames \
        else None
    yield
    if tmp_path is None:
        return
    for folder, _dirs, files in os.walk(tmp_path):
        if WORKSPACE_RECORD in files:
            remove_stale_workspaces(Path(folder))


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory,
                  session_home: SessionHome) -> ReferenceRun:
    """The sample suite's reference run (real dbt, ~25 s), once per session, xdist included.

    Each layer that needs the reference solutions built asserts what it is there to prove on
    this one run folder instead of building them again: the sample's solutions pass official
    scoring at each task's date (tests/dataset), the reference agent builds models equal to
    gold (tests/agents), ``run`` reports and ``score`` re-scores them (tests/cli). It asks for
    ``session_home`` by name, not only through autouse, so the CLI it starts is sure to find
    the session's cache in its environment.
    """
    return build_reference_run(session_folder(tmp_path_factory.getbasetemp()) / "reference-run")


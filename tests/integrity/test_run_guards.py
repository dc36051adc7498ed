"""The guards through the run: fingerprints in run.json, a refused resume, a refused re-score,
--accept-changes; with the noop agent on tiny real datasets (real workspaces, DuckDB, scoring)."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.agents.noop import NoopAgent
from spider2local.core.results import ErrorKind, Integrity, Status
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset
from spider2local.exceptions import UserError
from spider2local.integrity import guard
from spider2local.run.folder import RunFolder
from spider2local.run.plan import RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.rescore import rescore_run
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite
from tests.helpers import by_task, manifest_json

pytestmark = pytest.mark.process


@pytest.fixture
def data(tiny_dataset: Callable[..., Path], tmp_path: Path) -> Dataset:
    return load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1", "t2")))


def run(data: Dataset, folder: RunFolder) -> None:
    plan = RunPlan(folder, select_tasks(data), RunSettings(agent="noop", keep_db=True),
                   NoopAgent, data.suite.path, "sha", data.root)
    anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))


def add_table(db: Path) -> None:
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE extra AS SELECT 1 AS x")
    con.close()


@pytest.mark.in_process_readers  # its subject is the guard, not the readers
def test_fingerprints_are_in_run_json_and_clean_tasks_say_clean(
        data: Dataset, tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    run(data, folder)
    manifest = manifest_json(folder)
    assert manifest is not None and manifest["manifest_version"] == 3
    recorded = guard.Fingerprints.from_json(manifest["integrity"])
    assert recorded is not None and set(recorded.tasks) == {"t1", "t2"}
    assert all(r.integrity is Integrity.CLEAN for r in by_task(folder.trial_results()).values())
    assert rescore_run(folder, data)  # untouched: re-scored as before


@pytest.mark.in_process_readers  # its subject is the guard, not the readers
def test_a_resume_after_gold_changed_is_refused(data: Dataset, tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    run(data, folder)
    folder.result_path("t2").unlink()  # as if the run had been killed before t2 finished
    t2 = data.get("t2")
    assert t2 is not None and t2.gold is not None
    add_table(t2.gold.db)
    with pytest.raises(UserError, match=r"cannot be resumed: changed since it started: t2: "
                                        r"gold file .* changed"):
        run(data, folder)


@pytest.mark.in_process_readers  # its subject is the guard, not the readers
def test_a_resume_of_a_finished_run_after_gold_changed_is_refused(
        data: Dataset, tmp_path: Path) -> None:
    """Nothing left to run is no reason to skip the check: the finished tasks' gold is
    compared too (only the tasks to run were, so this resume was accepted)."""
    folder = RunFolder.at(tmp_path / "runs", "r")
    run(data, folder)
    before = folder.read_manifest()
    t1 = data.get("t1")
    assert t1 is not None and t1.gold is not None
    add_table(t1.gold.db)
    with pytest.raises(UserError, match=r"cannot be resumed: changed since it started: t1: "
                                        r"gold file .* changed"):
        run(data, folder)
    assert folder.read_manifest() == before


@pytest.mark.in_process_readers  # its subject is the guard, not the readers
def test_a_resume_with_another_scorer_is_refused(data: Dataset, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "pkg"
    shutil.copytree(guard.SOURCE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(guard, "SOURCE_ROOT", copy)
    folder = RunFolder.at(tmp_path / "runs", "r")
    run(data, folder)
    folder.result_path("t2").unlink()
    (copy / "evaluation" / "compare.py").write_text("# emptied\n")
    with pytest.raises(UserError, match=r"scorer source evaluation/compare\.py"):
        run(data, folder)


def test_gold_tampered_during_the_run_is_an_integrity_error_for_that_task_only(
        data: Dataset, tmp_path: Path) -> None:
    t2 = data.get("t2")
    assert t2 is not None and t2.gold is not None
    gold = t2.gold.db

    class Tamperer(NoopAgent):
        async def run(self, ctx):  # type: ignore[no-untyped-def]
            if ctx.task.id == "t1":
                add_table(gold)  # another task's gold, as an unisolated agent can
            return await super().run(ctx)

    folder = RunFolder.at(tmp_path / "runs", "r")
    plan = RunPlan(folder, select_tasks(data), RunSettings(agent="noop", jobs=1, keep_db=True),
                   Tamperer, data.suite.path, "sha", data.root)
    anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    results = by_task(folder.trial_results())
    assert results["t1"].status is Status.FAILED  # its own gold is untouched: scored
    t2r = results["t2"]
    assert t2r.status is Status.ERROR and t2r.passed is None and t2r.error is not None
    assert t2r.error.kind is ErrorKind.INTEGRITY and str(gold) in t2r.error.message
    # `score RUN_DIR` refuses the tampered run: one line, exit 2.
    proc = subprocess.run([sys.executable, "-m", "spider2local", "--dataset", str(data.root),
                           "score", str(folder.root)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "tampered" in proc.stderr
    assert "--accept-changes" in proc.stderr


@pytest.mark.in_process_readers  # its subject is the guard, not the readers
def test_rescore_refuses_changed_gold_unless_accepted(data: Dataset, tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    run(data, folder)
    t1 = data.get("t1")
    assert t1 is not None and t1.gold is not None
    add_table(t1.gold.db)
    with pytest.raises(UserError, match=r"changed since it ran: t1: gold file"):
        rescore_run(folder, data)
    done = rescore_run(folder, data, accept_changes=True)
    assert {d.task_id for d in done if d.result is not None} == {"t1", "t2"}, \
        [(d.task_id, d.reason) for d in done]
    manifest = manifest_json(folder)
    assert manifest is not None and "accepted_changes_at" in manifest["integrity"]
    assert rescore_run(folder, data)  # today's files are now the reference

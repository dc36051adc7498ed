"""Graded tables kept by the runner, then ``regrade`` (spider2local/run/graded.py, regrade.py):
real workspaces, DuckDB and reader sandboxes, with test agents that write the graded table by
hand (tests/run/test_runner.py does the same); the CLI's end-to-end runs with real dbt are in
tests/cli/test_regrade_command.py."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.core.layout import GRADED_DB, RESULT, TRANSCRIPT
from spider2local.core.results import Status, TaskResult, Usage
from spider2local.core.verdicts import TaskScore
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset
from spider2local.evaluation import official, score_database
from spider2local.evaluation.params import EvalParams
from spider2local.run.folder import RunFolder
from spider2local.run.progress import Progress
from spider2local.run.regrade import regrade_run
from spider2local.run.runner import Trial, run_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite
from tests.helpers import write_task

pytestmark = pytest.mark.process  # every test reads a real run made in its module

VALUES = {"near": 1.005, "exact": 1.0, "wrong": 7.0}
"""What the agent writes per task, against a gold of 1.0: within the official tolerance
(0.01) but not within 0.001, equal, and far off."""


class Writer:
    """Writes the graded ``orders`` table (and a table nobody grades) by hand."""

    name = "writer"

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        with duckdb.connect(str(ctx.workspace.database)) as con:
            value = VALUES[ctx.task.id]
            con.execute(f"CREATE TABLE orders AS SELECT {value}::DOUBLE AS id")
            con.execute("CREATE TABLE scratch AS SELECT range AS n FROM range(100000)")
        ctx.meter.set(Usage(turns=1))
        return AgentOutcome(usage=ctx.meter.usage)


def dataset(tmp_path: Path) -> Dataset:
    root = tmp_path / "spider2-dbt"
    if not root.exists():
        for tid in VALUES:
            write_task(root, tid, gold_tables={"orders": "SELECT 1.0::DOUBLE AS id",
                                               "customers": "SELECT 1 AS c"})
    return load_dataset(Suite(tmp_path / "tasks.toml", root))


def run(tmp_path: Path, run_id: str = "r", trials: int = 2, **kw: object) -> RunFolder:
    folder = RunFolder.at(tmp_path / "runs", run_id)
    data = dataset(tmp_path)
    settings = RunSettings(**{"agent": "writer", "jobs": 2, "timeout": 60.0, "trials": trials,
                              **kw})  # type: ignore[arg-type]
    order = [Trial(t, k) for k in range(1, trials + 1) for t in data.tasks]
    anyio.run(run_tasks, order, folder, settings, Writer, Progress(io.StringIO(), live=False))
    return folder


def in_process(jobs: Sequence[tuple[Path, Path, EvalParams]]) -> list[TaskScore | Exception]:
    """Today's scorer run in this process, so that a test can change one of its rules."""
    return [score_database(result, gold, params) for result, gold, params in jobs]


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of three tasks, two trials each, without --keep-db (shared: copy to change)."""
    base = tmp_path_factory.mktemp("regrade")
    run(base)
    return base


@pytest.fixture
def copied(made: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(made, tmp_path / "copy", symlinks=True)
    return tmp_path / "copy"


def results_text(folder: RunFolder) -> dict[str, str]:
    return {p.relative_to(folder.root).as_posix(): p.read_text()
            for p in sorted(folder.root.rglob(RESULT))}


def test_each_trial_keeps_its_graded_tables_and_their_hash(made: Path) -> None:
    folder = RunFolder(made / "runs" / "r")
    results = folder.trial_results()
    assert sorted(results) == [(t, k) for t in sorted(VALUES) for k in (1, 2)]
    for (tid, k), result in results.items():
        kept = folder.graded_db(tid, k)
        assert result.graded_sha256 == hashlib.sha256(kept.read_bytes()).hexdigest()
        assert not (kept.parent / "result.duckdb").exists()  # made without --keep-db
        with duckdb.connect(str(kept), read_only=True) as con:  # exactly the graded tables
            assert con.execute("SELECT table_name FROM duckdb_tables()").fetchall() == \
                [("orders",)]
            assert con.execute("SELECT id FROM orders").fetchone() == (VALUES[tid],)
        assert kept.stat().st_size < 200_000
        events = [json.loads(line) for line in (kept.parent / TRANSCRIPT).read_text().splitlines()]
        graded = next(e["data"] for e in events if e["kind"] == "graded")
        assert graded == {"sha256": result.graded_sha256, "bytes": kept.stat().st_size,
                          "tables": {"orders": None}}
        assert "graded" in result.durations
    assert {tid: r.status for (tid, _), r in results.items()} == {
        "near": Status.PASSED, "exact": Status.PASSED, "wrong": Status.FAILED}


@pytest.mark.process
def test_regrade_reproduces_every_verdict_and_writes_nothing(made: Path) -> None:
    folder = RunFolder(made / "runs" / "r")
    before = results_text(folder)
    found = regrade_run(folder, dataset(made))  # today's scorer, in its reader sandbox
    assert [t.label for t in found.regraded] == ["exact", "exact#2", "near", "near#2",
                                                 "wrong", "wrong#2"]
    assert found.changed == () and found.refused == () and found.written == 0
    assert found.changed_since_run == ()
    assert results_text(folder) == before


def test_a_tighter_tolerance_lists_exactly_the_trials_that_flip(
        copied: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = RunFolder(copied / "runs" / "r")
    before = results_text(folder)
    monkeypatch.setattr(official, "TOLERANCE", 0.001)
    found = regrade_run(folder, dataset(copied), scorer=in_process)
    assert [(t.label, t.describe()) for t in found.changed] == [
        ("near", "passed -> failed (tables 1/1 -> 0/1; orders fails now)"),
        ("near#2", "passed -> failed (tables 1/1 -> 0/1; orders fails now)")]
    assert results_text(folder) == before  # nothing written unless asked
    written = regrade_run(folder, dataset(copied), write=True, scorer=in_process)
    assert written.written == 2
    after = results_text(folder)
    assert {k for k in after if after[k] != before[k]} == {"near/result.json",
                                                            "_trials/2/near/result.json"}
    near = folder.load_result("near")
    assert near is not None and near.status is Status.FAILED and near.tables_passed == 0
    old = TaskResult.from_json(json.loads(before["near/result.json"]))
    assert (near.started_at, near.usage, near.graded_sha256) == (old.started_at, old.usage,
                                                                  old.graded_sha256)
    again = regrade_run(folder, dataset(copied), scorer=in_process)
    assert again.changed == ()  # the rewritten verdicts are today's
    monkeypatch.setattr(official, "TOLERANCE", 0.01)
    back = regrade_run(folder, dataset(copied), scorer=in_process)
    assert [t.label for t in back.changed] == ["near", "near#2"]


def test_a_changed_graded_file_is_refused_never_scored(copied: Path) -> None:
    folder = RunFolder(copied / "runs" / "r")
    scored: list[Path] = []

    def recording(jobs: Sequence[tuple[Path, Path, EvalParams]]) -> list[TaskScore | Exception]:
        scored.extend(result for result, _, _ in jobs)
        return in_process(jobs)

    wrong = folder.graded_db("wrong")
    with duckdb.connect(str(wrong)) as con:  # the "fix" someone made by hand
        con.execute("UPDATE orders SET id = 1.0")
    folder.graded_db("wrong", 2).unlink()
    folder.graded_db("wrong", 2).symlink_to(folder.graded_db("exact"))
    folder.graded_db("near", 2).unlink()
    before = results_text(folder)
    found = regrade_run(folder, dataset(copied), write=True, scorer=recording)
    why = {t.label: (t.refused, t.reason) for t in found.trials if t.new is None}
    assert set(why) == {"wrong", "wrong#2", "near#2"}
    refused, reason = why["wrong"]
    assert refused and "graded.duckdb does not match the sha256 its result.json recorded" \
        in str(reason) and str(reason).endswith("changed since the run; not scored")
    assert why["wrong#2"][0] and "not a plain file" in str(why["wrong#2"][1])
    assert why["near#2"] == (False, f"its {GRADED_DB} is gone")
    assert [p.parent.name for p in scored] == ["exact-1", "exact-2", "near-1"]  # only those
    assert found.changed == ()
    assert results_text(folder) == before


@pytest.mark.process
def test_trials_without_graded_tables_say_why(tmp_path: Path) -> None:
    folder = run(tmp_path, "plain", trials=1, keep_graded=False)
    for tid in VALUES:
        assert not folder.graded_db(tid).exists()
        result = folder.load_result(tid)
        assert result is not None and result.graded_sha256 is None
    found = regrade_run(folder, dataset(tmp_path))
    assert found.regraded == ()
    assert {t.reason for t in found.trials} == {
        "no graded tables kept (a run made with --no-keep-graded or before they were kept; "
        "`score RUN` re-scores databases kept with --keep-db)"}


def test_a_result_of_schema_5_reads_with_no_graded_tables(copied: Path) -> None:
    path = RunFolder(copied / "runs" / "r").result_path("exact")
    data = json.loads(path.read_text())
    assert data["schema_version"] == 6
    del data["graded_sha256"]
    data["schema_version"] = 5
    path.write_text(json.dumps(data))
    found = RunFolder(copied / "runs" / "r").load_result("exact")
    assert found is not None and found.graded_sha256 is None and found.status is Status.PASSED


def test_a_record_that_grades_a_table_the_run_never_kept_is_not_guessed(copied: Path) -> None:
    records = copied / "spider2-dbt" / "evaluation_suite" / "gold" / "spider2_eval.jsonl"
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    for line in lines:
        if line["instance_id"] == "near":
            line["evaluation"]["parameters"].update(condition_tabs=["orders", "customers"],
                                                    condition_cols=[[0], []],
                                                    ignore_orders=[True, True])
    records.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = regrade_run(RunFolder(copied / "runs" / "r"), dataset(copied), scorer=in_process)
    why = {t.label: t.reason for t in found.trials if t.new is None}
    assert why == dict.fromkeys(["near", "near#2"], "today's record grades 'customers', which "
                                                    "the run did not grade (so did not keep)")
    assert [t.label for t in found.regraded] == ["exact", "exact#2", "wrong", "wrong#2"]


@pytest.mark.process
def test_a_name_that_cannot_be_kept_costs_the_file_never_the_verdict(tmp_path: Path) -> None:
    root = tmp_path / "spider2-dbt"
    write_task(root, "near", gold_tables={"orders": "SELECT 1.0::DOUBLE AS id"},
               evaluation={"func": "duckdb_match", "parameters": {
                   "gold": "shop.duckdb", "condition_tabs": ["shop.main.orders"],
                   "condition_cols": [[0]], "ignore_orders": [True]}})
    folder = run(tmp_path, "odd", trials=1)
    result = folder.load_result("near")
    assert result is not None and result.status is Status.PASSED
    assert result.graded_sha256 is None and not folder.graded_db("near").exists()
    events = [json.loads(line) for line in
              (folder.trial_dir("near") / TRANSCRIPT).read_text().splitlines()]
    graded = next(e["data"] for e in events if e["kind"] == "graded")
    assert "NotKeepable" in graded["error"] and "shop.main.orders" in graded["error"]



def test_a_batch_whose_child_dies_is_scored_trial_by_trial(copied: Path) -> None:
    calls: list[int] = []

    def flaky(jobs: Sequence[tuple[Path, Path, EvalParams]]) -> list[TaskScore | Exception]:
        calls.append(len(jobs))
        if len(jobs) > 1:
            raise RuntimeError("the child died")
        if jobs[0][0].parent.name == "wrong-1":
            raise RuntimeError("this one cannot be read")
        return in_process(jobs)

    found = regrade_run(RunFolder(copied / "runs" / "r"), dataset(copied), scorer=flaky)
    assert calls == [6, 1, 1, 1, 1, 1, 1]
    assert {t.label: t.reason for t in found.trials if t.new is None} == {
        "wrong": "scoring failed: RuntimeError: this one cannot be read"}
    assert len(found.regraded) == 5 and found.changed == ()

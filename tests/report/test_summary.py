"""The final table and pass rates, rebuilt from result files and the manifest on disk."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from spider2local.agents.noop import NoopAgent
from spider2local.core.results import (
    ErrorKind,
    Stage,
    Status,
    TaskError,
    TaskResult,
    Usage,
    save_result,
)
from spider2local.dataset.load import load_dataset
from spider2local.report.jsonout import report_json
from spider2local.report.summary import NotAttempted, load_report
from spider2local.report.terminal import render_terminal as render_report
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest, SelectedTask
from spider2local.run.plan import RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite, TaskSettings

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the report's tables (tests/conftest.py)."""


def write_run(root: Path) -> RunFolder:
    folder = RunFolder.at(root, "r1")
    tasks = [SelectedTask("a", "2024-09-15", 2), SelectedTask("b", "2024-09-15", 3),
             SelectedTask("c", "2024-09-15", 1), SelectedTask("d", "2024-09-15", 2),
             SelectedTask("e", "", 4, "excluded: broken gold")]
    folder.write_manifest(RunManifest.begin(
        run_id="r1", agent="claude", settings={}, suite_path=root / "tasks.toml",
        suite_sha256="x", dataset_root=root, tasks=tasks, previous=None))

    def save(tid: str, status: Status, passed: bool | None, tp: int, tt: int,
             **extra: object) -> None:
        save_result(folder.result_path(tid), TaskResult(
            task_id=tid, status=status, agent="claude", fake_date="2024-09-15",
            started_at="s", finished_at="f", passed=passed, tables_passed=tp, tables_total=tt,
            durations={"total": 12.5}, **extra))  # type: ignore[arg-type]

    save("a", Status.PASSED, True, 2, 2, usage=Usage(turns=3, cost_usd_computed=0.5))
    save("b", Status.FAILED, False, 1, 3, usage=Usage(cost_usd_reported=0.25))
    save("c", Status.ERROR, None, 0, 0,
         error=TaskError(Stage.SCORE, ErrorKind.EXCEPTION, "gold unreadable", "ScoringError"))
    # d has no result (interrupted); e cannot run.
    return folder


def test_rates_over_attempted_and_over_all(tmp_path: Path) -> None:
    report = load_report(write_run(tmp_path))
    k = report.rates
    assert (k.tasks_passed, k.tasks_attempted, k.tasks_total) == (1, 3, 5)
    # c errored before scoring: its one graded table counts as failed (from the manifest).
    assert (k.tables_passed, k.tables_attempted, k.tables_total) == (3, 6, 12)
    assert report.cost_usd == 0.75
    statuses = {r.task_id: r.status for r in report.rows}
    assert statuses == {"a": Status.PASSED, "b": Status.FAILED, "c": Status.ERROR,
                        "d": NotAttempted.NOT_RUN, "e": NotAttempted.SKIPPED}
    assert statuses["a"] is Status.PASSED and statuses["d"] is NotAttempted.NOT_RUN
    assert statuses["e"] is NotAttempted.SKIPPED


def test_rendered_table_and_json(tmp_path: Path) -> None:
    report = load_report(write_run(tmp_path))
    text = render_report(report)
    assert "passed 1/3 (33.3% [" in text and "]) attempted; 1/5 (20.0%) selected" in text
    assert "tables passed 3/6 (50.0%) of attempted; 3/12 (25.0%) of all selected" in text
    assert "score: gold unreadable" in text and "excluded: broken gold" in text
    assert "$0.50" in text and "12.5s" in text
    data = json.loads(json.dumps(report_json(report)))  # as `report --json` prints it
    assert data["rates"]["tasks_total"] == 5 and len(data["tasks"]) == 5
    assert [t["status"] for t in data["tasks"]] == ["passed", "failed", "error", "not run",
                                                    "skipped"]
    rows = {line.split()[0]: line.split()[1:3] for line in text.splitlines()[2:7]}
    assert rows["d"] == ["not", "run"] and rows["e"] == ["skipped", "-"]


def test_report_without_manifest_uses_results(tmp_path: Path) -> None:
    folder = write_run(tmp_path)
    folder.manifest_path.unlink()
    report = load_report(folder)
    assert [r.task_id for r in report.rows] == ["a", "b", "c"]
    assert report.rates.tasks_total == 3


@pytest.mark.process
def test_skipped_tasks_tables_count_in_all_selected(tiny_dataset: Callable[..., Path],
                                                     tmp_path: Path) -> None:
    """A real run with one excluded task: its graded table is failed "of all selected"."""
    root = tiny_dataset("t1", "t2")
    suite = Suite(tmp_path / "tasks.toml", root, tasks={"t2": TaskSettings(exclude="broken")})
    data = load_dataset(suite)
    folder = RunFolder.at(tmp_path / "runs", "r")
    plan = RunPlan(folder, select_tasks(data), RunSettings(agent="noop"), NoopAgent,
                   suite.path, "sha", root)
    anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    report = load_report(folder)
    assert [(r.task_id, r.status, r.tables_total) for r in report.rows] == [
        ("t1", "failed", 1), ("t2", "skipped", 1)]
    k = report.rates
    assert (k.tables_passed, k.tables_attempted, k.tables_total) == (0, 1, 2)
    assert "tables passed 0/1 (0.0%) of attempted; 0/2 (0.0%) of all selected" in \
        render_report(report)


def _score(*tables: dict[str, object]) -> dict[str, object]:
    return {"passed": all(t["passed"] for t in tables), "error": None,
            "tables_passed": sum(bool(t["passed"]) for t in tables),
            "tables_total": len(tables), "tables": list(tables)}


def _table(name: str, passed: bool, **kw: object) -> dict[str, object]:
    return {"name": name, "passed": passed, "gold_rows": kw.get("gold_rows", 3),
            "result_rows": kw.get("result_rows", 3), "missing": kw.get("missing", False),
            "error": None, "notes": [], "columns": kw.get("columns", [])}


def test_a_failed_tasks_note_names_the_failing_tables_and_the_first_diagnostic(
        tmp_path: Path) -> None:
    """Main left the note of a failed task empty: the user had to open result.json."""
    folder = write_run(tmp_path)
    column = {"gold_column": "amount", "gold_index": 1, "reason": "2 of 3 values differ",
              "nearest": "amount", "position": 0, "gold_value": "1.5", "result_value": "2.5"}
    path = folder.result_path("b")
    data = json.loads(path.read_text())
    data["score"] = _score(_table("orders", True), _table("totals", False, columns=[column]),
                           _table("daily", False, missing=True, result_rows=None))
    path.write_text(json.dumps(data))
    row = {r.task_id: r for r in load_report(folder).rows}["b"]
    assert row.failing_tables == ("totals", "daily")
    assert row.note.startswith("failed totals, daily: totals: gold column 'amount' (#1): "
                               "2 of 3 values differ")
    assert "FAIL  daily: missing from the result" in row.diagnostics
    assert "failed totals, daily" in render_report(load_report(folder))


def test_tasks_cut_by_an_interrupt_are_interrupted_not_not_run(tmp_path: Path) -> None:
    """d started (its folder exists) and the run was stopped: main listed it as "not run"."""
    folder = write_run(tmp_path)
    folder.task_dir("d").mkdir()
    manifest = json.loads(folder.manifest_path.read_text())
    folder.write_manifest({**manifest, "finished_at": "f", "interrupted": True})
    report = load_report(folder)
    statuses = {r.task_id: r.status for r in report.rows}
    assert statuses["d"] is NotAttempted.INTERRUPTED
    assert report.headline.interrupted == 1 and report.interrupted
    text = render_report(report)
    assert "1 task(s) interrupted: resume with --run-id r1" in text
    # The same folder in a run that finished normally (a result the disk refused): not run.
    folder.write_manifest({**manifest, "finished_at": "f", "interrupted": False})
    assert {r.task_id: r.status for r in load_report(folder).rows}["d"] is \
        NotAttempted.NOT_RUN


def test_the_headline_divides_by_the_recorded_denominators(tmp_path: Path) -> None:
    folder = write_run(tmp_path)
    manifest = json.loads(folder.manifest_path.read_text())
    for task in manifest["tasks"]:
        task["free"] = task["id"] in ("a", "c")
    manifest["denominators"] = {"official": 68, "with_gold": 64, "runnable": 58}
    folder.write_manifest(manifest)
    report = load_report(folder)
    h = report.headline
    assert (h.passed, h.official, h.with_gold, h.runnable, h.attempted) == (1, 68, 64, 58, 3)
    assert h.free_passes == 1  # a passed and was free; c was free but errored
    text = render_report(report)
    shown = re.sub(r" \[[^]]*\]", "", text)  # the intervals, checked in tests/report/test_text
    assert "passed 1/68 (1.5%) official; 1/64 (1.6%) with gold; 1/58 (1.7%) runnable; " \
           "1/3 (33.3%) attempted; 1/5 (20.0%) selected" in shown
    assert "free passes: 1 of the 1 passes" in text
    assert h.cost_usd == 0.75 and h.seconds == 37.5


def test_a_run_without_recorded_denominators_says_what_it_knows(tmp_path: Path) -> None:
    report = load_report(write_run(tmp_path))
    assert report.headline.official is None and report.headline.free_passes is None
    text = render_report(report)
    assert "passed 1/3 (33.3%) attempted; 1/5 (20.0%) selected" in re.sub(r" \[[^]]*\]", "", text)
    assert "free passes: not measured" in text


def test_suspect_is_read_defensively_and_counted_apart(tmp_path: Path) -> None:
    """A result without the integrity mark reads as clean; an explicit suspect counts apart
    and keeps its verdict."""
    folder = write_run(tmp_path)
    path = folder.result_path("a")
    data = json.loads(path.read_text())
    data.update(integrity="suspect", schema_version=3)
    path.write_text(json.dumps(data))
    path = folder.result_path("c")
    data = json.loads(path.read_text())
    data.pop("integrity", None)
    path.write_text(json.dumps(data))
    report = load_report(folder)
    rows = {r.task_id: r for r in report.rows}
    assert rows["a"].integrity == "suspect" and rows["c"].integrity == "clean"
    assert (report.headline.suspect, report.headline.suspect_passes) == (1, 1)
    assert report.rates.tasks_passed == 1
    assert "1 suspect (1 of the passes)" in render_report(report)
    assert report_json(report)["suspect"] == ["a"]


def test_suspect_tasks_are_counted_apart_and_the_isolation_mode_is_named(
        tmp_path: Path) -> None:
    from spider2local.core.codec import dump
    from spider2local.core.results import Evidence, Integrity
    from spider2local.report.summary import isolation_of

    folder = write_run(tmp_path)
    for tid in ("a", "b"):
        path = folder.result_path(tid)
        data = json.loads(path.read_text())
        data.update(integrity="suspect", integrity_evidence=[
            dump(Evidence("transcript.jsonl", 4, "dataset root", "ls /data"))])
        path.write_text(json.dumps(data))
    report = load_report(folder)
    k = report.rates
    assert (k.tasks_suspect, k.passed_suspect, k.tasks_passed) == (2, 1, 1)  # verdict kept
    assert [r.integrity for r in report.rows[:3]] == [Integrity.SUSPECT, Integrity.SUSPECT,
                                                       "clean"]  # no mark reads as clean
    text = render_report(report)
    assert "run r1 (agent claude, isolation: none" in text
    assert "2 suspect (1 of the passes)" in text
    as_json = report_json(report)
    assert as_json["suspect"] == ["a", "b"] and as_json["isolation"] == "none"
    assert as_json["rates"]["tasks_suspect"] == 2
    # The mode is read defensively from whatever run.json recorded.
    assert isolation_of({"isolation": "namespace"}) == "namespace"
    assert isolation_of({"isolation": {"mode": "none", "reason": "no userns"}}) == "none"
    assert isolation_of({}) == "none" and isolation_of(None) == "none"


def test_a_report_without_suspects_has_no_suspect_line(tmp_path: Path) -> None:
    assert "suspect" not in render_report(load_report(write_run(tmp_path))).split("\n\n")[-1]


@pytest.mark.slow
def test_a_run_records_the_audits_denominators_and_free_passes(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    """plan_run/execute_run record what the report divides by, and which tasks were free; a
    resume keeps the measured flags (not measured again)."""
    from spider2local.run.plan import plan_run
    from tests.helpers import make_duckdb

    root = tiny_dataset("work", "free", "nogold")
    (root / "evaluation_suite" / "gold" / "nogold" / "shop.duckdb").unlink()
    start = root / "examples" / "free" / "shop.duckdb"
    start.unlink()
    make_duckdb(start, {"raw_orders": "SELECT 1 AS id", "orders": "SELECT 1 AS id"})
    suite = Suite(tmp_path / "tasks.toml", root)
    plan = plan_run(suite, load_dataset(suite), agent="noop", runs_dir=tmp_path / "runs",
                    run_id="r", isolation="none")
    anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    manifest = json.loads(plan.folder.manifest_path.read_text())
    assert manifest["denominators"] == {"official": 3, "with_gold": 2, "runnable": 2}
    assert {t["id"]: t.get("free") for t in manifest["tasks"]} == {
        "free": True, "nogold": None, "work": False}
    h = load_report(plan.folder).headline
    assert (h.passed, h.official, h.with_gold, h.runnable, h.free_passes) == (1, 3, 2, 2, 1)
    assert "free passes: 1 of the 1 passes" in render_report(load_report(plan.folder))


def test_a_replayed_run_says_so_and_names_the_trials_that_diverged(tmp_path: Path) -> None:
    """A run made with ``--replay`` says, in every format, which run it replayed and which
    trials stopped at a divergence (their verdicts are of the agent up to there); a damaged
    ``replayed`` record in a result is read as far as it goes; a live run says nothing."""
    folder = RunFolder.at(tmp_path, "rep")
    tasks = [SelectedTask(t, "2024-09-15", 1) for t in ("a", "b", "c")]
    folder.write_manifest(RunManifest.begin(
        run_id="rep", agent="claude", settings={}, suite_path=tmp_path / "tasks.toml",
        suite_sha256="x", dataset_root=tmp_path, tasks=tasks, previous=None))
    replayed = {"run": "rec", "trial": 1, "lenient": False, "recorded": 3, "served": 3,
                "diverged": None, "until": None, "stopped": None, "unverified_from": None}
    stop = "diverged at exchange 2: the result of tool mcp__spider2__query differs"
    for tid, record, status in (("a", replayed, Status.PASSED),
                                ("b", {**replayed, "served": 1, "stopped": stop}, Status.ERROR),
                                ("c", {"run": "rec", "stopped": 7}, Status.FAILED)):
        save_result(folder.result_path(tid), TaskResult(
            task_id=tid, status=status, agent="claude", fake_date="2024-09-15",
            started_at="s", finished_at="f", passed=status is Status.PASSED, tables_passed=0,
            tables_total=1, replayed=record,
            error=TaskError(Stage.AGENT, ErrorKind.AGENT, stop, "Diverged")
            if status is Status.ERROR else None))
    report = load_report(folder)
    assert report.replay is not None
    assert (report.replay.run, report.replay.trials, report.replay.lenient) == ("rec", 3, False)
    assert report.replay.stopped == (("b", stop),)
    assert f"replayed from run rec: 3 trial(s), 1 stopped at a divergence (first: b: {stop})" \
        in render_report(report, width=400)
    assert report_json(report)["replay"] == {"run": "rec", "trials": 3, "lenient": False,
                                             "stopped": [{"trial": "b", "message": stop}]}
    live = load_report(write_run(tmp_path / "live"))
    assert live.replay is None and report_json(live)["replay"] is None

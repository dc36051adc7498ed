"""The final table and pass rates, rebuilt from result files and the manifest on disk."""

from __future__ import annotations

from pathlib import Path

from spider2local.report import load_report, render_report, report_json
from spider2local.results import Stage, Status, TaskError, TaskResult, Usage, save_result
from spider2local.runfolder import RunFolder, SelectedTask, build_manifest


def write_run(root: Path) -> RunFolder:
    folder = RunFolder.at(root, "r1")
    tasks = [SelectedTask("a", "2024-09-15", 2), SelectedTask("b", "2024-09-15", 3),
             SelectedTask("c", "2024-09-15", 1), SelectedTask("d", "2024-09-15", 2),
             SelectedTask("e", "", 4, "excluded: broken gold")]
    folder.write_manifest(build_manifest(
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
         error=TaskError(Stage.SCORE, "ScoringError", "gold unreadable"))
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
    assert statuses == {"a": "passed", "b": "failed", "c": "error", "d": "not run",
                        "e": "skipped"}


def test_rendered_table_and_json(tmp_path: Path) -> None:
    report = load_report(write_run(tmp_path))
    text = render_report(report)
    assert "tasks passed 1/3 (33.3%) of attempted, 1/5 (20.0%) of all selected" in text
    assert "tables passed 3/6 (50.0%) of attempted, 3/12 (25.0%) of all selected" in text
    assert "score: gold unreadable" in text and "excluded: broken gold" in text
    assert "$0.50" in text and "12.5s" in text
    data = report_json(report)
    assert data["rates"]["tasks_total"] == 5 and len(data["tasks"]) == 5


def test_report_without_manifest_uses_results(tmp_path: Path) -> None:
    folder = write_run(tmp_path)
    folder.manifest_path.unlink()
    report = load_report(folder)
    assert [r.task_id for r in report.rows] == ["a", "b", "c"]
    assert report.rates.tasks_total == 3

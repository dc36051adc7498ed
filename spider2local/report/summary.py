"""The final table and pass rates, rebuilt from the run folder on disk.

Never from the runner's memory: the same report must come out after a resume, a re-score, or
for a run another machine made. Two denominators are shown because both are quoted: over the
tasks attempted (those with a result) and over every task of the selection, where a task that
could not run or never finished counts as failed, as in the official benchmark. Table rates
count each graded table of a task; a task that errored before scoring counts all its graded
tables (from the manifest) as failed.

Suspect tasks (the integrity scan found traces of the agent reaching outside its workspace)
keep their verdict and are counted apart: a column, a headline count, and how many of the
passes they are. The header names the run's isolation mode (run.json; ``none`` for runs that
recorded none), because what a pass rate is worth depends on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from spider2local.integrity.scan import Integrity
from spider2local.report.table import render_table
from spider2local.run.folder import RunFolder
from spider2local.run.results import Status, TaskResult


class NotAttempted(StrEnum):
    """A selected task without a result: it counts in "of all selected", never "attempted"."""

    SKIPPED = "skipped"
    """It cannot run (a dataset problem or a suite exclusion); the note says why."""
    NOT_RUN = "not run"
    """It could run but has no result yet (interrupted; a resume runs it)."""


class Verdict(StrEnum):
    """The official verdict as the table shows it."""

    PASS = "pass"
    FAIL = "fail"
    NONE = "-"
    """Not scored: no gold, an error before scoring, or no result at all."""


@dataclass(frozen=True)
class Row:
    task_id: str
    status: Status | NotAttempted
    """The result's status, or why there is no result."""
    verdict: Verdict
    tables_passed: int
    tables_total: int
    seconds: float | None
    cost_usd: float | None
    note: str = ""
    integrity: Integrity | None = None
    """``suspect`` or ``clean`` from the result; ``None`` when never scanned or not run."""


@dataclass(frozen=True)
class Rates:
    tasks_passed: int
    tasks_attempted: int
    tasks_total: int
    tables_passed: int
    tables_attempted: int
    tables_total: int
    tasks_suspect: int = 0
    passed_suspect: int = 0
    """Of ``tasks_passed``, how many are suspect (their verdict is kept, shown apart)."""

    @staticmethod
    def ratio(part: int, whole: int) -> float | None:
        return part / whole if whole else None


@dataclass(frozen=True)
class RunReport:
    run_id: str
    rows: tuple[Row, ...]
    rates: Rates
    cost_usd: float | None
    isolation: str = "none"
    """The isolation mode the run recorded (``none`` when it recorded none)."""


def _verdict(result: TaskResult) -> Verdict:
    if result.passed is None:
        return Verdict.NONE
    return Verdict.PASS if result.passed else Verdict.FAIL


def _row(result: TaskResult, graded: int) -> Row:
    note = f"{result.error.stage.value}: {result.error.message}" if result.error else ""
    total = result.tables_total or graded
    return Row(result.task_id, result.status, _verdict(result), result.tables_passed,
               total, result.durations.get("total"), result.usage.cost_usd, note,
               result.integrity)


def _selection(manifest: Mapping[str, Any] | None,
               results: Mapping[str, TaskResult]) -> list[dict[str, Any]]:
    tasks = manifest.get("tasks") if manifest else None
    if isinstance(tasks, list) and tasks:
        return [t for t in tasks if isinstance(t, dict) and "id" in t]
    return [{"id": tid, "tables": r.tables_total, "skipped": None}
            for tid, r in sorted(results.items())]


def build_rows(selection: Sequence[Mapping[str, Any]],
               results: Mapping[str, TaskResult]) -> list[Row]:
    rows = []
    for item in selection:
        tid, graded = str(item["id"]), int(item.get("tables") or 0)
        if tid in results:
            rows.append(_row(results[tid], graded))
        elif item.get("skipped"):
            rows.append(Row(tid, NotAttempted.SKIPPED, Verdict.NONE, 0, graded, None, None,
                            str(item["skipped"])))
        else:
            rows.append(Row(tid, NotAttempted.NOT_RUN, Verdict.NONE, 0, graded, None, None))
    return rows


def compute_rates(rows: Sequence[Row]) -> Rates:
    attempted = [r for r in rows if isinstance(r.status, Status)]
    return Rates(
        tasks_passed=sum(r.verdict is Verdict.PASS for r in rows),
        tasks_attempted=len(attempted), tasks_total=len(rows),
        tables_passed=sum(r.tables_passed for r in rows),
        tables_attempted=sum(r.tables_total for r in attempted),
        tables_total=sum(r.tables_total for r in rows),
        tasks_suspect=sum(r.integrity is Integrity.SUSPECT for r in rows),
        passed_suspect=sum(r.integrity is Integrity.SUSPECT and r.verdict is Verdict.PASS
                           for r in rows),
    )


def isolation_of(manifest: Mapping[str, Any] | None) -> str:
    """The isolation mode a run recorded, read defensively (a string, or a mapping with a
    ``mode``); ``none`` for runs that recorded nothing, which had no isolation."""
    value = manifest.get("isolation") if manifest else None
    if isinstance(value, Mapping):
        value = value.get("mode")
    return str(value) if value else "none"


def load_report(folder: RunFolder) -> RunReport:
    results = folder.results()
    manifest = folder.read_manifest()
    rows = tuple(build_rows(_selection(manifest, results), results))
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    return RunReport(folder.run_id, rows, compute_rates(rows), sum(costs) if costs else None,
                     isolation_of(manifest))


def _pct(part: int, whole: int) -> str:
    ratio = Rates.ratio(part, whole)
    return f"{part}/{whole} ({ratio:.1%})" if ratio is not None else f"{part}/{whole}"


def render_report(report: RunReport) -> str:
    rows = [(r.task_id, r.status, r.verdict,
             f"{r.tables_passed}/{r.tables_total}" if r.tables_total else "-",
             f"{r.seconds:.1f}s" if r.seconds is not None else "-",
             f"${r.cost_usd:.2f}" if r.cost_usd is not None else "-",
             r.integrity or "-", r.note)
            for r in report.rows]
    table = render_table(("task", "status", "verdict", "tables", "time", "cost", "integrity",
                          "note"), rows)
    k = report.rates
    lines = [
        table, "",
        f"run {report.run_id} (isolation: {report.isolation}): tasks passed "
        f"{_pct(k.tasks_passed, k.tasks_attempted)} of attempted, "
        f"{_pct(k.tasks_passed, k.tasks_total)} of all selected",
        f"tables passed {_pct(k.tables_passed, k.tables_attempted)} of attempted, "
        f"{_pct(k.tables_passed, k.tables_total)} of all selected",
    ]
    if k.tasks_suspect:
        lines.append(f"{k.tasks_suspect} suspect ({k.passed_suspect} of the passes): the agent "
                     "named or opened something outside its workspace; evidence in each "
                     "result.json (integrity_evidence)")
    if report.cost_usd is not None:
        lines.append(f"cost ${report.cost_usd:.2f}")
    return "\n".join(lines)


def report_json(report: RunReport) -> dict[str, Any]:
    return {"run_id": report.run_id, "isolation": report.isolation,
            "suspect": [r.task_id for r in report.rows if r.integrity is Integrity.SUSPECT],
            "rates": asdict(report.rates),
            "cost_usd": report.cost_usd, "tasks": [asdict(r) for r in report.rows]}


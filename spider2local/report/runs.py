"""``spider2local runs``: the past runs of a runs folder, one line each.

Rebuilt from disk like every report (run.json and the result files): id, when it started, the
agent and model, tasks selected, passed, cost and its state. A folder whose run.json cannot be
read is listed as ``damaged`` rather than hidden, so a person sees every run the folder holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from spider2local.core.table import render_table
from spider2local.exceptions import UserError
from spider2local.report.summary import load_report
from spider2local.run.folder import run_folders
from spider2local.run.lock import in_use


class RunState(StrEnum):
    FINISHED = "finished"
    INTERRUPTED = "interrupted"
    """Stopped by a signal, or killed (never finished): ``run --run-id ID`` resumes it."""
    RUNNING = "running"
    """An invocation holds the run's lock now."""
    DAMAGED = "damaged"
    """run.json cannot be read."""


@dataclass(frozen=True)
class PastRun:
    run_id: str
    path: str
    state: RunState
    started_at: str | None = None
    agent: str | None = None
    model: str | None = None
    tasks: int | None = None
    passed: int | None = None
    cost_usd: float | None = None
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        return data


def _one(path: Path, running: bool) -> PastRun:
    from spider2local.run.folder import RunFolder

    folder = RunFolder(path)
    try:
        report = load_report(folder)
    except UserError as exc:
        return PastRun(folder.run_id, str(path), RunState.DAMAGED, problem=str(exc))
    state = (RunState.RUNNING if running else
             RunState.INTERRUPTED if report.interrupted else RunState.FINISHED)
    return PastRun(folder.run_id, str(path), state, report.started_at, report.agent,
                   report.model, len(report.rows), report.headline.passed, report.cost_usd)


def past_runs(runs_dir: Path) -> list[PastRun]:
    """Every run of ``runs_dir``, oldest first (the last one is what 'latest' names)."""
    return [_one(f.root, in_use(f)) for f in run_folders(runs_dir)]


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.2f}"


def _started(value: str | None) -> str:
    return "-" if not value else value.replace("T", " ")[:19]


def render_runs(found: Sequence[PastRun], runs_dir: Path) -> str:
    if not found:
        return f"no runs in {runs_dir} (start one with `spider2local run`)"
    rows = [(r.run_id, _started(r.started_at), r.agent or "-", r.model or "-",
             "-" if r.tasks is None else r.tasks,
             "-" if r.passed is None else r.passed, _money(r.cost_usd),
             r.state.value if r.problem is None else f"{r.state.value}: {r.problem}")
            for r in found]
    headers = ("run", "started (UTC)", "agent", "model", "tasks", "passed", "cost", "state")
    return render_table(headers, rows)

"""``spider2local report RUN --task ID``: one task whole, for the person debugging it.

Per trial (K of them with ``--trials K``): its status and verdict with the numbers of its row,
the error with its stage and message, the per-table diagnostics, each dbt error with its whole
message, the files the agent changed (diffs against the start project), the verifier's last
report, and where the rest is on disk: transcript, the dbt log as text, result.json, the kept
database and the workspace when it was kept. Rebuilt from the run folder alone like every
report (:mod:`.summary` for the row, :mod:`.details` for the task folder's files).

Everything here may carry what an agent wrote, so each line goes through
:func:`~spider2local.core.printable.printable` (a terminal escape in a model file or a dbt
message is shown, never run).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from spider2local.core.layout import (
    AGENT_STDERR,
    AGENT_STDOUT,
    AGENT_TRAJECTORY,
    DBT_LOG,
    DBT_LOGS,
    DBT_TEXT,
    ERROR_TRACEBACK,
    RESULT,
    RESULT_DB,
    TRANSCRIPT,
    WORKSPACE_RECORD,
)
from spider2local.core.printable import printable
from spider2local.core.results import Status
from spider2local.exceptions import UserError
from spider2local.report.details import TaskDetails, load_details
from spider2local.report.summary import Row, RunReport
from spider2local.report.text import money, seconds
from spider2local.run.folder import RunFolder
from spider2local.workspace.guard import is_workspace_file

INDENT = "  "


def task_rows(report: RunReport, task_id: str, trial: int | None = None) -> list[Row]:
    """The rows of ``task_id`` (every trial, or ``trial`` alone); a task the run does not hold
    is a :class:`UserError` naming the ones it does."""
    rows = [r for r in report.rows if r.task_id == task_id]
    if not rows:
        known = sorted({r.task_id for r in report.rows})
        shown = ", ".join(known[:12]) + (f" and {len(known) - 12} more" if len(known) > 12
                                         else "")
        raise UserError(f"run {report.run_id} has no task {task_id!r}"
                        + (f" (its tasks: {shown})" if known else " (it holds no task)"),
                        fix="pass one of its task ids to --task")
    if trial is None:
        return rows
    chosen = [r for r in rows if r.trial == trial]
    if not chosen:
        raise UserError(f"task {task_id!r} of run {report.run_id} has no trial {trial} "
                        f"(trials 1-{max(r.trial for r in rows)})",
                        fix="pass one of its trials to --trial")
    return chosen


def _lines(text: str, depth: int = 2) -> list[str]:
    pad = INDENT * depth
    return [pad + printable(line) for line in text.rstrip("\n").splitlines()] or [pad + "-"]


def _fake_date(folder: RunFolder, row: Row) -> str | None:
    try:
        result = folder.load_result(row.task_id, row.trial)
    except Exception:  # a link in the task's place: no result of ours
        return None
    return result.fake_date if result is not None else None


def _workspace(task_dir: Path) -> str | None:
    """Where the trial's workspace was (workspace.json), if it is still there (kept)."""
    path = task_dir / WORKSPACE_RECORD
    if not is_workspace_file(task_dir, path):
        return None
    try:
        root = json.loads(path.read_text(encoding="utf-8")).get("root")
    except (OSError, ValueError, AttributeError):
        return None
    return str(root) if isinstance(root, str) and Path(root).is_dir() else None


def _where(task_dir: Path) -> list[str]:
    """Where the trial's files are, each named whether or not it exists (what is missing is
    worth knowing too: no database without --keep-db)."""
    def at(name: str, path: Path, missing: str) -> str:
        return f"{INDENT * 2}{name:<11} " + printable(
            str(path) if is_workspace_file(task_dir, path) else f"{missing} ({path.name})")

    dbt = task_dir / DBT_LOGS
    text = dbt / DBT_TEXT
    log = at("dbt log", text, "none") if is_workspace_file(task_dir, text) \
        else at("dbt log", dbt / DBT_LOG, "none")
    lines = [at("result", task_dir / RESULT, "none"),
             at("transcript", task_dir / TRANSCRIPT, "none"), log,
             at("database", task_dir / RESULT_DB, "not kept: run --keep-db keeps it")]
    if is_workspace_file(task_dir, task_dir / ERROR_TRACEBACK):
        lines.append(at("traceback", task_dir / ERROR_TRACEBACK, "none"))
    for name, file in (("agent out", AGENT_STDOUT), ("agent err", AGENT_STDERR),
                       ("trajectory", AGENT_TRAJECTORY)):  # a command agent's, where kept
        if is_workspace_file(task_dir, task_dir / file):
            lines.append(at(name, task_dir / file, "none"))
    kept = _workspace(task_dir)
    lines.append(f"{INDENT * 2}{'workspace':<11} "
                 + (printable(kept) + " (kept)" if kept else "removed (run --keep keeps it)"))
    return lines


def _section(title: str, body: Iterable[str]) -> list[str]:
    body = list(body)
    return [f"{INDENT}{title}:", *(body or [INDENT * 2 + "none"])]


def _trial(folder: RunFolder, report: RunReport, row: Row, several: bool) -> list[str]:
    name = row.name if several else row.task_id
    tables = f"{row.tables_passed}/{row.tables_total}" if row.tables_total else "-"
    out = [printable(f"{name}: {row.status}, verdict {row.verdict}, tables {tables}, "
                     f"time {seconds(row.seconds)}, cost {money(row.cost_usd)}, "
                     f"tokens {row.tokens.total:,}, turns {row.turns}")]
    if not isinstance(row.status, Status):  # skipped, not run, interrupted: no folder to read
        if row.note:
            out.append(INDENT + "why: " + printable(row.note))
        return out
    task_dir = folder.trial_dir(row.task_id, row.trial)
    date = _fake_date(folder, row)
    out.append(f"{INDENT}fake date {printable(date or '-')}, integrity {row.integrity or '-'}")
    if row.error_stage:
        out.append(f"{INDENT}error at {row.error_stage} ({row.error_kind}):")
        out += _lines(row.error_message or "")
    details: TaskDetails = load_details(task_dir, report.dataset)
    out += _section("per-table diagnostics",
                    _lines(row.diagnostics) if row.diagnostics else [INDENT * 2 + "not scored"])
    if details.evidence:
        out += _section("integrity evidence", (x for e in details.evidence for x in _lines(e)))
    out += _section("dbt errors", (x for e in details.dbt_errors for x in _lines(e)))
    files: list[str] = []
    for change in details.files:
        files.append(f"{INDENT * 2}{printable(change.path)} ({change.change})")
        files += _lines(change.diff, 3)
    out += _section(f"files the agent changed (against {details.diff_source})", files)
    last = details.subagent_reports[-1:] if details.subagent_reports else ()
    out += _section("the verifier's last report",
                    (x for e in last for x in [f"{INDENT * 2}{printable(e.title)}:",
                                               *_lines(e.text, 3)]))
    out += _section("files", _where(task_dir))
    return out


def render_task(folder: RunFolder, report: RunReport, task_id: str,
                trial: int | None = None) -> str:
    """The text of ``report RUN --task ID`` (see the module docstring)."""
    rows = task_rows(report, task_id, trial)
    several = report.trials > 1
    head = (f"task {task_id} in run {report.run_id} (agent {report.agent or '-'}, "
            f"model {report.model or '-'}"
            + (f", {len(rows)} of {report.trials} trials" if several else "") + ")")
    parts: list[Sequence[str]] = [[printable(head)]]
    parts += [_trial(folder, report, row, several) for row in rows]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"

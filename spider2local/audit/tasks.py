"""Audit a dataset: what can run, what reads the clock, what is graded, what passes for free.

The audit is the source for how scores are reported (docs/dataset.md): "passed / runnable" and
"passed / 68" both need to know which tasks cannot run at all and which pass with no work.

"Passes with no work" (``--baseline``) scores the untouched start database directly with
:func:`spider2local.evaluation.score_database`. That is equivalent to running the runner with
the noop agent (which changes nothing, so the runner would score that very database) and takes
seconds instead of a run folder and a runner start per task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio

from spider2local.clock.dates import derive_task
from spider2local.clock.reads import scan_clock_reads
from spider2local.core.table import render_table
from spider2local.dataset.load import gold_folder
from spider2local.dataset.problems import GOLD_KINDS, START_KINDS, ProblemKind
from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.db import catalog
from spider2local.db.connect import open_database
from spider2local.db.snapshot import DbSnapshot, FileIdentity, file_identity
from spider2local.dbtproject import packages
from spider2local.evaluation.params import gold_positions
from spider2local.safepath import name_problem
from spider2local.sandbox.dbreads import remember_snapshot
from spider2local.suite.model import Confidence, DateMethod, DateSource


@dataclass(frozen=True)
class GradedTable:
    name: str
    in_gold: bool
    columns: tuple[str, ...]
    """Names of the graded gold columns (``condition_cols`` positions resolved)."""
    bad_positions: tuple[int, ...] = ()
    """Graded positions outside the gold table (iloc refuses them: the table scores 0)."""


@dataclass(frozen=True)
class TaskAudit:
    id: str
    runnable: bool
    has_gold: bool
    """A usable gold database and evaluation config (the built-in ``has-gold`` subset)."""
    problems: tuple[str, ...]
    supplied: tuple[str, ...]
    """Packages setup copied from sibling tasks (``dbt_utils: retail001 exact 1.1.1``)."""
    reads_clock: bool
    clock_reads: tuple[str, ...]
    date: str
    """The date ``run`` will use (``Suite.run_date``): nothing else is ever used."""
    date_source: DateSource
    """``task`` (its own, written by derive-dates or by hand) or ``default`` (the suite's)."""
    date_method: DateMethod | None
    date_evidence: str | None
    date_confidence: Confidence | None
    """What the suite file records about the task's date (``None``: nothing)."""
    suggested_date: str | None
    """When the suite records nothing: the date derive-dates would write (heuristics only, no
    rebuild). Suggested, NOT used until written into the suite file."""
    suggested_method: DateMethod | None
    suggested_evidence: str | None
    suggested_confidence: Confidence | None
    graded: tuple[GradedTable, ...]
    passes_with_no_work: bool | None = None
    """With --baseline: does the untouched start database already pass? None when unknown."""
    baseline_note: str | None = None


async def audit_dataset(data: Dataset, *, baseline: bool = False) -> list[TaskAudit]:
    """One :class:`TaskAudit` per task, in dataset order (tasks are audited one at a time)."""
    return [await audit_task(task, baseline=baseline) for task in data.tasks]


async def audit_task(task: TaskSpec, *, baseline: bool = False) -> TaskAudit:
    scan = await anyio.to_thread.run_sync(scan_clock_reads, task.project_dir)
    suggestion = await _suggestion(task)
    supplied = tuple(f"{name}: {text}"
                     for name, text in packages.supplied_packages(task.project_dir).items())
    passed, note = await _baseline(task) if baseline else (None, None)
    return TaskAudit(
        id=task.id, runnable=task.runnable, has_gold=task.has_gold,
        problems=((f"excluded: {task.excluded}",) if task.excluded else ())
        + tuple(str(p) for p in task.problems),
        supplied=supplied, reads_clock=scan.reads_clock,
        clock_reads=tuple(h.describe() for h in scan.hits),
        date=task.date.isoformat(), date_source=task.date_source,
        date_method=task.settings.date_method, date_evidence=task.settings.date_evidence,
        date_confidence=task.settings.date_confidence,
        suggested_date=suggestion[0], suggested_method=suggestion[1],
        suggested_evidence=suggestion[2], suggested_confidence=suggestion[3],
        graded=await anyio.to_thread.run_sync(graded_tables, task),
        passes_with_no_work=passed, baseline_note=note,
    )


async def _suggestion(task: TaskSpec) -> tuple[str | None, DateMethod | None, str | None,
                                                Confidence | None]:
    """What derive-dates would record, for a task the suite says nothing about."""
    s = task.settings
    if s.date_method is not None or s.date is not None:
        return None, None, None, None
    if not task.has_gold:
        return None, None, "no gold to date against", None
    d = await derive_task(task, verify=False)
    return d.date.isoformat() if d.date else None, d.method, d.evidence, d.confidence


def graded_tables(task: TaskSpec) -> tuple[GradedTable, ...]:
    """The graded tables and columns as the gold database has them (without a usable gold,
    every graded table is listed as not in gold)."""
    if task.gold is None:
        return tuple(GradedTable(name, False, ()) for name in task.graded_tables)
    gold_cols: dict[str, list[str]] = {}
    with open_database(task.gold.db, untrusted=False) as con:
        found = catalog.columns(con)
    # named as the scorer finds them; DuckDB's names are case-insensitive
    for (schema, name), listed in found.items():
        gold_cols[catalog.scorer_name(schema, name).lower()] = [c for c, _type in listed]
    out = []
    params = task.gold.params
    for name, positions in zip(params.condition_tabs, params.condition_cols, strict=True):
        cols = gold_cols.get(name.lower())
        if cols is None:
            out.append(GradedTable(name, False, ()))
            continue
        # Resolved as the scorer resolves them (negative positions count from the end); the
        # ones iloc would refuse are listed apart, the others still named.
        fits = [i for i in positions if -len(cols) <= i < len(cols)]
        named = gold_positions(fits, len(cols)) if fits or not positions else []
        out.append(GradedTable(name, True, tuple(cols[i] for i in named),
                               tuple(i for i in positions if i not in fits)))
    return tuple(out)


async def _baseline(task: TaskSpec) -> tuple[bool | None, str | None]:
    if task.start_db is None or task.gold is None:
        return None, f"cannot score: {_why_unscorable(task)}"
    # In a reader sandbox like every other scoring: the start database is the dataset's, and
    # its views are SQL that untrusted input wrote (the snapshot of it is sandboxed too).
    from spider2local.sandbox.scoring import score_sandboxed

    try:
        score = await score_sandboxed(task.start_db, task.gold.db, task.gold.params)
    except Exception as exc:  # a broken gold must not stop the audit of the other tasks
        return None, f"scoring failed: {str(exc).splitlines()[0]}"
    return score.passed, f"{score.tables_passed}/{score.tables_total} graded tables pass untouched"


@dataclass(frozen=True)
class Denominators:
    """The numbers a score is divided by, counted on the whole dataset (never the selection,
    never hard-coded): the sample suite has its own, upstream's has 68, 64 and its runnable
    count on this machine. A run records them in run.json at its start, so its report needs
    neither the dataset nor this code's idea of it later."""

    official: int
    """Every task of the dataset's task list (68 for Spider2-DBT: the official denominator)."""
    with_gold: int
    """Tasks whose gold folder holds a DuckDB file, whatever its name (64 for Spider2-DBT, the
    leaderboard's top entries' denominator: three of them name another file than the one
    there, so fewer than this have a *usable* gold)."""
    runnable: int
    """Tasks that can run here (no problem, not excluded by the suite)."""

    def to_json(self) -> dict[str, int]:
        return asdict(self)


def denominators(data: Dataset) -> Denominators:
    """The dataset's :class:`Denominators` (cheap: file-system checks only)."""
    def gold_present(tid: str) -> bool:
        if name_problem(tid) is not None:  # never a path from a bad id
            return False
        folder = gold_folder(data.root, tid)
        return folder.is_dir() and any(folder.glob("*.duckdb"))

    return Denominators(official=len(data.tasks),
                        with_gold=sum(gold_present(t.id) for t in data.tasks),
                        runnable=sum(t.runnable for t in data.tasks))


@dataclass(frozen=True)
class StartBaseline:
    """What scoring the untouched start databases told (:func:`start_baseline`)."""

    free: dict[str, bool | None]
    """Per task, whether its start database already passes (``None``: cannot tell)."""
    seconds: dict[str, dict[str, float]]
    """Per task measured, what the work cost on its start database, by the runner's stage it
    stands for (``checkpoint``, ``score``): the base of its stage deadlines
    (:mod:`spider2local.run.deadlines`). A task absent was not measured."""


async def free_passes(tasks: Sequence[TaskSpec]) -> dict[str, bool | None]:
    """Per task, whether its untouched start database already passes (``None``: cannot tell,
    e.g. no gold). The same check as ``audit --baseline``, so a run can say how many of its
    passes took no work (:func:`start_baseline`)."""
    return (await start_baseline(tasks)).free


async def start_baseline(tasks: Sequence[TaskSpec]) -> StartBaseline:
    """Score each task's untouched start database: whether it passes, and what that cost.

    All in one reader sandbox holding the start and gold databases read-only
    (:func:`~spider2local.sandbox.scoring.score_starts_sandboxed`), which also snapshots
    each start database for the run's workspaces (:func:`_remember_snapshots`) and times each
    piece of work; should that child die, each task is scored in a child of its own, as
    ``audit --baseline`` does, and nothing is measured (a child's start-up is no cost of the
    task's)."""
    from spider2local.sandbox.scoring import score_starts_sandboxed

    found: dict[str, bool | None] = {t.id: None for t in tasks}
    scorable = [t for t in tasks if t.start_db is not None and t.gold is not None]
    if not scorable:
        return StartBaseline(found, {})
    starts = [(t.start_db, t.gold.db, t.gold.params) for t in scorable
              if t.start_db is not None and t.gold is not None]
    before = [file_identity(start) for start, _, _ in starts]
    try:
        scored = await score_starts_sandboxed(starts)
    except Exception:  # the batch's child died: one child per task, one failure each
        return StartBaseline({task.id: (await _baseline(task))[0] for task in tasks}, {})
    _remember_snapshots(starts, before, [s.snapshot for s in scored])
    seconds: dict[str, dict[str, float]] = {}
    for task, start in zip(scorable, scored, strict=True):
        found[task.id] = start.score.passed if start.score is not None else None
        if start.seconds:
            seconds[task.id] = dict(start.seconds)
    return StartBaseline(found, seconds)


def _remember_snapshots(starts: Sequence[tuple[Path, Path, Any]],
                        before: Sequence[FileIdentity | None],
                        snapshots: Sequence[dict[str, Any] | None]) -> None:
    """Keep each start database's snapshot for the workspaces of the run, under the identity
    its file had before the child read it and still has after
    (:func:`~spider2local.sandbox.dbreads.snapshot_database`)."""
    for (start, _, _), identity, data in zip(starts, before, snapshots, strict=True):
        if data is None or "problem" in data or identity is None:
            continue
        if file_identity(start) == identity:
            remember_snapshot(identity, DbSnapshot.from_json(json.dumps(data)))


def _why_unscorable(task: TaskSpec) -> str:
    """The loader's own words for the missing start or gold (a corrupt file is not "missing"),
    picked by the problems' kinds, never by how their messages happen to begin."""
    kinds: frozenset[ProblemKind] = START_KINDS if task.start_db is None else frozenset()
    if task.gold is None:
        kinds |= GOLD_KINDS
    found = [str(p) for p in task.problems if p.kind in kinds]
    return "; ".join(found) or "start or gold database missing"


def suggested_subsets(audits: Sequence[TaskAudit]) -> dict[str, list[str]]:
    """Subsets worth naming in the suite file (all/runnable/has-gold are built in)."""
    subsets = {
        "clock-dependent": [a.id for a in audits if a.reads_clock],
        "clock-independent": [a.id for a in audits if not a.reads_clock],
    }
    if any(a.passes_with_no_work is not None for a in audits):
        subsets["free"] = [a.id for a in audits if a.passes_with_no_work]
        subsets["needs-work"] = [a.id for a in audits
                                 if a.runnable and a.passes_with_no_work is False]
    return subsets


def audit_json(audits: Sequence[TaskAudit]) -> dict[str, Any]:
    return {"summary": summary(audits), "tasks": [asdict(a) for a in audits]}


def summary(audits: Sequence[TaskAudit]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "tasks": len(audits), "runnable": sum(a.runnable for a in audits),
        "has_gold": sum(a.has_gold for a in audits),
        "read_clock": sum(a.reads_clock for a in audits),
        "dated": sum(a.date_source is DateSource.TASK for a in audits),
        "suggested": sum(a.suggested_date is not None for a in audits),
    }
    if any(a.passes_with_no_work is not None for a in audits):
        out["pass_with_no_work"] = sum(bool(a.passes_with_no_work) for a in audits)
    return out


def audit_text(audits: Sequence[TaskAudit]) -> str:
    rows = [(a.id, "runnable" if a.runnable else (a.problems[0] if a.problems else "no"),
             "yes" if a.reads_clock else "no",
             _date_text(a),
             ", ".join(g.name + ("" if g.in_gold else " (not in gold)") for g in a.graded),
             _free(a)) for a in audits]
    table = render_table(["task", "status", "clock", "date", "graded", "free"], rows)
    facts = summary(audits)
    lines = [table, "", "  ".join(f"{k}={v}" for k, v in facts.items())]
    lines += [f"{a.id}: supplied {s}" for a in audits for s in a.supplied]
    lines += [f"{a.id}: clock {a.clock_reads[0]}" for a in audits if a.clock_reads]
    lines += [f"{a.id}: date evidence: {a.date_evidence}" for a in audits if a.date_evidence]
    lines += [f"{a.id}: suggested date evidence: {a.suggested_evidence}"
              for a in audits if a.suggested_evidence]
    if any(a.suggested_date is not None for a in audits):
        lines.append("suggested dates are not used until written: `spider2local derive-dates`")
    return "\n".join(lines)


def _date_text(a: TaskAudit) -> str:
    """The date run will use and whose it is, then any suggestion (clearly not in use)."""
    whose = str(a.date_method or "set") if a.date_source is DateSource.TASK else (
        "default; clock-independent" if a.date_method is DateMethod.CLOCK_INDEPENDENT
        else "default")
    text = f"{a.date} ({whose})"
    if a.suggested_date is not None:
        text += f"; suggested {a.suggested_date}, unused"
    return text


def _free(a: TaskAudit) -> str:
    if a.passes_with_no_work is None:
        return "-" if a.baseline_note is None else f"? {a.baseline_note}"
    return "yes" if a.passes_with_no_work else "no"

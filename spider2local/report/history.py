"""``spider2local tasks``: what the finished runs of a folder know about each task.

Every finished run of the folder (not interrupted, not running, not damaged) is read as
``report`` reads it, and its trials are pooled per task: trials scored and passed, per kit
(agent, model and command), lenient passes, the failure classes seen. Runs of another dataset or
suite (their fingerprints in run.json) are kept in a group of their own, never mixed: the same
task id there may be another task.

Flags: **never solved** (scored trials, none passed, in every run of the group: often a broken
task rather than a hard one; ``audit`` may know why), **always solved** (every trial of every
run passed, over at least ``min_trials`` trials: it cannot tell kits apart), **flaky** (some
kit passed it in some trials and not in others).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spider2local.core.table import render_table
from spider2local.report.runs import RunState, past_runs
from spider2local.report.summary import RunReport, Verdict, load_report
from spider2local.run.folder import RunFolder
from spider2local.run.resume import dataset_identity

MIN_TRIALS = 3
"""Trials a task needs before "always solved" is said of it."""


@dataclass
class KitTally:
    """One kit's trials of one task (mutable while pooling; frozen into :class:`KitCount`)."""

    run: int = 0
    passed: int = 0
    lenient: int = 0


@dataclass(frozen=True)
class KitCount:
    kit: str
    trials_run: int
    trials_passed: int
    lenient: int


@dataclass(frozen=True)
class TaskHistory:
    task_id: str
    runs: int
    """Finished runs of the group that scored at least one trial of it."""
    trials_run: int
    trials_passed: int
    lenient: int
    kits: tuple[KitCount, ...]
    classes: dict[str, int]
    flags: tuple[str, ...]


@dataclass(frozen=True)
class HistoryGroup:
    """The runs of one dataset and suite."""

    dataset: str | None
    suite_sha256: str | None
    runs: tuple[str, ...]
    tasks: tuple[TaskHistory, ...]


@dataclass
class _Pool:
    runs: list[str] = field(default_factory=list)
    kits: dict[str, dict[str, KitTally]] = field(default_factory=dict)
    """task -> kit -> tally."""
    run_counts: dict[str, int] = field(default_factory=dict)
    per_run_all_passed: dict[str, list[bool]] = field(default_factory=dict)
    classes: dict[str, dict[str, int]] = field(default_factory=dict)


def _kit(report: RunReport) -> str:
    command = f" {report.agent_command!r}" if report.agent_command else ""
    return f"{report.agent or '?'}{command} / {report.model or '-'}"


def _add(pool: _Pool, report: RunReport) -> None:
    pool.runs.append(report.run_id)
    kit = _kit(report)
    scored: dict[str, list[bool]] = {}
    for row in report.rows:
        if row.failure_class:
            seen = pool.classes.setdefault(row.task_id, {})
            seen[row.failure_class] = seen.get(row.failure_class, 0) + 1
        if row.verdict is Verdict.NONE:
            continue
        tally = pool.kits.setdefault(row.task_id, {}).setdefault(kit, KitTally())
        tally.run += 1
        tally.passed += row.verdict is Verdict.PASS
        tally.lenient += row.lenient
        scored.setdefault(row.task_id, []).append(row.verdict is Verdict.PASS)
    for task_id, verdicts in scored.items():
        pool.run_counts[task_id] = pool.run_counts.get(task_id, 0) + 1
        pool.per_run_all_passed.setdefault(task_id, []).append(all(verdicts))


def _history(pool: _Pool, task_id: str, min_trials: int) -> TaskHistory:
    kits = pool.kits.get(task_id, {})
    run = sum(t.run for t in kits.values())
    passed = sum(t.passed for t in kits.values())
    flags = []
    if run and not passed:
        flags.append("never solved")
    if run >= min_trials and passed == run and \
            pool.run_counts.get(task_id, 0) == len(pool.runs):
        flags.append("always solved")
    if any(0 < t.passed < t.run for t in kits.values()):
        flags.append("flaky")
    return TaskHistory(
        task_id, pool.run_counts.get(task_id, 0), run, passed,
        sum(t.lenient for t in kits.values()),
        tuple(KitCount(k, t.run, t.passed, t.lenient) for k, t in sorted(kits.items())),
        dict(sorted(pool.classes.get(task_id, {}).items(), key=lambda kv: (-kv[1], kv[0]))),
        tuple(flags))


def task_histories(runs_dir: Path, min_trials: int = MIN_TRIALS) -> list[HistoryGroup]:
    """Per (dataset, suite) group of finished runs, every task any of them selected."""
    pools: dict[tuple[str | None, str | None], _Pool] = {}
    order: dict[tuple[str | None, str | None], list[str]] = {}
    for past in past_runs(runs_dir):
        if past.state is not RunState.FINISHED:
            continue
        folder = RunFolder(Path(past.path))
        manifest = folder.read_manifest()
        if manifest is None:
            continue
        identity = dataset_identity(manifest)
        key = (None if identity is None else str(identity), manifest.suite_sha256)
        report = load_report(folder)
        _add(pools.setdefault(key, _Pool()), report)
        tasks = order.setdefault(key, [])
        tasks.extend(r.task_id for r in report.rows if r.task_id not in tasks)
    return [HistoryGroup(key[0], key[1], tuple(pool.runs),
                         tuple(_history(pool, tid, min_trials) for tid in order[key]))
            for key, pool in pools.items()]


def histories_json(groups: Sequence[HistoryGroup]) -> list[dict[str, Any]]:
    return [{"dataset": g.dataset, "suite_sha256": g.suite_sha256, "runs": list(g.runs),
             "tasks": [{"id": t.task_id, "runs": t.runs, "trials_run": t.trials_run,
                        "trials_passed": t.trials_passed, "lenient_passes": t.lenient,
                        "kits": [{"kit": k.kit, "trials_run": k.trials_run,
                                  "trials_passed": k.trials_passed, "lenient_passes": k.lenient}
                                 for k in t.kits],
                        "failure_classes": t.classes, "flags": list(t.flags)}
                       for t in g.tasks]}
            for g in groups]


def render_histories(groups: Sequence[HistoryGroup], runs_dir: Path) -> str:
    if not groups:
        return f"no finished runs in {runs_dir} (start one with `spider2local run`)"
    out = []
    for g in groups:
        what = (g.dataset or "unknown dataset")[:16]
        suite = (g.suite_sha256 or "-")[:12]
        out.append(f"dataset {what}, suite {suite}: {len(g.runs)} finished run(s) "
                   f"({', '.join(g.runs)})")
        rows = [(t.task_id, t.runs, f"{t.trials_passed}/{t.trials_run}",
                 "; ".join(f"{k.kit}: {k.trials_passed}/{k.trials_run}" for k in t.kits) or "-",
                 t.lenient, ", ".join(f"{c} {n}" for c, n in t.classes.items()) or "-",
                 ", ".join(t.flags) or "-") for t in g.tasks]
        out.append(render_table(("task", "runs", "passed", "by kit (agent / model)", "lenient",
                                 "failure classes", "flags"), rows))
        out.append("")
    return "\n".join(out).rstrip()

"""``spider2local score RUN_DIR``: re-score a finished run from its kept databases.

Never re-runs anything: each task's ``result.duckdb`` (kept with ``--keep-db``) is scored again
against the dataset's gold and only the verdict fields of its ``result.json`` are rewritten, so
a scorer fix or a corrected gold file can be applied to an old run.

Integrity: a run whose gold, evaluation records or scorer changed while it ran (a result with
an ``integrity`` error) is refused, and so is one whose files differ now from the fingerprints
its run.json recorded before its agents started: both in one line naming what changed (exit 2).
Applying a real fix is a decision a person makes: ``--accept-changes`` scores against today's
files and records their fingerprints in run.json (with the time, under ``integrity``). A run
made before fingerprints existed is re-scored as before (there is nothing to compare).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from spider2local.core.results import (
    ErrorKind,
    Stage,
    Status,
    TaskResult,
    keep_traceback,
    save_result,
)
from spider2local.dataset.task import Dataset
from spider2local.exceptions import UserError
from spider2local.integrity import guard
from spider2local.run.folder import RunFolder
from spider2local.run.lock import run_lock
from spider2local.run.manifest import RunManifest, now_iso
from spider2local.run.verdict import Verdict

if TYPE_CHECKING:
    from spider2local.core.verdicts import TaskScore


@dataclass(frozen=True)
class Rescored:
    task_id: str
    result: TaskResult | None
    """The rewritten result; ``None`` when the task could not be re-scored (see ``reason``)."""
    reason: str | None = None
    trial: int = 1


def rescore_task(folder: RunFolder, data: Dataset, old: TaskResult,
                 watch: guard.Watch | None = None) -> Rescored:
    """Score ``<task>/result.duckdb`` again and rewrite the verdict fields of result.json.
    A score or checkpoint error is replaced by the new verdict; an agent error is kept.
    ``watch``: the run's off-limits list, hidden from the scorer's sandbox as the runner
    hides it (the result's views are the agent's SQL, run again here)."""
    from spider2local.db.header import duckdb_file_problem
    from spider2local.sandbox.scoring import score_sandboxed_sync

    db, task = folder.result_db(old.task_id, old.trial), data.get(old.task_id)
    if not db.is_file():
        return Rescored(old.task_id, None, "no kept database (run with --keep-db)", old.trial)
    if task is None or task.gold is None:
        return Rescored(old.task_id, None, "the dataset has no gold for this task", old.trial)
    # A kept file that is damaged (not DuckDB, cut short, unopenable) is that task's error:
    # scoring it gave "failed" and overwrote a recorded pass without naming anything, where
    # `score FILE` refuses the same file. The recorded verdict stays.
    problem = duckdb_file_problem(db)
    if problem is not None:
        return Rescored(old.task_id, None, f"kept database damaged: {problem}; "
                                           "the recorded verdict stays", old.trial)
    try:
        hidden = watch.off_limits(task) if watch is not None else ()
        score = score_sandboxed_sync(db, task.gold.db, task.gold.params, hidden=hidden)
    except Exception as exc:
        keep_traceback(folder.trial_dir(old.task_id, old.trial), Stage.SCORE, exc)
        return Rescored(old.task_id, None, f"scoring failed: {type(exc).__name__}: {exc}",
                        old.trial)
    if score.error is not None:  # the file could not be opened at all
        return Rescored(old.task_id, None, f"kept database damaged: {score.error}; "
                                           "the recorded verdict stays", old.trial)
    new = rescored(old, score)
    try:
        save_result(folder.result_path(old.task_id, old.trial), new)
    except OSError as exc:  # a full runs disk: the old result.json stays whole (atomic write)
        return Rescored(old.task_id, None, f"cannot write its result.json: "
                                           f"{exc.strerror or exc}; the recorded verdict stays",
                        old.trial)
    return Rescored(old.task_id, new, trial=old.trial)


def rescored(old: TaskResult, score: TaskScore) -> TaskResult:
    """``old`` with the verdict fields of a new ``score`` of what its agent left (the one rule
    for ``score RUN`` and ``regrade``): a checkpoint or score error is replaced by the new
    verdict, an agent's error and a timeout are kept."""
    error = old.error
    if error is not None and error.stage in (Stage.CHECKPOINT, Stage.SCORE):
        error = None
    verdict = Verdict.scored(score, timed_out=old.status is Status.TIMEOUT, error=error)
    return replace(old, **verdict.fields())


def rescore_run(folder: RunFolder, data: Dataset, *,
                accept_changes: bool = False) -> list[Rescored]:
    """Re-score every finished task of the run from its kept database, never re-running it
    (under the run's lock: a run still writing results must not be re-scored meanwhile).
    Raises :class:`UserError` for a tampered or changed run (see the module docstring)."""
    with run_lock(folder):
        results = folder.trial_results()
        tasks = [t for tid in sorted({tid for tid, _ in results})
                 if (t := data.get(tid)) is not None]
        taken = guard.take(tasks)
        if accept_changes:
            record_fingerprints(folder, taken)
        else:
            _refuse_tampered(folder, results, taken)
        manifest = folder.read_manifest()
        suite = Path(manifest.suite_path) if manifest and manifest.suite_path else None
        watch = guard.Watch(taken, runs_dir=folder.root.parent, suite_file=suite)
        return [rescore_task(folder, data, r, watch) for _, r in sorted(results.items())]


def _refuse_tampered(folder: RunFolder, results: Mapping[tuple[str, int], TaskResult],
                     taken: guard.Fingerprints) -> None:
    fix = "start a new run, or pass --accept-changes to score against today's files"
    tampered = [f"{tid}: {r.error.message}" for (tid, _), r in sorted(results.items())
                if r.error is not None and r.error.kind is ErrorKind.INTEGRITY]
    if tampered:
        raise UserError(f"run {folder.run_id} was tampered with while it ran ({tampered[0]}"
                        f"{f'; +{len(tampered) - 1} more' if len(tampered) > 1 else ''})",
                        path=folder.root, fix=fix)
    manifest = folder.read_manifest()
    recorded = manifest.integrity if manifest else None
    if recorded is None:
        return
    changed = guard.differences(recorded, taken, all_recorded=True)
    if changed:
        more = f" (+{len(changed) - 2} more)" if len(changed) > 2 else ""
        raise UserError(f"run {folder.run_id} changed since it ran: "
                        + "; ".join(changed[:2]) + more, path=folder.root, fix=fix)


def record_fingerprints(folder: RunFolder, taken: guard.Fingerprints) -> None:
    """Today's fingerprints become the run's reference, with when that was decided."""
    manifest = folder.read_manifest() or RunManifest(run_id=folder.run_id)
    folder.write_manifest(replace(manifest, integrity=replace(taken,
                                                              accepted_changes_at=now_iso())))


def run_dataset_source(folder: RunFolder) -> tuple[Path | None, str | None]:
    """The suite file and dataset root the run was made with (from its manifest)."""
    manifest = folder.read_manifest()
    if manifest is None:
        return None, None
    return (Path(manifest.suite_path) if manifest.suite_path else None), manifest.dataset

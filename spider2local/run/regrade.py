"""``spider2local regrade RUN``: score every trial again from its kept graded tables.

Each scored trial keeps the tables the scorer read in ``graded.duckdb`` (:mod:`.graded`), with
their sha256 in its result.json. ``regrade`` scores a checked copy of each with today's scorer
against today's dataset records (gold file and ``spider2_eval.jsonl`` parameters), never
running anything again, and says which verdicts change: after a scorer fix, a corrected gold
file or a new check, a finished run is graded again at no cost, also when it was made without
``--keep-db``.

Nothing is written unless asked (``write``): then the trials whose verdict changed get the new
verdict fields in their result.json (the same rule as ``score RUN``: :func:`.rescore.rescored`),
and when today's files differ from the fingerprints the run recorded, today's become the run's
reference (as ``score --accept-changes`` records them): its verdicts are now theirs.

A trial is not regraded, and says why, when it kept no graded tables (``--no-keep-graded``, a
run made before they were kept, a verdict that was no score), when today's record grades a
table the run did not grade (it was never kept), or when its file is gone. A file whose bytes
do not hash to the recorded sha256 is refused: changed since the run, it is not what the agent
left, and is never scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from spider2local.core.layout import GRADED_DB
from spider2local.core.results import TaskResult, save_result
from spider2local.core.verdicts import TaskScore
from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.evaluation.params import EvalParams
from spider2local.integrity import guard
from spider2local.proc.tempdirs import owned_tempdir
from spider2local.run.folder import RunFolder
from spider2local.run.graded import GradedRefused, checked_copy
from spider2local.run.lock import run_lock
from spider2local.run.rescore import record_fingerprints, rescored
from spider2local.sandbox.scoring import score_many_sandboxed_sync

Job = tuple[Path, Path, EvalParams]
"""What one trial's scoring needs: its checked copy, today's gold file and parameters."""
Scorer = Callable[[Sequence[Job]], list[TaskScore | Exception]]
"""Scores every job (each item its score, or what scoring it raised): today's scorer, all
trials in one reader sandbox by default (:func:`sandboxed`); a test passes the scorer with a
rule changed."""


def sandboxed(jobs: Sequence[Job]) -> list[TaskScore | Exception]:
    """Every copy scored in one reader child: they hold tables only, written by the runner
    and checked against the recorded hash, so no agent SQL runs (one interpreter importing
    pandas per trial would be most of a regrade's time)."""
    return score_many_sandboxed_sync(jobs)


@dataclass(frozen=True)
class Regraded:
    """One trial: its recorded result and, when it could be regraded, the new one."""

    old: TaskResult
    new: TaskResult | None = None
    reason: str | None = None
    """Why it was not regraded (``new`` is ``None``)."""
    refused: bool = False
    """Its graded file is not the one the run recorded (``reason`` says how)."""

    @property
    def label(self) -> str:
        """How the trial is named: the task id, ``task#k`` from trial 2."""
        return self.old.task_id if self.old.trial == 1 else f"{self.old.task_id}#{self.old.trial}"

    @property
    def changed(self) -> bool:
        return self.new is not None and verdict_key(self.old) != verdict_key(self.new)

    def describe(self) -> str:
        """``passed -> failed (tables 2/2 -> 1/2; orders fails now)``."""
        old, new = self.old, self.new
        assert new is not None
        flipped = [f"{name} {'passes' if now else 'fails'} now"
                   for name, now in _table_passes(new).items()
                   if _table_passes(old).get(name) is not now]
        return (f"{old.status.value} -> {new.status.value} (tables {old.tables_passed}/"
                f"{old.tables_total} -> {new.tables_passed}/{new.tables_total}"
                + "".join(f"; {f}" for f in flipped) + ")")


@dataclass(frozen=True)
class Regrade:
    """What ``regrade`` found for a run."""

    trials: tuple[Regraded, ...]
    changed_since_run: tuple[str, ...] = ()
    """How today's gold, records and scorer differ from the fingerprints the run recorded."""
    written: int = 0
    """result.json files rewritten (``write``)."""

    @property
    def regraded(self) -> tuple[Regraded, ...]:
        return tuple(t for t in self.trials if t.new is not None)

    @property
    def changed(self) -> tuple[Regraded, ...]:
        return tuple(t for t in self.trials if t.changed)

    @property
    def refused(self) -> tuple[Regraded, ...]:
        return tuple(t for t in self.trials if t.refused)


def verdict_key(result: TaskResult) -> tuple[object, ...]:
    """What a regrade compares: the status, the table counts and each table's verdict."""
    return (result.status, result.passed, result.tables_passed, result.tables_total,
            tuple(sorted(_table_passes(result).items())))


def _table_passes(result: TaskResult) -> dict[str, bool]:
    return {} if result.score is None else {t.name: t.passed for t in result.score.tables}


def checked_trial(folder: RunFolder, task: TaskSpec | None, old: TaskResult,
                  scratch: Path) -> Regraded | Job:
    """What trial ``old`` is scored with (its graded file's checked copy, made in ``scratch``,
    and today's gold), or, when it cannot be regraded, why (a :class:`Regraded` without
    ``new``)."""
    if old.graded_sha256 is None:
        return Regraded(old, reason="no graded tables kept (a run made with --no-keep-graded "
                                    "or before they were kept; `score RUN` re-scores "
                                    "databases kept with --keep-db)")
    if old.score is None:
        return Regraded(old, reason=f"its recorded verdict ({old.status.value}) is not a "
                                    "score" + (f": {old.error.stage.value} stage, "
                                               f"{old.error.message}" if old.error else ""))
    if task is None or task.gold is None:
        return Regraded(old, reason="the dataset has no gold for this task now")
    graded_then = {name.lower() for name in _table_passes(old)}
    added = [t for t in task.gold.params.condition_tabs if t.lower() not in graded_then]
    if added:
        return Regraded(old, reason=f"today's record grades {added[0]!r}, which the run did "
                                    "not grade (so did not keep)")
    into = scratch / f"{old.task_id}-{old.trial}"
    into.mkdir()
    try:
        copy = checked_copy(folder.graded_db(old.task_id, old.trial), old.graded_sha256, into)
    except FileNotFoundError:
        return Regraded(old, reason=f"its {GRADED_DB} is gone")
    except GradedRefused as exc:
        return Regraded(old, reason=f"{exc}; not scored", refused=True)
    return copy, task.gold.db, task.gold.params


def scored(old: TaskResult, score: TaskScore | Exception) -> Regraded:
    """Trial ``old`` with today's ``score`` of its graded tables (or what scoring raised)."""
    if isinstance(score, Exception):
        return Regraded(old, reason=f"scoring failed: {type(score).__name__}: {score}")
    if score.error is not None:
        return Regraded(old, reason=f"its {GRADED_DB} cannot be read: {score.error}")
    return Regraded(old, rescored(old, score))


def regrade_run(folder: RunFolder, data: Dataset, *, write: bool = False,
                scorer: Scorer = sandboxed) -> Regrade:
    """Regrade every finished trial of ``folder`` against ``data`` (see the module docstring);
    with ``write``, under the run's lock, rewrite the results whose verdict changed."""
    if not write:
        return _regrade(folder, data, scorer)
    with run_lock(folder):
        found = _regrade(folder, data, scorer)
        for item in found.changed:
            assert item.new is not None
            save_result(folder.result_path(item.old.task_id, item.old.trial), item.new)
        if found.changed_since_run and found.changed:
            record_fingerprints(folder, guard.take(_tasks(folder, data)))
        return Regrade(found.trials, found.changed_since_run, written=len(found.changed))


def _tasks(folder: RunFolder, data: Dataset) -> list[TaskSpec]:
    ids = sorted({tid for tid, _ in folder.trial_results()})
    return [task for tid in ids if (task := data.get(tid)) is not None]


def _regrade(folder: RunFolder, data: Dataset, scorer: Scorer) -> Regrade:
    results = folder.trial_results()
    taken = guard.take(_tasks(folder, data))
    manifest = folder.read_manifest()
    recorded = manifest.integrity if manifest else None
    changed = guard.differences(recorded, taken, all_recorded=False) if recorded else []
    with owned_tempdir("regrade") as scratch:
        checked = [checked_trial(folder, data.get(task_id), old, scratch)
                   for (task_id, _trial), old in results.items()]
        jobs = [item for item in checked if not isinstance(item, Regraded)]
        scores = iter(_score_all(scorer, jobs))
        trials = [item if isinstance(item, Regraded) else scored(old, next(scores))
                  for old, item in zip(results.values(), checked, strict=True)]
    return Regrade(tuple(trials), tuple(changed))


def _score_all(scorer: Scorer, jobs: Sequence[Job]) -> list[TaskScore | Exception]:
    """``scorer(jobs)``; when the batch fails as a whole (its child died), each job alone,
    so that one trial's failure is that trial's."""
    if not jobs:
        return []
    try:
        return scorer(jobs)
    except Exception as exc:
        if len(jobs) == 1:
            return [exc]
        return [_score_all(scorer, [job])[0] for job in jobs]

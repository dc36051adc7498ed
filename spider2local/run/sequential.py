"""``run --against RUN_A --until-decided``: B's trials in rounds, a decision after each.

Round r runs trial r of every task still in play (interleaved under ``--jobs`` as any run),
then :func:`spider2local.sequential.analysis.analyse` replays the comparison against run A's
trials and says whether to stop and which tasks play the next round; the record
(:mod:`spider2local.sequential.record`) is rewritten after every analysis. Everything the
decision needs is in the two run folders, so a run stopped by a signal or the budget in the
middle of a round resumes (``--run-id``) where it stopped: the finished trials of that round
are kept, the missing ones run, and the looks already taken are replayed to the same values.

A trial counts as passed when its status is ``passed``, as failed when it finished otherwise
(failed, timeout, an error of the agent: :func:`.resume.is_finished`); a machine fault is no
trial (it runs again). Tasks without gold are not paired (nothing to decide on).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from spider2local.core.results import Status, TaskResult
from spider2local.dataset.task import TaskSpec
from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.resume import is_finished
from spider2local.run.runner import Trial
from spider2local.sequential.analysis import NOT_RUN, Design, Outcome, analyse
from spider2local.sequential.record import SequentialRecord, read_record, write_record


@dataclass(frozen=True)
class SequentialSpec:
    """What ``--against --until-decided`` resolved to (or what a resume's record says)."""

    against: RunFolder
    design: Design
    tasks: tuple[str, ...]
    """The paired tasks: selected for B and with a scored trial 1 in run A."""
    notes: tuple[str, ...] = ()


def outcome(result: TaskResult | None) -> int:
    """1, 0, or :data:`NOT_RUN` (no result, a machine fault, or nothing to score)."""
    if result is None or not is_finished(result) or result.status is Status.UNSCORED:
        return NOT_RUN
    return 1 if result.status is Status.PASSED else 0


def outcomes(results: Mapping[tuple[str, int], TaskResult], tasks: Sequence[str],
             rounds: int) -> np.ndarray:
    """``(tasks, rounds)``: each task's trial 1..rounds as :func:`outcome` reads it."""
    return np.array([[outcome(results.get((tid, r + 1))) for r in range(rounds)]
                     for tid in tasks], dtype=np.int64).reshape(len(tasks), rounds)


def resolve(against: RunFolder, selected: Sequence[str], design: Design,
            folder: RunFolder) -> SequentialSpec:
    """Pair B's selection with run A: the tasks A has a scored trial 1 of; the rounds capped
    at the fewest consecutive scored trials A has of them (trial r of B needs trial r of A to
    pair with). Nothing to pair, or run A being this run, is one line (exit 2)."""
    if against.root.resolve() == folder.root.resolve():
        raise UserError("--against names this run itself", path=folder.root,
                        fix="compare with another run")
    if against.read_manifest() is None:
        raise UserError("--against: not a run folder (no run.json)", path=against.root,
                        fix="name a finished run: its folder, its id or 'latest'")
    results = against.trial_results()
    grid = outcomes(results, selected, design.max_rounds)
    paired = [i for i, tid in enumerate(selected) if grid[i, 0] != NOT_RUN]
    if not paired:
        raise UserError(f"run {against.run_id} has no scored trial of the tasks selected",
                        path=against.root, fix="select tasks run A was scored on")
    notes = []
    depth = min(int(np.argmax(np.append(grid[i] == NOT_RUN, True))) for i in paired)
    if depth < design.max_rounds:
        notes.append(f"run {against.run_id} has {depth} scored trial(s) of every paired task: "
                     f"at most {depth} round(s), not {design.max_rounds} (resume run A with "
                     f"--trials {design.max_rounds} to allow more)")
        design = replace(design, max_rounds=depth)
    skipped = len(selected) - len(paired)
    if skipped:
        notes.append(f"{skipped} selected task(s) have no scored trial in run "
                     f"{against.run_id}: not paired, not run")
    return SequentialSpec(against, design, tuple(selected[i] for i in paired), tuple(notes))


def from_record(folder: RunFolder) -> SequentialSpec | None:
    """A resume: the spec a sequential run recorded (``None``: not a sequential run)."""
    record = read_record(folder.root)
    if record is None:
        return None
    return SequentialSpec(RunFolder(Path(record.against)), record.design, record.tasks,
                          record.notes)


def analyse_run(spec: SequentialSpec, folder: RunFolder, cost_usd: float | None
                ) -> tuple[Outcome, SequentialRecord]:
    """Replay the comparison from both folders and rewrite the record. A resume whose replay
    disagrees with the looks recorded (run A's or B's results changed since) is refused."""
    k = spec.design.max_rounds
    a = outcomes(spec.against.trial_results(), spec.tasks, k)
    b = outcomes(folder.trial_results(), spec.tasks, k)
    try:
        result = analyse(a, b, spec.design)
    except ValueError as exc:
        raise UserError(f"cannot pair with run {spec.against.run_id}: {exc}",
                        path=spec.against.root, fix="restore run A's trials") from None
    previous = read_record(folder.root)
    if previous is not None:
        kept = previous.looks[:len(result.looks)]
        if tuple(result.looks[:len(kept)]) != kept:
            raise UserError("the sequential record disagrees with the trials in the run "
                            "folders (a result of run A or B changed since)",
                            path=folder.root, fix="start a new --run-id")
    record = SequentialRecord.of(spec.against.root.resolve(), spec.against.run_id, spec.tasks,
                                 result, cost_usd, spec.notes)
    write_record(folder.root, record)
    return result, record


async def run_rounds(spec: SequentialSpec, folder: RunFolder,
                     tasks: Mapping[str, TaskSpec],
                     run_trials: Callable[[list[Trial]], Awaitable[object]],
                     spent: Callable[[], float | None],
                     note: Callable[[str], None]) -> SequentialRecord:
    """Analyse, run the next round's missing trials, and again, until decided. Stops (the
    record says undecided) when a round's trials could not all finish: the budget refused
    them, or a machine fault left some without a verdict; a resume continues."""
    while True:
        result, record = analyse_run(spec, folder, spent())
        if result.decision.final or result.next_round is None:
            note(record.sentence)
            return record
        done = folder.trial_results()
        todo = [Trial(tasks[spec.tasks[i]], result.next_round) for i in result.next_tasks
                if outcome(done.get((spec.tasks[i], result.next_round))) == NOT_RUN]
        note(f"round {result.next_round}: {len(todo)} trial(s) of "
             f"{len(result.next_tasks)} task(s) in play")
        before = len(todo)
        await run_trials(todo)
        after = folder.trial_results()
        left = sum(outcome(after.get(t.key)) == NOT_RUN for t in todo)
        if left and left == before:
            _, record = analyse_run(spec, folder, spent())
            note(f"round {result.next_round} could not finish ({left} trial(s) without a "
                 "verdict): resume to continue; " + record.sentence)
            return record

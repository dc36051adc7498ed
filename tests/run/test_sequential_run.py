"""The runner's side of ``--until-decided`` without dbt: which trials count, how run A is
paired (rounds capped at its trials, tasks it never scored left out, itself refused), the
record written after an analysis and refused when the runs changed under it, and a damaged
record as one line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import anyio
import numpy as np
import pytest

from spider2local.core.results import ErrorKind, Stage, Status, TaskError, TaskResult, save_result
from spider2local.dataset.task import TaskSpec
from spider2local.exceptions import UserError
from spider2local.report.summary import NotAttempted, load_report
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest, SelectedTask
from spider2local.run.runner import Trial
from spider2local.run.sequential import (
    SequentialSpec,
    analyse_run,
    outcome,
    outcomes,
    resolve,
    run_rounds,
)
from spider2local.sequential.analysis import NOT_RUN, Decision, Design
from spider2local.sequential.record import RECORD, read_record


def result(tid: str, trial: int, status: Status, *, infrastructure: bool = False
           ) -> TaskResult:
    error = TaskError(Stage.AGENT, ErrorKind.INFRASTRUCTURE if infrastructure
                      else ErrorKind.EXCEPTION, "x", "X") if status is Status.ERROR else None
    return TaskResult(task_id=tid, status=status, agent="noop", fake_date="2024-09-15",
                      started_at="s", finished_at="f",
                      passed={Status.PASSED: True, Status.FAILED: False}.get(status),
                      tables_passed=0, tables_total=1, trial=trial, error=error)


def make_run(root: Path, run_id: str, trials: dict[tuple[str, int], Status], *,
             tasks: Sequence[str] = (), planned: int | None = None) -> RunFolder:
    folder = RunFolder.at(root, run_id)
    folder.create()
    tasks = sorted({tid for tid, _ in trials} | set(tasks))
    folder.write_manifest(RunManifest.begin(
        run_id=run_id, agent="noop", settings={} if planned is None else {"trials": planned},
        suite_path=root / "tasks.toml",
        suite_sha256="x", dataset_root=root,
        tasks=[SelectedTask(t, "2024-09-15", 1) for t in tasks], previous=None))
    for (tid, trial), status in trials.items():
        path = folder.result_path(tid, trial)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_result(path, result(tid, trial, status))
    return folder


def test_what_counts_as_a_trial() -> None:
    assert outcome(result("t", 1, Status.PASSED)) == 1
    assert outcome(result("t", 1, Status.FAILED)) == 0
    assert outcome(result("t", 1, Status.TIMEOUT)) == 0
    assert outcome(result("t", 1, Status.ERROR)) == 0  # the agent's error: a failed trial
    assert outcome(result("t", 1, Status.ERROR, infrastructure=True)) == NOT_RUN
    assert outcome(result("t", 1, Status.UNSCORED)) == NOT_RUN
    assert outcome(None) == NOT_RUN
    grid = outcomes({("t", 1): result("t", 1, Status.PASSED)}, ["t", "u"], 2)
    assert grid.tolist() == [[1, NOT_RUN], [NOT_RUN, NOT_RUN]]


def test_pairing_caps_rounds_at_run_as_trials_and_leaves_unscored_tasks_out(
        tmp_path: Path) -> None:
    a = make_run(tmp_path, "a", {("x", 1): Status.FAILED, ("x", 2): Status.FAILED,
                                 ("y", 1): Status.PASSED, ("y", 2): Status.PASSED,
                                 ("y", 3): Status.PASSED, ("z", 1): Status.UNSCORED})
    b = RunFolder.at(tmp_path, "b")
    spec = resolve(a, ["x", "y", "z"], Design(max_rounds=6), b)
    assert spec.tasks == ("x", "y") and spec.design.max_rounds == 2
    assert any("at most 2 round(s), not 6" in n for n in spec.notes)
    assert any("1 selected task(s) have no scored trial" in n for n in spec.notes)
    with pytest.raises(UserError, match="names this run itself"):
        resolve(a, ["x"], Design(), a)
    with pytest.raises(UserError, match="no scored trial of the tasks selected"):
        resolve(a, ["z"], Design(), b)
    with pytest.raises(UserError, match="not a run folder"):
        resolve(RunFolder.at(tmp_path, "missing"), ["x"], Design(), b)


def test_the_record_is_written_replayed_and_guarded(tmp_path: Path) -> None:
    tasks = [f"t{i}" for i in range(6)]
    a = make_run(tmp_path, "a", {(t, r): Status.FAILED for t in tasks for r in (1, 2, 3)})
    b = make_run(tmp_path, "b", {(t, 1): Status.PASSED for t in tasks})
    spec = SequentialSpec(a, Design(max_rounds=3), tuple(tasks))
    first, record = analyse_run(spec, b, 0.0)
    assert first.decision is Decision.UNDECIDED and first.next_round == 2
    assert read_record(b.root) == record
    for t in tasks:
        path = b.result_path(t, 2)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_result(path, result(t, 2, Status.PASSED))
    second, record = analyse_run(spec, b, 1.5)
    assert second.decision is Decision.B_BETTER and record.decided_round == 2
    assert record.looks[0] == first.looks[0] and record.cost_usd == 1.5
    assert "B is better in round 2" in record.sentence
    # run A changed under the record: trial 1 of t0 now passed
    save_result(a.result_path("t0", 1), result("t0", 1, Status.PASSED))
    with pytest.raises(UserError, match="disagrees with the trials"):
        analyse_run(spec, b, 1.5)
    assert np.isfinite(record.p_value)


@pytest.mark.parametrize("text", ["{", "[]", '{"schema_version": 99}',
                                  '{"schema_version": 1}'])
def test_a_damaged_record_is_one_line(tmp_path: Path, text: str) -> None:
    (tmp_path / RECORD).write_text(text)
    with pytest.raises(UserError, match="damaged sequential record") as info:
        read_record(tmp_path)
    assert str(tmp_path / RECORD) in str(info.value)
    assert "\n" not in str(info.value)
    assert read_record(tmp_path / "absent") is None


def test_a_round_that_cannot_finish_stops_undecided_and_a_resume_continues(
        tmp_path: Path) -> None:
    """What the budget (or a machine fault) does: a round's trials that do not finish. The
    first call finishes half of round 1, the second none (the budget refuses): the rounds
    stop, the record says undecided with round 1 next; a later call (a resume) finishes it."""
    tasks = [f"t{i}" for i in range(6)]
    a = make_run(tmp_path, "a", {(t, r): Status.FAILED for t in tasks for r in (1, 2, 3)})
    b = make_run(tmp_path, "b", {})
    spec = SequentialSpec(a, Design(max_rounds=3), tuple(tasks))
    calls: list[list[tuple[str, int]]] = []
    allow = [3, 0]

    async def run_trials(trials: list[Trial]) -> object:
        calls.append([t.key for t in trials])
        for t in trials[:allow.pop(0) if allow else len(trials)]:
            path = b.result_path(*t.key)
            path.parent.mkdir(parents=True, exist_ok=True)
            save_result(path, result(t.key[0], t.key[1], Status.PASSED))
        return None

    specs = cast("dict[str, TaskSpec]", {t: SimpleNamespace(id=t) for t in tasks})
    notes: list[str] = []
    stopped = anyio.run(run_rounds, spec, b, specs, run_trials, lambda: 2.0, notes.append)
    assert stopped.decision is Decision.UNDECIDED and stopped.next_round == 1
    assert [len(c) for c in calls] == [6, 3]
    assert "could not finish (3 trial(s) without a verdict)" in notes[-1]
    assert read_record(b.root) == stopped
    resumed = anyio.run(run_rounds, spec, b, specs, run_trials, lambda: 3.0, notes.append)
    assert calls[2] == [(t, 1) for t in tasks[3:]]  # only the missing trials of round 1
    assert resumed.decision is Decision.B_BETTER and resumed.decided_round == 2


def test_trials_a_decided_run_never_needed_are_not_needed_not_not_run(tmp_path: Path) -> None:
    """The report of a sequential run: while undecided, a trial without a result is "not run"
    (a resume runs it); once decided, the trials the decision made unnecessary are "not
    needed", naming the comparison, and count as before (neither is attempted)."""
    tasks = [f"t{i}" for i in range(6)]
    a = make_run(tmp_path, "a", {(t, r): Status.FAILED for t in tasks for r in (1, 2, 3)})
    b = make_run(tmp_path, "b", {(t, 1): Status.PASSED for t in tasks}, planned=3)
    spec = SequentialSpec(a, Design(max_rounds=3), tuple(tasks))
    analyse_run(spec, b, 0.0)
    undecided = load_report(b)
    assert {r.status for r in undecided.rows if r.trial > 1} == {NotAttempted.NOT_RUN}
    for t in tasks:
        path = b.result_path(t, 2)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_result(path, result(t, 2, Status.PASSED))
    decided, _ = analyse_run(spec, b, 0.0)
    assert decided.decision is Decision.B_BETTER
    report = load_report(b)
    third = [r for r in report.rows if r.trial == 3]
    assert len(third) == 6 and {r.status for r in third} == {NotAttempted.NOT_NEEDED}
    assert all("sequential comparison against run a ended (b-better)" in r.note for r in third)
    assert report.rates.tasks_total == undecided.rates.tasks_total == 18
    assert report.rates.tasks_attempted == 12 and report.rates.tasks_passed == 12

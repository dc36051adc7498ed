"""Trials: K independent trials per task, interleaved, resumed trial by trial; the run's budget;
``--rerun`` into the history; a run folder made before trials existed, read as a 1-trial run."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.core.results import Status, Usage, save_result
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset
from spider2local.exceptions import UserError
from spider2local.integrity import guard
from spider2local.report.summary import load_report
from spider2local.report.text import headline_lines
from spider2local.run.folder import RunFolder
from spider2local.run.merge import merge_runs
from spider2local.run.plan import RunOutcome, RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.runner import RunBudget, interleaved, run_task
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the run's bookkeeping (tests/conftest.py)."""

PRE_TRIALS = Path(__file__).parent / "data" / "pre-trials-run"


class Recorder:
    """An agent that records which task it was given, and what each trial cost."""

    name = "recorder"

    def __init__(self, seen: list[str], cost: float | None = None) -> None:
        self.seen, self.cost = seen, cost

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        self.seen.append(ctx.task.id)
        return AgentOutcome(usage=Usage(turns=1, cost_usd_computed=self.cost))


@pytest.fixture
def data(tiny_dataset: Callable[..., Path], tmp_path: Path) -> Dataset:
    return load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1", "t2")))


def execute(data: Dataset, folder: RunFolder, seen: list[str] | None = None,
            ids: tuple[str, ...] = ("t1", "t2"), cost: float | None = None,
            rerun: tuple[str, ...] = (), stream: io.StringIO | None = None,
            **settings: Any) -> RunOutcome:
    seen = [] if seen is None else seen
    plan = RunPlan(folder, select_tasks(data, ids),
                   RunSettings(agent="recorder", jobs=1, **settings),
                   lambda: Recorder(seen, cost), data.suite.path, "sha", data.root, rerun=rerun)
    return anyio.run(execute_run, plan, Progress(stream or io.StringIO(), live=False))


@pytest.mark.process
def test_trials_are_interleaved_fresh_and_addressed_by_task_and_trial(data: Dataset,
                                                                     tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    seen: list[str] = []
    outcome = execute(data, folder, seen, trials=3)
    assert seen == ["t1", "t2", "t1", "t2", "t1", "t2"]  # trial 1 of every task first
    assert sorted(outcome.ran) == [(t, k) for t in ("t1", "t2") for k in (1, 2, 3)]
    assert sorted(folder.trial_results()) == sorted(outcome.ran)
    # trial 1 where a run made before trials kept it; later trials under _trials/<k>/
    assert (folder.root / "t1" / "result.json").is_file()
    saved = json.loads((folder.root / "_trials" / "3" / "t2" / "result.json").read_text())
    assert saved["trial"] == 3 and saved["task_id"] == "t2"
    rows = load_report(folder).rows
    assert [(r.task_id, r.trial) for r in rows] == sorted(outcome.ran)
    assert [r.name for r in rows][:3] == ["t1#1", "t1#2", "t1#3"]
    # a result copied into another trial's folder is not that trial's result
    shutil.copy(folder.result_path("t1", 2), folder.result_path("t1", 3))
    assert ("t1", 3) not in folder.trial_results()
    assert interleaved(select_tasks(data, ["t1", "t2"]).tasks, 2, {("t1", 1)})[0].key == \
        ("t2", 1)


@pytest.mark.process
def test_raising_the_trials_runs_only_the_new_ones_and_lowering_is_refused(
        data: Dataset, tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    execute(data, folder, trials=1)
    first = folder.result_path("t1").read_bytes()
    seen: list[str] = []
    more = execute(data, folder, seen, trials=3)
    assert sorted(more.ran) == [(t, k) for t in ("t1", "t2") for k in (2, 3)]
    assert more.already_done == (("t1", 1), ("t2", 1)) and len(seen) == 4
    assert folder.result_path("t1").read_bytes() == first  # finished ones untouched
    assert len(folder.trial_results()) == 6
    manifest = folder.read_manifest()
    assert manifest is not None and manifest.trials == 3
    with pytest.raises(UserError, match="has 3 trials per task; --trials 2 would drop some"):
        execute(data, folder, trials=2)
    again = execute(data, folder, trials=3)  # nothing missing: nothing runs
    assert again.ran == {} and len(again.already_done) == 6


@pytest.mark.process
def test_a_machine_fault_is_run_again_and_only_that_trial(data: Dataset,
                                                         tmp_path: Path) -> None:
    from spider2local.core.results import ErrorKind, Stage, TaskError

    folder = RunFolder.at(tmp_path / "runs", "r")
    execute(data, folder, trials=2)
    broken = folder.load_result("t2", 2)
    assert broken is not None
    save_result(folder.result_path("t2", 2), replace(
        broken, status=Status.ERROR, passed=None,
        error=TaskError(Stage.AGENT, ErrorKind.INFRASTRUCTURE, "API overloaded")))
    seen: list[str] = []
    resumed = execute(data, folder, seen, trials=2)
    assert list(resumed.ran) == [("t2", 2)] and seen == ["t2"]


@pytest.mark.process
def test_the_budget_stops_new_trials_and_a_higher_cap_continues(data: Dataset,
                                                                tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    stream = io.StringIO()
    capped = execute(data, folder, ids=("t1",), cost=3.0, trials=3, max_cost_usd=5.0,
                     stream=stream)
    assert sorted(capped.ran) == [("t1", 1), ("t1", 2)]  # $6 spent >= $5: trial 3 not started
    assert capped.not_run_for_budget == 1
    log = stream.getvalue()
    assert "projected cost of the run $9.00" in log  # after trial 1: 3 trials at $3
    assert "1 trial(s) not started: the run's budget of $5.00 was reached" in log
    manifest = folder.read_manifest()
    assert manifest is not None and manifest.not_run_for_budget == 1
    report = load_report(folder)
    assert report.not_run_for_budget == 1
    assert any("1 trial(s) not run: the run's budget" in line
               for line in headline_lines(report))
    more = execute(data, folder, ids=("t1",), cost=3.0, trials=3, max_cost_usd=20.0)
    assert list(more.ran) == [("t1", 3)] and more.not_run_for_budget == 0
    assert load_report(folder).not_run_for_budget == 0


class Spender:
    """Spends $0.40 a call through the trial's share of the run's budget, as its model gateway
    would: asks before each call, is charged after it; stops when refused (as a session does
    on the gateway's refusal) and reports what it spent, as an agent's usage does."""

    name = "spender"

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        assert ctx.budget is not None  # the runner always hands a trial its share
        spent = 0.0
        for _ in range(25):
            refused = ctx.budget.refusal()
            if refused is not None:
                return AgentOutcome(usage=Usage(turns=1, cost_usd_computed=spent),
                                    error=f"the agent reached its budget limit: {refused}")
            await anyio.sleep(0.01)
            ctx.budget.charge(0.4)
            spent += 0.4
        return AgentOutcome(usage=Usage(turns=1, cost_usd_computed=spent))


@pytest.mark.process
def test_running_trials_share_one_run_budget_and_are_cut_when_it_is_spent(
        data: Dataset, tmp_path: Path) -> None:
    """Two trials at once under a $1 cap: both are cut mid-way (over the cap by at most one
    call each), the two trials after them never start, what the run spent is counted once
    (the gateway's charges and the results' costs are the same money), and the report says
    how many were cut and how many never started."""
    folder = RunFolder.at(tmp_path / "runs", "r")
    plan = RunPlan(folder, select_tasks(data, ("t1", "t2")),
                   RunSettings(agent="spender", jobs=2, trials=2, max_cost_usd=1.0),
                   Spender, data.suite.path, "sha", data.root)
    outcome = anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    assert sorted(outcome.ran) == [("t1", 1), ("t2", 1)] and outcome.not_run_for_budget == 2
    results = folder.trial_results()
    assert all(r.cut_by_budget for r in results.values())
    spent = sum(r.usage.cost_usd or 0.0 for r in results.values())
    assert 1.0 <= spent <= 1.0 + 2 * 0.4 + 1e-9
    manifest = folder.read_manifest()
    assert manifest is not None and manifest.spent_usd == pytest.approx(spent)
    report = load_report(folder)
    assert (report.cut_by_budget, report.not_run_for_budget) == (2, 2)
    assert any(line.startswith("2 trial(s) cut by the run's budget of $1.00")
               for line in headline_lines(report))


@pytest.mark.process
def test_a_trial_whose_budget_was_spent_while_it_was_prepared_never_starts(
        data: Dataset, tmp_path: Path) -> None:
    """Trials beside it spent the run's budget while its workspace was made: its agent is not
    started (it would be refused at once and the untouched workspace scored), no result and
    no folder are left, and it is counted as not started."""
    folder = RunFolder.at(tmp_path / "runs", "r")
    folder.create()
    budget = RunBudget(1.0, spent=1.25)
    seen: list[str] = []
    stream = io.StringIO()
    task = select_tasks(data, ("t1",)).tasks[0]
    result = anyio.run(run_task, task, folder, RunSettings(agent="recorder"),
                       lambda: Recorder(seen), Progress(stream, live=False), None, 1, budget)
    assert result is None and seen == [] and budget.not_run == 1
    assert not folder.trial_dir("t1", 1).exists() and folder.trial_results() == {}
    assert "t1: not started: the run budget of $1 is spent ($1.2500)" in stream.getvalue()


@pytest.mark.process
def test_rerun_moves_the_trials_into_the_history_and_runs_them_again(data: Dataset,
                                                                     tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    execute(data, folder, trials=2)
    old = folder.result_path("t1", 2).read_bytes()
    with pytest.raises(UserError, match="--rerun nosuch: not a task of run r"):
        execute(data, folder, trials=2, rerun=("nosuch",))
    assert (folder.root / "_history").exists() is False  # refused before anything moved
    seen: list[str] = []
    again = execute(data, folder, seen, trials=2, rerun=("t1",))
    assert sorted(again.ran) == [("t1", 1), ("t1", 2)] and seen == ["t1", "t1"]
    kept = folder.root / "_history" / "1"
    assert (kept / "_trials" / "2" / "t1" / "result.json").read_bytes() == old
    assert (kept / "t1" / "result.json").is_file()
    assert len(folder.trial_results()) == 4  # the history is never counted
    manifest = folder.read_manifest()
    assert manifest is not None and manifest.reruns[0].tasks == ("t1",)
    assert manifest.reruns[0].history == "1"
    # `--rerun failed`: only tasks with a trial that did not pass
    for key, result in folder.trial_results().items():
        verdict = key != ("t2", 2)
        save_result(folder.result_path(*key), replace(
            result, status=Status.PASSED if verdict else Status.FAILED, passed=verdict))
    seen.clear()
    execute(data, folder, seen, trials=2, rerun=("failed",))
    assert seen == ["t2", "t2"] and (folder.root / "_history" / "2" / "t2").is_dir()


def pre_trials_copy(tmp_path: Path) -> RunFolder:
    folder = RunFolder(tmp_path / "runs" / "sample-reference")
    shutil.copytree(PRE_TRIALS, folder.root, ignore=shutil.ignore_patterns("README.md"))
    return folder


def test_a_run_made_before_trials_reads_as_a_1_trial_run(tmp_path: Path) -> None:
    folder = pre_trials_copy(tmp_path)
    assert sorted(folder.trial_results()) == [(t, 1) for t in
                                              ("bakery001", "fleet001", "gym001", "library001")]
    report = load_report(folder)
    assert report.trials == 1 and report.rates.tasks_passed == 4
    assert [r.task_id for r in report.rows] == ["bakery001", "fleet001", "gym001", "library001"]
    manifest = folder.read_manifest()
    assert manifest is not None and manifest.manifest_version == 3 and manifest.trials == 1
    # merged from two halves (as two shards would be), it is the same run
    halves = []
    for index, keep in enumerate((("bakery001", "fleet001"), ("gym001", "library001"))):
        half = RunFolder(tmp_path / f"half{index}" / "sample-reference")
        shutil.copytree(folder.root, half.root)
        for tid in {"bakery001", "fleet001", "gym001", "library001"} - set(keep):
            shutil.rmtree(half.task_dir(tid))
        halves.append(half)
    merged = merge_runs(halves, RunFolder(tmp_path / "merged" / "sample-reference"))
    assert {k: r.status for k, r in merged.into.trial_results().items()} == \
        {k: r.status for k, r in folder.trial_results().items()}
    assert [(r.task_id, r.verdict) for r in load_report(merged.into).rows] == \
        [(r.task_id, r.verdict) for r in report.rows]


@pytest.mark.slow
def test_a_run_made_before_trials_resumes_and_takes_more_trials(tmp_path: Path) -> None:
    """The sample suite's run made by the code before trials, resumed by this code: nothing
    is re-run; ``--trials 2`` then runs only trial 2. The fingerprints of the package's own
    sources are today's (any upgrade changes them, which a resume refuses by design), and so
    are those of the gold files: the sample is built on first use, and two builds of the same
    DuckDB file differ in bytes, so the recorded ones name the build on the machine that made
    the run and a resume anywhere else is refused ("gold file ... changed"). Each task's
    evaluation record stays as the old code recorded it: a resume still compares it."""
    from spider2local.dataset.load import load_dataset as load
    from spider2local.run.plan import plan_run
    from spider2local.suite.load import bundled_suite_path, load_suite

    folder = pre_trials_copy(tmp_path)
    raw = json.loads(folder.manifest_path.read_text())
    raw["integrity"]["sources"] = guard.source_hashes()
    suite = load_suite(bundled_suite_path()).with_dataset("sample")
    raw["suite"]["sha256"] = suite.sha256
    data = load(suite)
    recorded = raw["integrity"]["tasks"]
    assert sorted(recorded) == sorted(data.ids())
    for task in data.tasks:
        built = guard.task_fingerprint(task)
        assert built is not None and built.db is not None
        gold = {"gold": built.gold, "db": asdict(built.db),
                "wal": None if built.wal is None else asdict(built.wal)}
        recorded[task.id].update(gold)
    folder.manifest_path.write_text(json.dumps(raw))
    before = {k: folder.result_path(*k).read_bytes() for k in folder.trial_results()}
    plan = plan_run(suite, data, agent=None, runs_dir=folder.root.parent,
                    run_id=folder.run_id)
    outcome = anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    assert outcome.ran == {} and len(outcome.already_done) == 4
    assert {k: folder.result_path(*k).read_bytes() for k in before} == before
    plan = plan_run(suite, data, runs_dir=folder.root.parent, run_id=folder.run_id, trials=2)
    outcome = anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    assert sorted(outcome.ran) == [(t, 2) for t in
                                   ("bakery001", "fleet001", "gym001", "library001")]
    assert {k: folder.result_path(*k).read_bytes() for k in before} == before
    assert all(r.status is Status.PASSED for r in folder.trial_results().values())


@pytest.mark.process
def test_shards_with_trials_merged_are_the_run_one_invocation_makes(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    from spider2local.run.selection import parse_shard

    data = load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1", "t2", "t3")))

    def one(folder: RunFolder, shard: str | None) -> None:
        selection = select_tasks(data, shard=parse_shard(shard) if shard else None)
        plan = RunPlan(folder, selection, RunSettings(agent="recorder", jobs=2, trials=2),
                       lambda: Recorder([]), data.suite.path, "sha", data.root)
        anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))

    whole = RunFolder.at(tmp_path / "whole", "r")
    one(whole, None)
    pieces = [RunFolder.at(tmp_path / f"shard{k}", "r") for k in (1, 2)]
    for k, piece in enumerate(pieces, start=1):
        one(piece, f"{k}/2")
    merged = merge_runs(pieces, RunFolder(tmp_path / "merged" / "r"))
    verdicts = {k: (r.status, r.passed) for k, r in merged.into.trial_results().items()}
    assert verdicts == {k: (r.status, r.passed) for k, r in whole.trial_results().items()}
    assert len(verdicts) == 6
    manifest = merged.into.read_manifest()
    assert manifest is not None and manifest.trials == 2
    assert [(r.task_id, r.trial) for r in load_report(merged.into).rows] == sorted(verdicts)

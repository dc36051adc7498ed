"""The runner with test agents on tiny real datasets (real workspaces, DuckDB, scoring).

Agents here are test-only (the runner takes an agent factory): they write the graded table
directly with DuckDB instead of running dbt, hang, crash, or fail like an overloaded API. The
end-to-end runs with real dbt are in tests/cli/test_run_command.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import anyio
import duckdb
import pytest

from spider2local.agents.contract import Agent, AgentContext, AgentOutcome
from spider2local.agents.noop import NoopAgent
from spider2local.core.results import ErrorKind, Stage, Status, TaskResult, Usage
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.proc.run import run_process
from spider2local.run.folder import RunFolder
from spider2local.run.plan import RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.runner import Trial, run_tasks
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.sandbox.isolation import IsolationMode
from spider2local.suite.model import Suite
from tests.helpers import by_task, hold_lock, manifest_json, tiny_disk_prefix

pytestmark = pytest.mark.process


def quiet() -> Progress:
    return Progress(io.StringIO(), live=False)


@pytest.fixture
def tasks(tiny_dataset: Callable[..., Path], tmp_path: Path) -> list[TaskSpec]:
    root = tiny_dataset("t1", "t2", "t3", "t4")
    return list(load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks)


class WriterAgent:
    """Does the task's work by hand: creates the graded ``orders`` table (gold is ``1 AS id``)."""

    name = "writer"

    def __init__(self, value: int = 1, pause: float = 0.0) -> None:
        self.value, self.pause = value, pause

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        await anyio.sleep(self.pause)
        con = duckdb.connect(str(ctx.workspace.database))
        con.execute(f"CREATE TABLE orders AS SELECT {self.value} AS id")
        con.close()
        ctx.meter.set(Usage(turns=2))
        return AgentOutcome(usage=ctx.meter.usage)


def settings(**kw: object) -> RunSettings:
    return RunSettings(**{"agent": "test", "jobs": 2, "timeout": 30.0, "retries": 2,
                          "retry_backoff": 0.01, **kw})  # type: ignore[arg-type]


def run(tasks: list[TaskSpec], folder: RunFolder, factory: Callable[[], Agent],
        **kw: object) -> dict[str, TaskResult]:
    return by_task(anyio.run(run_tasks, tasks, folder, settings(**kw), factory, quiet()))


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@pytest.mark.in_process_readers  # its subject is not the readers
def test_verdicts_artifacts_and_stage_durations(tasks: list[TaskSpec], tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path, "r")
    good = run(tasks[:1], folder, WriterAgent, keep_db=True)["t1"]
    assert good.status is Status.PASSED and good.passed and good.tables_passed == 1
    assert good.usage.turns == 2 and good.attempts == 1 and good.error is None
    assert {"prepare", "agent", "checkpoint", "score", "collect", "cleanup",
            "total"} <= set(good.durations)
    assert good.durations["total"] >= good.durations["agent"]
    task_dir = folder.task_dir("t1")
    assert folder.load_result("t1") == good
    assert (task_dir / "project" / "models" / "schema.yml").is_file()
    assert (task_dir / "result.duckdb").is_file() and (task_dir / "transcript.jsonl").is_file()
    bad = run(tasks[1:2], folder, lambda: WriterAgent(value=7))["t2"]
    assert bad.status is Status.FAILED and bad.passed is False
    assert bad.score is not None and bad.score.tables[0].name == "orders"
    assert not (folder.task_dir("t2") / "result.duckdb").exists()  # only with keep_db
    noop = run(tasks[2:3], folder, NoopAgent)["t3"]
    assert noop.status is Status.FAILED and noop.score is not None and noop.score.tables[0].missing


def test_each_trial_starts_one_checkpoint_one_scorer_one_graded_child_and_each_task_one_snapshot(
        tasks: list[TaskSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reader children are the runner's main cost per trial (a fresh interpreter importing
    DuckDB, and pandas for the scorer): trial 2 reuses its task's start snapshot, and
    ``--keep-db`` keeps the database the checkpoint stage folded without a second one. The
    graded tables' copy is a child of its own (DuckDB only), after the score: it can never
    cost the score its deadline."""
    from spider2local.sandbox import readers

    started: list[tuple[str, str | None, str]] = []
    real = readers.ask_reader

    async def counted(module: str, request: dict[str, object], *args: object,
                      **kw: object) -> dict[str, object]:
        job = request.get("job")
        where = str(request.get("db") or request.get("result"))
        started.append((module.removeprefix("spider2local."), str(job) if job else None,
                        Path(where).parts[-1]))
        return await real(module, request, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(readers, "ask_reader", counted)
    trials = [Trial(task, k) for k in (1, 2) for task in tasks[:1]]
    results = anyio.run(run_tasks, trials, RunFolder.at(tmp_path, "r"),
                        settings(keep_db=True, jobs=1, trials=2), WriterAgent, quiet())
    assert [r.status for r in results.values()] == [Status.PASSED, Status.PASSED]
    trial = [("sandbox.dbreads", "checkpoint", "shop.duckdb"),
             ("sandbox.scoring", None, "shop.duckdb"),
             ("sandbox.graded", None, "shop.duckdb")]
    assert started == [("sandbox.dbreads", "snapshot", "shop.duckdb"), *trial, *trial]
    for k in (1, 2):  # what is kept is the folded database, the graded table in the file
        kept = RunFolder.at(tmp_path, "r").trial_dir("t1", k) / "result.duckdb"
        assert not kept.with_name("result.duckdb.wal").exists()
        with duckdb.connect(str(kept), read_only=True) as con:
            assert con.execute("SELECT id FROM orders").fetchall() == [(1,)]


@pytest.mark.in_process_readers  # its subject is not the readers
def test_workspaces_are_removed_unless_kept(tasks: list[TaskSpec], tmp_path: Path) -> None:
    parent = tmp_path / "ws"
    parent.mkdir()
    run(tasks[:2], RunFolder.at(tmp_path, "r"), WriterAgent, workspace_parent=parent)
    assert list(parent.iterdir()) == []
    run(tasks[:1], RunFolder.at(tmp_path, "k"), WriterAgent, workspace_parent=parent, keep=True)
    assert len(list(parent.iterdir())) == 1


async def _child(pidfile: Path) -> None:
    await run_process(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 300"], timeout=None)


class HangingAgentWithChildren:
    name = "hang"

    def __init__(self, pids: list[int], pidfile: Path) -> None:
        self.pids, self.pidfile = pids, pidfile

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        # A stray: not started through run_process, only the runner's reaper can stop it.
        stray = subprocess.Popen(["sleep", "300"], cwd=ctx.workspace.project_dir,  # noqa: ASYNC220
                                 start_new_session=True)
        self.pids.append(stray.pid)
        ctx.meter.set(Usage(turns=5))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_child, self.pidfile)
            await anyio.sleep_forever()
        return AgentOutcome()


def test_hanging_agent_is_stopped_at_its_deadline(tasks: list[TaskSpec], tmp_path: Path) -> None:
    pids: list[int] = []
    pidfile = tmp_path / "child.pid"
    folder = RunFolder.at(tmp_path, "r")
    started = time.monotonic()
    result = run(tasks[:1], folder, lambda: HangingAgentWithChildren(pids, pidfile),
                 timeout=1.0)["t1"]
    elapsed = time.monotonic() - started
    assert result.durations["agent"] < 1.0 + 5.0, result.durations
    # nothing outside the task's recorded steps waited on the hung agent (a fixed bound on
    # the whole run failed at load 9: prepare and scoring alone took 8 s there)
    assert elapsed < result.durations["total"] + 3.0, (elapsed, result.durations)
    assert result.status is Status.TIMEOUT
    assert result.error is not None and result.error.kind is ErrorKind.TIMEOUT
    assert result.error.stage is Stage.AGENT
    assert result.passed is False and result.tables_total == 1  # scored what was left
    assert result.usage.turns == 5  # usage so far survives the cut
    pids.append(int(pidfile.read_text()))
    assert len(pids) == 2 and not [p for p in pids if alive(p)]


class CrashingAgent:
    name = "crash"

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        raise RuntimeError("bug in the agent")


@pytest.mark.in_process_readers  # its subject is not the readers
def test_agent_crash_is_recorded_and_the_database_still_scored(tasks: list[TaskSpec],
                                                               tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path, "r")
    results = run(tasks[:2], folder, CrashingAgent)
    for result in results.values():
        assert result.status is Status.FAILED and result.tables_total == 1
        assert result.error is not None and result.error.stage is Stage.AGENT
        assert "RuntimeError: bug in the agent" in result.error.message
        # The message is in result.json; the whole traceback, for a bug report, beside it.
        kept = (folder.task_dir(result.task_id) / "error.txt").read_text()
        assert "Traceback (most recent call last)" in kept and "stage agent" in kept
        assert 'raise RuntimeError("bug in the agent")' in kept and "in run" in kept


def test_an_unexpected_scoring_failure_keeps_its_traceback(
        tasks: list[TaskSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError("a scorer bug")

    folder = RunFolder.at(tmp_path, "r")
    good = run(tasks[1:2], folder, WriterAgent)["t2"]
    assert good.passed and not (folder.task_dir("t2") / "error.txt").exists()
    # Scoring runs in a sandboxed child (score_sandboxed, which the runner imports when it
    # scores): the failure is injected there, where the runner meets it.
    monkeypatch.setattr("spider2local.sandbox.scoring.score_sandboxed", broken)
    result = run(tasks[:1], folder, WriterAgent)["t1"]
    assert result.status is Status.ERROR and result.error is not None
    assert result.error.stage is Stage.SCORE and result.error.message == "a scorer bug"
    kept = (folder.task_dir("t1") / "error.txt").read_text()
    assert "ZeroDivisionError: a scorer bug" in kept and "in broken" in kept


class FlakyAgent:
    """Overloaded API for the first ``failures`` attempts (shared counter), then does the work."""

    name = "flaky"
    calls = 0

    def __init__(self, failures: int) -> None:
        self.failures = failures

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        FlakyAgent.calls += 1
        if FlakyAgent.calls <= self.failures:
            return AgentOutcome(error="HTTP 529 overloaded", infrastructure=True)
        return await WriterAgent().run(ctx)


@pytest.mark.in_process_readers  # its subject is not the readers
def test_infrastructure_errors_are_retried(tasks: list[TaskSpec], tmp_path: Path) -> None:
    FlakyAgent.calls = 0
    result = run(tasks[:1], RunFolder.at(tmp_path, "r"), lambda: FlakyAgent(1))["t1"]
    assert result.status is Status.PASSED and result.attempts == 2
    FlakyAgent.calls = 0
    result = run(tasks[:1], RunFolder.at(tmp_path, "s"), lambda: FlakyAgent(99), retries=2)["t1"]
    assert result.status is Status.ERROR and result.attempts == 3 and result.passed is None
    assert result.error is not None and result.error.kind is ErrorKind.INFRASTRUCTURE


class CostlyFlakyAgent:
    """Each failed attempt is billed (tokens spent before the API gave up, no turn done)."""

    name = "costly"
    calls = 0

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        CostlyFlakyAgent.calls += 1
        if CostlyFlakyAgent.calls <= 2:
            ctx.meter.set(Usage(input_tokens=10, cost_usd_reported=0.01, cost_usd_computed=0.02,
                                by_model={"m1": {"input_tokens": 10}}))
            return AgentOutcome(usage=ctx.meter.usage, error="HTTP 529", infrastructure=True)
        await WriterAgent().run(ctx)
        ctx.meter.set(Usage(turns=2, input_tokens=100, output_tokens=7, cost_usd_computed=0.5,
                            by_model={"m1": {"input_tokens": 60}, "m2": {"input_tokens": 40}}))
        return AgentOutcome(usage=ctx.meter.usage)


@pytest.mark.in_process_readers  # its subject is not the readers
def test_usage_of_retried_attempts_is_summed(tasks: list[TaskSpec], tmp_path: Path) -> None:
    CostlyFlakyAgent.calls = 0
    result = run(tasks[:1], RunFolder.at(tmp_path, "r"), CostlyFlakyAgent, retries=2)["t1"]
    assert result.status is Status.PASSED and result.attempts == 3
    usage = result.usage
    assert (usage.turns, usage.input_tokens, usage.output_tokens) == (2, 120, 7)
    assert usage.cost_usd_reported == pytest.approx(0.02)
    assert usage.cost_usd_computed == pytest.approx(0.54)
    assert usage.by_model == {"m1": {"input_tokens": 80}, "m2": {"input_tokens": 40}}


class MidSessionFailureAgent:
    """Does the work over three turns, then the API fails: an infrastructure error with work
    already in the workspace."""

    name = "mid"
    calls = 0

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        MidSessionFailureAgent.calls += 1
        await WriterAgent().run(ctx)
        ctx.meter.set(Usage(turns=3, input_tokens=30))
        return AgentOutcome(usage=ctx.meter.usage, error="HTTP 529 overloaded",
                            infrastructure=True)


@pytest.mark.in_process_readers  # its subject is not the readers
def test_infrastructure_error_after_a_turn_is_scored_not_retried(tasks: list[TaskSpec],
                                                                  tmp_path: Path) -> None:
    MidSessionFailureAgent.calls = 0
    folder = RunFolder.at(tmp_path, "r")
    result = run(tasks[:1], folder, MidSessionFailureAgent, retries=2)["t1"]
    assert MidSessionFailureAgent.calls == 1 and result.attempts == 1
    assert result.status is Status.PASSED and result.passed and result.tables_passed == 1
    assert result.error is not None and result.error.stage is Stage.AGENT
    assert result.error.kind is ErrorKind.INFRASTRUCTURE and "529" in result.error.message
    assert result.usage.turns == 3 and result.usage.input_tokens == 30
    assert (folder.task_dir("t1") / "project" / "models" / "schema.yml").is_file()


def test_prepare_and_score_failures_are_recorded_per_stage(tasks: list[TaskSpec],
                                                           tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"not a database at all" * 100)
    broken = [dataclasses.replace(tasks[0], start_db=None),
              dataclasses.replace(tasks[1], gold=dataclasses.replace(tasks[1].gold, db=garbage))]
    results = run(broken, RunFolder.at(tmp_path, "r"), WriterAgent)
    assert results["t1"].status is Status.ERROR
    assert results["t1"].error is not None and results["t1"].error.stage is Stage.PREPARE
    assert results["t2"].status is Status.ERROR and results["t2"].passed is None
    assert results["t2"].error is not None and results["t2"].error.stage is Stage.SCORE
    assert results["t2"].error.kind is ErrorKind.EXCEPTION
    assert results["t2"].error.exception == "ScoringError"
    assert results["t2"].attempts == 1  # a failed score is never retried


class CountingAgent:
    running = 0
    peak = 0
    name = "count"

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        CountingAgent.running += 1
        CountingAgent.peak = max(CountingAgent.peak, CountingAgent.running)
        await anyio.sleep(0.3)
        CountingAgent.running -= 1
        return AgentOutcome()


@pytest.mark.in_process_readers  # its subject is not the readers
def test_jobs_limit_concurrency(tasks: list[TaskSpec], tmp_path: Path) -> None:
    CountingAgent.peak = 0
    results = run(tasks, RunFolder.at(tmp_path, "r"), CountingAgent, jobs=2)
    assert len(results) == 4 and CountingAgent.peak == 2


@pytest.mark.in_process_readers  # its subject is not the readers
def test_execute_run_resumes_without_redoing_finished_tasks(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", "t2", "t3")
    suite = Suite(tmp_path / "tasks.toml", root)
    data = load_dataset(suite)
    folder = RunFolder.at(tmp_path / "runs", "r")

    def plan(ids: list[str]) -> RunPlan:
        return RunPlan(folder, select_tasks(data, ids), settings(), WriterAgent,
                       suite.path, "sha", root)

    first = anyio.run(execute_run, plan(["t1"]), quiet())
    assert list(by_task(first.ran)) == ["t1"] and not first.interrupted
    # An interrupted attempt of t2 left stale artifacts behind.
    (folder.task_dir("t2") / "dbt").mkdir(parents=True)
    (folder.task_dir("t2") / "transcript.jsonl").write_text('{"stale": true}\n')
    second = anyio.run(execute_run, plan(["t1", "t2", "t3"]), quiet())
    assert second.already_done == (("t1", 1),) and sorted(by_task(second.ran)) == ["t2", "t3"]
    assert folder.load_result("t1") == by_task(first.ran)["t1"]
    assert "stale" not in (folder.task_dir("t2") / "transcript.jsonl").read_text()
    assert not (folder.task_dir("t2") / "dbt").exists()
    manifest = manifest_json(folder)
    assert manifest is not None and len(manifest["sessions"]) == 2
    assert manifest["interrupted"] is False and manifest["finished_at"]


@pytest.mark.in_process_readers  # its subject is not the readers
def test_progress_plain_lines_and_live_redraw(tasks: list[TaskSpec], tmp_path: Path) -> None:
    plain = io.StringIO()
    anyio.run(run_tasks, tasks[:1], RunFolder.at(tmp_path, "p"), settings(),
              lambda: WriterAgent(pause=0.2), Progress(plain, live=False))
    lines = plain.getvalue().splitlines()
    assert any(line.endswith("t1: agent") for line in lines)
    assert any("t1: passed 1/1 tables" in line for line in lines)
    assert "\x1b[" not in plain.getvalue()
    live = io.StringIO()
    anyio.run(run_tasks, tasks[:1], RunFolder.at(tmp_path, "l"), settings(),
              lambda: WriterAgent(pause=1.2), Progress(live, live=True))
    raw = live.getvalue()
    assert "\x1b[" in raw  # the block was redrawn in place
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)  # colours and cursor moves
    assert any("t1" in line and "agent" in line and "turns" in line
               for line in text.splitlines())
    assert "t1: passed 1/1 tables" in text


@pytest.mark.slow
def test_claude_agent_hung_api_stopped_at_deadline_nothing_survives(
        tasks: list[TaskSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real SDK + bundled CLI against a fake API that stops answering after the agent
    started a background process: the runner's deadline ends it all, usage is kept."""
    from spider2local.agents.registry import make_agent
    from spider2local.testing import FakeAnthropic, Hang, reply, tool

    token = "313.0421"
    sleeper = f"nohup python3 -c 'import time; time.sleep({token})' >/dev/null 2>&1 &"
    script = [reply(tool("Bash", command=sleeper), input_tokens=77, output_tokens=3), Hang()]
    with FakeAnthropic(script) as fake:
        for key, value in fake.env().items():
            monkeypatch.setenv(key, value)
        started = time.monotonic()
        result = run(tasks[:1], RunFolder.at(tmp_path, "c"), lambda: make_agent("claude"),
                     timeout=12.0, retries=0)["t1"]
        elapsed = time.monotonic() - started
        answered_hang = any(r.answer == "hang" for r in fake.requests)
    assert answered_hang, "the second API call never happened"
    assert result.durations["agent"] < 12.0 + 5.0, result.durations
    # The whole task is its agent stage plus the other stages it records (workspace,
    # checkpoint, scoring: each a sandboxed child, seconds under load), and nothing unrecorded.
    others = sum(v for k, v in result.durations.items() if k not in ("agent", "total"))
    assert elapsed < result.durations["agent"] + others + 3.0, (elapsed, result.durations)
    assert result.status is Status.TIMEOUT and result.tables_total == 1
    assert result.usage.input_tokens == 77
    survivors = [e.name for e in Path("/proc").iterdir() if e.name.isdigit()
                 and token in _cmdline(e) and alive(int(e.name))]
    assert survivors == []


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_claude_agent_overloaded_api_is_retried_with_usage_summed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real SDK + bundled CLI: the first session meets HTTP 529 before any turn (the CLI's
    own retries off), the runner starts a fresh one, which answers; both are accounted for."""
    from spider2local.agents.registry import make_agent
    from spider2local.suite.load import bundled_suite_path, load_suite
    from spider2local.suite.model import SAMPLE
    from spider2local.testing import FakeAnthropic, HttpError, reply, route_by_system

    data = load_dataset(load_suite(bundled_suite_path()).with_dataset(SAMPLE))
    task = next(t for t in data.tasks if t.id == "bakery001")
    script = [HttpError(529), reply("done", input_tokens=120, output_tokens=9,
                                    cache_read_tokens=30)]
    route = route_by_system({"main": "senior analytics engineer"})
    with FakeAnthropic(script, route=route) as fake:
        for key, value in {**fake.env(), "CLAUDE_CODE_MAX_RETRIES": "0"}.items():
            monkeypatch.setenv(key, value)
        result = run([task], RunFolder.at(tmp_path, "c"), lambda: make_agent("claude"),
                     agent="claude", model="claude-sonnet-4-5", verify_rounds=0, retries=2,
                     timeout=90.0)["bakery001"]
        answers = [r.answer for r in fake.conversation_requests("main")]
        totals = fake.totals()
    assert answers == ["error 529", "scripted"], answers
    assert result.attempts == 2 and result.error is None, result.error
    assert result.status is Status.FAILED and result.tables_total > 0  # scored the untouched db
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens) == (120, 9, 30)
    assert usage.input_tokens == totals["input_tokens"]
    assert usage.by_model and usage.cost_usd_computed is not None and usage.cost_usd_computed > 0
    lines = [json.loads(line) for line in
             (tmp_path / "c" / "bakery001" / "transcript.jsonl").read_text().splitlines()]
    assert sum(e["kind"] == "attempt" for e in lines) == 2
    # Turns are API calls answered: the failed one is not a turn, the CLI's num_turns says 1.
    per_session = [e["data"]["num_turns"] for e in lines if e["kind"] == "ResultMessage"]
    assert len(per_session) == 2 and usage.turns == 1, per_session


def _cmdline(entry: Path) -> str:
    try:
        return (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_locked_gold_is_infrastructure_and_resume_scores_it(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", "t2")
    suite = Suite(tmp_path / "tasks.toml", root)
    data = load_dataset(suite)
    folder = RunFolder.at(tmp_path / "runs", "r")
    # the runner reads the dataset's gold itself (no unsealed witness scoring private copies:
    # that is the next test)
    plan = RunPlan(folder, select_tasks(data, ["t1", "t2"]),
                   settings(isolation=IsolationMode.NOT_NEEDED), WriterAgent,
                   suite.path, "sha", root)
    gold = data.get("t1").gold  # type: ignore[union-attr]
    assert gold is not None
    with hold_lock(gold.db):  # another process holds t1's gold read-write
        first = anyio.run(execute_run, plan, quiet())
    t1 = by_task(first.ran)["t1"]
    assert t1.status is Status.ERROR and t1.passed is None and t1.score is None
    assert t1.error is not None and t1.error.kind is ErrorKind.INFRASTRUCTURE
    assert t1.error.stage is Stage.SCORE and "lock" in t1.error.message
    assert "Could not set lock" in (folder.task_dir("t1") / "error.txt").read_text()
    assert by_task(first.ran)["t2"].status is Status.PASSED
    # The fault is gone: the resume runs t1 again (only t1) and scores it.
    second = anyio.run(execute_run, plan, quiet())
    assert second.already_done == (("t2", 1),) and list(by_task(second.ran)) == ["t1"]
    again = by_task(second.ran)["t1"]
    assert again.status is Status.PASSED and again.error is None


def test_under_the_unsealed_witness_a_locked_original_gold_is_not_in_the_way(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    """Under ``--isolation none`` the runner scores the private copy it took before any agent
    started (integrity/witness.py): a lock on the dataset's file no longer stops scoring."""
    root = tiny_dataset("t1")
    suite = Suite(tmp_path / "tasks.toml", root)
    data = load_dataset(suite)
    folder = RunFolder.at(tmp_path / "runs", "w")
    plan = RunPlan(folder, select_tasks(data, ["t1"]), settings(isolation=IsolationMode.NONE),
                   WriterAgent, suite.path, "sha", root)
    gold = data.get("t1").gold  # type: ignore[union-attr]
    assert gold is not None
    with hold_lock(gold.db):
        done = anyio.run(execute_run, plan, quiet())
    t1 = by_task(done.ran)["t1"]
    assert t1.status is Status.PASSED and t1.error is None, t1


FULL_DISK_SCRIPT = """
import io, sys
from pathlib import Path
from typing import ClassVar
import anyio
from spider2local.dataset.load import load_dataset
from spider2local.run.folder import RunFolder
from spider2local.run.progress import Progress
from spider2local.run.runner import Trial, run_tasks
from spider2local.suite.model import Suite
from tests.run.test_runner import WriterAgent, settings

root, runs = Path(sys.argv[1]), Path(sys.argv[2])
tasks = list(load_dataset(Suite(root.parent / "tasks.toml", root)).tasks)
filler = runs / "filler"

class Filler(WriterAgent):
    # Does its work, then fills the run folder's disk: its result cannot be saved. t1 fills
    # only once t2 has done its own writing and is parked, so the one write that meets the
    # full disk is t1's result (under load t2 could otherwise still be writing its transcript).
    parked = False
    async def run(self, ctx):
        outcome = await super().run(ctx)
        if ctx.task.id == "t1":
            while not Filler.parked:
                await anyio.sleep(0.05)
            try:
                with filler.open("wb") as fh:
                    while True:
                        fh.write(b"x" * 65536)
            except OSError:
                pass
            ctx.transcript.append("text", "written on a full disk")
        else:  # t2 is still working when t1 ends, and must not be cancelled by it
            Filler.parked = True
            while not Operator.freed:
                await anyio.sleep(0.05)
        return outcome

class Operator(Progress):
    # Frees the space once told what is full, as a person reading stderr would.
    freed = False
    def note(self, task_id, message):
        super().note(task_id, message)
        if "result not saved" in message:
            filler.unlink()
            Operator.freed = True

progress = Operator(sys.stderr, live=False)
done = anyio.run(run_tasks, tasks, RunFolder.at(runs, "r"), settings(), Filler, progress)
print(sorted(t for t, _ in done))
"""


@pytest.mark.slow
def test_a_full_disk_at_the_result_stops_that_task_only_and_says_what_is_full(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", "t2")
    runs = tmp_path / "runs"
    proc = subprocess.run([*tiny_disk_prefix(runs, "1m"), sys.executable, "-c",
                           FULL_DISK_SCRIPT, str(root), str(runs)],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip() == "['t2']"  # t2 was kept, and finished after t1's fault
    lines = [x for x in proc.stderr.splitlines() if "result not saved" in x]
    assert len(lines) == 1 and "t1" in lines[0], proc.stderr
    assert f"{runs}/r/t1/" in lines[0] and "No space left on device" in lines[0]
    assert "t2: passed" in proc.stderr


def _lock_out(path: Path) -> bool:
    """Make ``path`` unusable the way an agent can: ``chmod 000`` (enough for an ordinary
    user) and, as root (which ignores modes), ``chattr +i``. False when neither is possible."""
    path.chmod(0)
    if os.geteuid() != 0:
        return True
    done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    return done.returncode == 0


def _unlock_all(root: Path) -> None:
    if os.geteuid() == 0 and root.exists():
        subprocess.run(["chattr", "-R", "-i", str(root)], capture_output=True, check=False)


class LockingOutAgent(WriterAgent):
    """Does the work (right or wrong), then makes its own database unopenable: a fault of the
    agent's own making, which must never read as the machine's (a resume would run it again on
    every invocation, paying for the agent each time, and the task would never be scored)."""

    locked: ClassVar[list[Path]] = []

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        outcome = await super().run(ctx)
        if not _lock_out(ctx.workspace.database):
            pytest.skip("cannot make a file unopenable here (no chattr)")
        LockingOutAgent.locked.append(ctx.workspace.root)
        return outcome


def test_an_agent_that_locks_its_own_database_out_is_scored_not_infrastructure(
        tasks: list[TaskSpec], tmp_path: Path) -> None:
    parent = tmp_path / "ws"
    parent.mkdir()
    LockingOutAgent.locked = []
    try:
        results = run(tasks[:2], RunFolder.at(tmp_path, "r"), lambda: LockingOutAgent(value=7),
                      workspace_parent=parent, jobs=1)
    finally:
        for root in LockingOutAgent.locked:
            _unlock_all(root)
    assert sorted(results) == ["t1", "t2"]  # one task's leftovers never stop the run
    for result in results.values():
        assert result.status is Status.FAILED and result.passed is False, result
        assert result.error is not None and result.error.kind is ErrorKind.AGENT
        assert result.error.stage is Stage.CHECKPOINT


def test_a_gold_that_cannot_be_read_stops_its_task_before_the_agent_not_the_run(
        tasks: list[TaskSpec], tmp_path: Path) -> None:
    """Fingerprinting read every gold at run start and let the OSError of one stop the whole
    run with a traceback; now that task ends before its agent runs (no session paid for) and
    the others are scored. (A real EACCES needs an ordinary user; a gold replaced by a folder
    gives a real OSError too.)"""
    broken = tasks[0]
    assert broken.gold is not None
    broken.gold.db.unlink()
    broken.gold.db.mkdir()
    ran: list[str] = []

    class Recording(WriterAgent):
        async def run(self, ctx: AgentContext) -> AgentOutcome:
            ran.append(ctx.task.id)
            return await super().run(ctx)

    results = run(tasks[:2], RunFolder.at(tmp_path, "r"), Recording, jobs=1)
    assert results["t1"].status is Status.ERROR and results["t1"].error is not None
    assert results["t1"].error.stage is Stage.PREPARE
    assert "Is a directory" in results["t1"].error.message
    assert results["t2"].status is Status.PASSED
    assert ran == ["t2"]

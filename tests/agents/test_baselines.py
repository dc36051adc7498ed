"""The non-LLM agents (noop, reference, replay) and the agent registry, with real dbt."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.agents.contract import AgentContext, AgentLimits, AgentOutcome
from spider2local.agents.noop import NoopAgent
from spider2local.agents.registry import agent_names, make_agent
from spider2local.core.transcript import Transcript
from spider2local.dataset.load import load_dataset
from spider2local.dataset.sample import SAMPLE_TASK_IDS
from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.dbtproject.inventory import scan_project
from spider2local.exceptions import UserError
from spider2local.suite.model import DEFAULT_DATE, Suite
from spider2local.workspace.checkpoint import checkpoint_database
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace
from tests.helpers import ReferenceRun


def load(root: Path | str) -> Dataset:
    return load_dataset(Suite(path=Path("tasks.toml"), dataset=root))


@pytest.fixture
def context(tmp_path: Path) -> Iterator[Callable[[TaskSpec], AgentContext]]:
    made = []

    def make(task: TaskSpec) -> AgentContext:
        artifacts = tmp_path / "run" / task.id
        ws = prepare_workspace(task, artifacts=artifacts, parent=tmp_path)
        made.append(ws)
        return AgentContext(task=task, workspace=ws,
                            limits=AgentLimits(max_turns=1, timeout=300),
                            transcript=Transcript(artifacts / "transcript.jsonl"))

    yield make
    for ws in made:
        cleanup_workspace(ws)


def run(agent_name: str, ctx: AgentContext, **options: object) -> AgentOutcome:
    agent = make_agent(agent_name, **options)
    return anyio.run(agent.run, ctx)


def kinds(ctx: AgentContext) -> list[str]:
    lines = ctx.transcript.path.read_text().splitlines()
    return [json.loads(line)["kind"] for line in lines]


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()


def test_registry_names_and_errors(tmp_path: Path) -> None:
    assert {"noop", "reference", "replay", "claude"} <= set(agent_names())
    assert isinstance(make_agent("noop"), NoopAgent)
    with pytest.raises(UserError, match=r"unknown agent 'gpt'.*choose from: .*noop"):
        make_agent("gpt")
    with pytest.raises(UserError, match="bad options"):
        make_agent("noop", turbo=True)
    for options in ({}, {"replay_dir": tmp_path / "absent"}):  # the CLI's option, by name
        with pytest.raises(UserError, match=r"needs a folder|replay folder not found") as info:
            make_agent("replay", **options)
        assert "--replay-dir" in str(info.value) and "replay_dir=" not in str(info.value)


@pytest.mark.process
def test_noop_agents_do_not_import_the_sdk() -> None:
    code = ("import sys; from spider2local.agents.registry import make_agent; make_agent('noop'); "
            "make_agent('reference'); print('claude_agent_sdk' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.process
def test_noop_changes_nothing(tiny_dataset: Callable[..., Path],
                              context: Callable[[TaskSpec], AgentContext]) -> None:
    ctx = context(load(tiny_dataset("t1")).tasks[0])
    before = digest(ctx.workspace.project_dir)
    assert run("noop", ctx) == AgentOutcome()
    assert digest(ctx.workspace.project_dir) == before
    assert kinds(ctx) == ["noop"]


@pytest.mark.process
def test_reference_without_solution_is_an_error_outcome(
        tiny_dataset: Callable[..., Path], context: Callable[[TaskSpec], AgentContext]) -> None:
    ctx = context(load(tiny_dataset("t1")).tasks[0])
    outcome = run("reference", ctx)
    assert outcome.error is not None and "no reference solution" in outcome.error
    assert not (ctx.workspace.artifacts / "dbt").exists()


@pytest.mark.process
def test_replay_applies_files_over_the_project(
        tiny_dataset: Callable[..., Path], context: Callable[[TaskSpec], AgentContext],
        tmp_path: Path) -> None:
    ctx = context(load(tiny_dataset("t1")).tasks[0])
    replay = tmp_path / "replay"
    (replay / "t1" / "models").mkdir(parents=True)
    (replay / "t1" / "models" / "orders.sql").write_text("select id from raw_orders")
    (replay / "t1" / "models" / "schema.yml").write_text("version: 2\nmodels:\n  - name: x\n")
    (replay / "t1" / "target").mkdir()
    (replay / "t1" / "target" / "stale.json").write_text("{}")
    assert run("replay", ctx, replay_dir=replay, run_dbt=False) == AgentOutcome()
    project = ctx.workspace.project_dir
    assert (project / "models" / "orders.sql").read_text() == "select id from raw_orders"
    assert "name: x" in (project / "models" / "schema.yml").read_text()
    assert not (project / "target").exists()
    assert kinds(ctx) == ["apply"]
    other = context(load(tiny_dataset("t2")).tasks[1])
    outcome = run("replay", other, replay_dir=replay)
    assert outcome.error is not None and "t2" in outcome.error


@pytest.mark.slow
def test_replay_builds_with_dbt_and_reports_failures(
        tiny_dataset: Callable[..., Path], context: Callable[[TaskSpec], AgentContext],
        tmp_path: Path) -> None:
    ctx = context(load(tiny_dataset("t1")).tasks[0])
    models = tmp_path / "replay" / "t1" / "models"
    models.mkdir(parents=True)
    (models / "orders.sql").write_text("select id, id * 10 as amount from raw_orders")
    (models / "broken.sql").write_text("select nope from no_such_table")
    outcome = run("replay", ctx, replay_dir=tmp_path / "replay")
    assert outcome.error is not None and "broken" in outcome.error
    assert "orders" not in outcome.error.split(":", 1)[1]
    logs = ctx.workspace.artifacts / "dbt"
    assert sorted(p.name for p in logs.glob("dbt-001-run*")) == [
        "dbt-001-run.jsonl", "dbt-001-run.run_results.json"]
    checkpoint_database(ctx.workspace.database, root=ctx.workspace.root)
    con = duckdb.connect(str(ctx.workspace.database), read_only=True)
    assert con.execute("SELECT id, amount FROM orders").fetchall() == [(1, 10)]
    con.close()
    assert kinds(ctx) == ["apply", "dbt", "dbt_result"]


@pytest.mark.slow
@pytest.mark.parametrize("task_id", SAMPLE_TASK_IDS)
def test_reference_builds_the_sample_models_equal_to_gold(reference_run: ReferenceRun,
                                                          task_id: str) -> None:
    """In the session's reference run (tests/conftest.py) the reference agent applied the
    solution, ran dbt once, completed every model and built each graded table equal to gold.
    gym001 reads the clock: equal to gold only if dbt ran under the task's fake date."""
    assert reference_run.outcome.returncode == 0, reference_run.outcome.stderr[-3000:]
    task = reference_run.dataset().get(task_id)
    assert task is not None and task.gold is not None
    assert task.solution_dir is not None
    if task_id == "gym001":
        assert task.date != DEFAULT_DATE
    task_dir = reference_run.run_dir / task_id
    assert {m.status for m in scan_project(task.project_dir).models} != {"complete"}
    assert {m.status for m in scan_project(task_dir / "project").models} == {"complete"}
    events = [json.loads(line) for line in (task_dir / "transcript.jsonl").read_text()
              .splitlines()]
    assert [e["kind"] for e in events] == ["attempt", "apply", "dbt", "dbt_result", "outcome",
                                           "stage_deadlines", "graded"]
    # the graded tables kept after the score (regrade scores them again), the hash recorded
    assert events[6]["data"]["tables"] == dict.fromkeys(task.gold.params.condition_tabs)
    assert json.loads((task_dir / "result.json").read_text())["graded_sha256"] == \
        events[6]["data"]["sha256"]
    # the checkpoint's and the scorer's deadlines, fitted to this task's start database
    assert {stage: d["derived"] for stage, d in events[5]["data"].items()} == {
        "checkpoint": True, "score": True}
    applied = sorted(str(p.relative_to(task.solution_dir))
                     for p in task.solution_dir.rglob("*") if p.is_file())
    assert events[1]["data"]["files"] == applied
    assert events[2]["data"]["args"] == ["run"] and events[4]["data"]["error"] is None
    # The reference agent runs no untrusted code: recorded as such, not as "isolated".
    result = json.loads((task_dir / "result.json").read_text())
    assert result["status"] == "passed" and result["isolation"] == "not-needed"
    assert reference_run.manifest()["isolation"]["mode"] == "not-needed"
    run_results = json.loads((task_dir / "dbt" / "dbt-001-run.run_results.json").read_text())
    assert {r["status"] for r in run_results["results"]} == {"success"}
    con = duckdb.connect(str(task_dir / "result.duckdb"), read_only=True)
    con.execute(f"ATTACH '{task.gold.db}' AS gold (READ_ONLY)")
    for table in task.gold.params.condition_tabs:
        diff = con.execute(f"SELECT count(*) FROM (SELECT * FROM gold.{table} "
                           f"EXCEPT ALL SELECT * FROM {table})").fetchone()
        total = con.execute(f"SELECT count(*) FROM {table}").fetchone()
        gold_total = con.execute(f"SELECT count(*) FROM gold.{table}").fetchone()
        assert diff == (0,) and total == gold_total, table
    con.close()

"""The Claude agent: the real SDK and bundled CLI against the loopback fake Anthropic API, real dbt
under the fake clock, real DuckDB files, official scoring."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest

from spider2local.agents import prompts
from spider2local.agents.claude.support import SessionState, cli_env
from spider2local.agents.contract import AgentContext, AgentLimits, AgentOutcome
from spider2local.agents.registry import capabilities, make_agent
from spider2local.clock import warm
from spider2local.core.transcript import Transcript
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.evaluation import score_database
from spider2local.exceptions import CredentialsError
from spider2local.run.retry import should_retry
from spider2local.sandbox.isolation import IsolationMode
from spider2local.sandbox.probe import probe
from spider2local.seal.processes import MARKER_ENV
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.suite.model import SAMPLE
from spider2local.testing import (
    FakeAnthropic,
    Hang,
    HttpError,
    Malformed,
    reply,
    route_by_system,
    tool,
)
from spider2local.workspace.checkpoint import checkpoint_database
from spider2local.workspace.collect import collect_artifacts
from spider2local.workspace.model import Workspace
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace
from tests.agents.test_kit import kit_files, tool_mentions

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the Claude session (tests/conftest.py)."""

MODEL = "claude-sonnet-4-5"
SONNET = {"input": 3.0, "output": 15.0, "cache_read": 0.30, "cache_write": 3.75}
"""Public list prices per million tokens, written out here so the check does not reuse the
table under test."""
ROUTE = route_by_system({"verifier": "You are the verifier of a dbt project",
                         "main": "senior analytics engineer"})


# --- fast checks: no CLI ------------------------------------------------------------------------

def test_credentials_are_required_with_a_one_line_fix() -> None:
    caps = capabilities("claude")
    with pytest.raises(CredentialsError) as info:
        caps.check_credentials("claude", {"ANTHROPIC_API_KEY": "  "})
    assert "ANTHROPIC_API_KEY" in str(info.value) and "CLAUDE_CODE_OAUTH_TOKEN" in str(info.value)
    assert "\n" not in str(info.value)
    caps.check_credentials("claude", {"CLAUDE_CODE_OAUTH_TOKEN": "x"})
    assert caps.credential_in({"ANTHROPIC_API_KEY": " ", "CLAUDE_CODE_OAUTH_TOKEN": "x"}) \
        == "CLAUDE_CODE_OAUTH_TOKEN"
    assert capabilities("noop").has_credentials({})


@pytest.mark.process
def test_run_without_credentials_fails_at_once_with_exit_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "spider2local", "run", "--agent", "claude",
                           "--runs-dir", str(tmp_path / "runs"), "bakery001"],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ANTHROPIC_API_KEY" in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("result.json"))
    assert time.monotonic() - started < 60


def test_cli_version_is_the_bundled_one() -> None:
    from claude_agent_sdk._cli_version import __cli_version__

    from spider2local.agents.claude.session import cli_version
    assert cli_version() == __cli_version__
    assert cli_version()[0].isdigit()


def test_cli_env_keeps_the_workspace_env_and_blanks_what_it_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DBT_PROFILES_DIR", "/somewhere/else")
    monkeypatch.setenv("LD_PRELOAD", "/x/libfaketime.so.1")
    env = cli_env({"PATH": "/shim:/usr/bin", "SPIDER2LOCAL_FAKE_DATE": "2024-01-02"},
                  tmp_path / "cfg", "abc")
    assert env["PATH"] == "/shim:/usr/bin" and env["SPIDER2LOCAL_FAKE_DATE"] == "2024-01-02"
    assert env["DBT_PROFILES_DIR"] == "" and env["LD_PRELOAD"] == ""
    assert env["CLAUDE_CONFIG_DIR"] == str(tmp_path / "cfg") and env[MARKER_ENV] == "abc"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["ENABLE_TOOL_SEARCH"] == "false"
    assert env.get("IS_SANDBOX") == ("1" if os.geteuid() == 0 else None)


def test_session_state_asks_for_verification_then_for_fixes() -> None:
    """Verdicts come from the gateway's reports only: a verifier's tool result on the CLI's
    stream (which the agent's code can write into) only ends the wait for it."""
    state = SessionState()
    assert state.follow_up() == prompts.verify_request()
    state.on_tool_use("t2", "Agent", {"subagent_type": "verifier"})
    state.on_tool_result("t2", "VERDICT: PASS", False)
    assert not state.verifier_ran and not state.verified and not state.pending
    state.on_verifier_report("- orders: 0 rows\nVERDICT: FAIL")
    assert state.verifier_ran and state.last_verdict is False
    follow = state.follow_up()
    assert follow is not None and "- orders: 0 rows" in follow
    state.on_verifier_report("VERDICT: PASS")
    assert state.verified and state.follow_up() is None
    state.on_error_result("success", 529, "API Error: 529 Overloaded")
    assert state.infrastructure and state.error is not None and "529" in state.error
    assert state.follow_up() is None
    state.on_refusal("the task budget of $1 is spent")
    assert not state.infrastructure and "budget" in (state.error or "")


def test_an_sdk_exception_after_an_error_result_keeps_the_precise_message() -> None:
    """The CLI exits non-zero after an error result and the SDK raises: the classified
    message from the result stays, and so does its infrastructure verdict."""
    from claude_agent_sdk import ProcessError

    state = SessionState()
    state.on_error_result("success", 529, "API Error: 529 Overloaded\nsecond line")
    state.on_exception(ProcessError("Command failed with exit code 1", exit_code=1), turns=1)
    assert state.error == "API error 529: API Error: 529 Overloaded"
    assert state.infrastructure is True
    limited = SessionState()
    limited.on_error_result("error_max_turns", None, "")
    limited.on_exception(ProcessError("Command failed with exit code 1", exit_code=1), turns=0)
    assert limited.error == "the agent reached its turn limit" and not limited.infrastructure
    crashed = SessionState()
    crashed.on_exception(ProcessError("Command failed with exit code 1", exit_code=1), turns=0)
    assert crashed.error is not None and crashed.error.startswith("ProcessError: ")
    assert crashed.infrastructure is True


# --- end to end: real SDK + CLI + dbt, fake API -------------------------------------------------

@pytest.fixture
def sample_task() -> Callable[[str], TaskSpec]:
    dataset = load_dataset(load_suite(bundled_suite_path()).with_dataset(SAMPLE))
    return lambda tid: next(t for t in dataset.tasks if t.id == tid)


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Callable[..., AgentContext]]:
    made: list[Workspace] = []

    def make(task: TaskSpec, env: dict[str, str], isolation: IsolationMode = IsolationMode.NONE,
             **limits: Any) -> AgentContext:
        ws = prepare_workspace(task, artifacts=tmp_path / "run" / task.id, parent=tmp_path)
        made.append(ws)
        ws = dataclasses.replace(ws, env={**ws.env, **env})
        return AgentContext(task=task, workspace=ws,
                            limits=AgentLimits(**{"max_turns": 30, "timeout": 120,
                                                  "model": MODEL, **limits}),
                            transcript=Transcript(ws.artifacts / "transcript.jsonl"),
                            isolation=isolation)

    yield make
    for ws in made:
        cleanup_workspace(ws)


def run_agent(ctx: AgentContext, deadline: float = 120, **options: Any) -> AgentOutcome:
    async def go() -> AgentOutcome:
        with anyio.fail_after(deadline):
            return await make_agent("claude", **options).run(ctx)
    return anyio.run(go)


def with_warm_dbt(ctx: AgentContext) -> AgentContext:
    """``ctx`` with the workspace's warm dbt server named, as the runner gives it."""
    ws = ctx.workspace
    return dataclasses.replace(ctx, workspace=dataclasses.replace(
        ws, env=warm.warm_env(ws.env, ws.root)))


def run_agent_warm(ctx: AgentContext, deadline: float = 120) -> AgentOutcome:
    """:func:`run_agent` with the warm dbt server started where the runner starts it: inside
    the sandbox by the session itself, else by the runner (here, this test)."""
    async def go() -> AgentOutcome:
        server = None
        if ctx.isolation is not IsolationMode.NAMESPACE:
            server = await warm.start_server(ctx.workspace.env, ctx.workspace.root)
        try:
            with anyio.fail_after(deadline):
                return await make_agent("claude").run(ctx)
        finally:
            if server is not None:
                await server.stop()
    return anyio.run(go)


def transcript_kinds(ctx: AgentContext) -> list[str]:
    return [json.loads(line)["kind"] for line in ctx.transcript.path.read_text().splitlines()]


def queries(ctx: AgentContext) -> list[dict[str, Any]]:
    path = ctx.workspace.artifacts / "queries.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def last_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(str(block.get("text", "")) for block in content)


def expected_cost(totals: dict[str, int]) -> float:
    return (totals["input_tokens"] * SONNET["input"] + totals["output_tokens"] * SONNET["output"]
            + totals["cache_read_tokens"] * SONNET["cache_read"]
            + totals["cache_creation_tokens"] * SONNET["cache_write"]) / 1e6


@pytest.mark.slow
@pytest.mark.parametrize("isolation", [
    IsolationMode.NONE,
    pytest.param(IsolationMode.NAMESPACE, marks=pytest.mark.skipif(
        not probe().ok, reason=f"no namespace sandbox: {probe().reason}"))])
def test_writes_builds_queries_verifies_and_passes(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext],
        isolation: IsolationMode) -> None:
    """gym001 reads the clock: the table equals gold only if the agent's `dbt run` was faked.
    The same honest session passes the same way in the sandbox (the query tool stays in the
    runner; dbt runs inside, through the shim, under the fake clock)."""
    task = sample_task("gym001")
    assert task.solution_dir is not None and task.gold is not None
    model_sql = (task.solution_dir / "models" / "membership_status.sql").read_text()
    with FakeAnthropic({"main": [], "verifier": []}, route=ROUTE) as fake:
        ctx = with_warm_dbt(workspace(task, fake.env(), isolation))
        target = ctx.workspace.project_dir / "models" / "membership_status.sql"
        fake.conversations["main"] = [
            reply("Writing the model.", tool("Write", file_path=str(target), content=model_sql),
                  input_tokens=1200, output_tokens=300, cache_creation_tokens=800),
            reply(tool("Bash", command="dbt run"), input_tokens=1500, output_tokens=40,
                  cache_read_tokens=900),
            reply(tool("mcp__spider2__query", sql="SELECT current_date AS today, count(*) AS n "
                                                  "FROM membership_status"),
                  input_tokens=1700, output_tokens=50, cache_read_tokens=1000),
            reply(tool("Agent", description="verify", prompt="Check membership_status.",
                       subagent_type="verifier", run_in_background=False),
                  input_tokens=1900, output_tokens=60, cache_read_tokens=1100),
            reply("Done: membership_status built and verified.", input_tokens=2100,
                  output_tokens=25, cache_read_tokens=1200),
        ]
        fake.conversations["verifier"] = [
            reply(tool("mcp__spider2__describe_table", table="membership_status"),
                  input_tokens=700, output_tokens=30),
            reply("All declared columns present.\nVERDICT: PASS", input_tokens=900,
                  output_tokens=20, cache_read_tokens=100),
        ]
        outcome = run_agent_warm(ctx)
        totals = fake.totals()
        main = fake.conversation_requests("main")
        verifier = fake.conversation_requests("verifier")

    assert outcome.error is None and not outcome.infrastructure
    assert outcome.verified is True
    # The agent's `dbt run` was served by the workspace's warm server, inside the sandbox too.
    served = warm.report(ctx.workspace.root, warm.runs_dir(ctx.workspace.env))
    assert served["calls"] == 1 and "cold_note" not in served, served
    assert served["resident_kib"] > 10_000
    # Scored like the runner does: the official semantics on the built database.
    checkpoint_database(ctx.workspace.database, root=ctx.workspace.root)
    score = score_database(ctx.workspace.database, task.gold.db, task.gold.params)
    assert score.passed, score
    # The agent's own `dbt run` (through Bash) left its log and run_results in artifacts/dbt,
    # numbered by the shim (one file per dbt call).
    collect_artifacts(ctx.workspace, keep_db=False)
    dbt_dir = ctx.workspace.artifacts / "dbt"
    assert "membership_status" in (dbt_dir / "dbt.log").read_text()
    assert sorted(p.name for p in dbt_dir.glob("*.json")) == ["001-run.run_results.json"]
    run_results = json.loads((dbt_dir / "001-run.run_results.json").read_text())
    statuses = {r["unique_id"].split(".")[-1]: r["status"] for r in run_results["results"]}
    assert statuses.get("membership_status") == "success"
    # The query ran under the task's clock and was audited.
    query_result = main[3].tool_results()
    assert any(task.date.isoformat() in text for text in query_result.values())
    audit = queries(ctx)
    assert [(q["tool"], q["rows"], q["error"]) for q in audit] == [
        ("query", 1, None), ("describe_table", 8, None)]
    # What the server reported is what the result says.
    assert totals["replies"] == 7
    usage = outcome.usage
    assert usage.turns == 5
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
            usage.cache_creation_tokens) == (totals["input_tokens"], totals["output_tokens"],
                                             totals["cache_read_tokens"],
                                             totals["cache_creation_tokens"])
    assert usage.cost_usd_computed is not None
    assert math.isclose(usage.cost_usd_computed, expected_cost(totals), rel_tol=1e-9)
    # The CLI's own figure (forgeable: it comes through its stdout) is only in the transcript;
    # our price table agrees with it.
    assert usage.cost_usd_reported is None
    reported = [json.loads(line)["data"]["total_cost_usd"]
                for line in ctx.transcript.path.read_text().splitlines()
                if json.loads(line)["kind"] == "ResultMessage"]
    assert math.isclose(reported[-1], usage.cost_usd_computed, rel_tol=1e-6)
    assert ctx.meter.usage == usage
    # Every exchange went through the gateway and is in its record.
    record = [json.loads(line) for line in
              (ctx.workspace.artifacts / "api.jsonl").read_text().splitlines()]
    assert [e["status"] for e in record if "/v1/messages" in e["target"]] == [200] * 7
    assert all("VERDICT: PASS" not in e["response"]["text"] for e in record[:5]) and \
        any("VERDICT: PASS" in e["response"]["text"] for e in record)
    # Requests: the main agent got the prompt and the governed tools; the verifier read-only ones.
    assert len(main) == 5 and len(verifier) == 2
    system = main[0].body["system"]
    assert task.instruction in json.dumps(system)
    assert "mcp__spider2__query" in main[0].tool_names
    # every tool the kit names is one the real CLI offered (the lint's set comes from our code)
    named = set().union(*(tool_mentions(p.read_text()) for p in kit_files()))
    assert named <= set(main[0].tool_names) | set(verifier[0].tool_names), \
        named - set(main[0].tool_names) - set(verifier[0].tool_names)
    assert set(verifier[0].tool_names) <= {"Read", "Grep", "Glob", "mcp__spider2__query",
                                           "mcp__spider2__list_tables",
                                           "mcp__spider2__describe_table",
                                           "mcp__spider2__project_scan"}
    kinds = transcript_kinds(ctx)
    assert "follow_up" not in kinds and kinds.count("ResultMessage") == 1
    assert kinds.count("AssistantMessage") >= 7


@pytest.mark.slow
def test_unverified_work_is_sent_back_and_mutating_sql_is_refused(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext]) -> None:
    task = sample_task("bakery001")
    call_verifier = tool("Agent", description="verify", prompt="Check the models.",
                         subagent_type="verifier", run_in_background=False)
    script = {
        "main": [reply(tool("mcp__spider2__query", sql="WITH x AS (SELECT 1) DELETE FROM orders"),
                       input_tokens=10, output_tokens=5),
                 reply("I am done.", input_tokens=20, output_tokens=5),
                 reply(call_verifier, input_tokens=30, output_tokens=5),
                 reply("Stopping here.", input_tokens=40, output_tokens=5),
                 reply(call_verifier, input_tokens=50, output_tokens=5),
                 reply("Fixed and verified.", input_tokens=60, output_tokens=5)],
        "verifier": [reply("- product_sales: missing\nVERDICT: FAIL", input_tokens=5,
                           output_tokens=1),
                     reply("VERDICT: PASS", input_tokens=6, output_tokens=1)],
    }
    with FakeAnthropic(script, route=ROUTE) as fake:
        ctx = workspace(task, fake.env(), verify_rounds=2)
        con = duckdb.connect(str(ctx.workspace.database), read_only=True)
        before = con.execute("SELECT count(*) FROM orders").fetchone()
        con.close()
        outcome = run_agent(ctx)
        main = fake.conversation_requests("main")

    assert outcome.error is None and outcome.verified is True
    refused = main[1].tool_results()
    assert any("refused" in t and "DELETE" in t for t in refused.values())
    con = duckdb.connect(str(ctx.workspace.database), read_only=True)
    assert con.execute("SELECT count(*) FROM orders").fetchone() == before
    con.close()
    assert queries(ctx)[0]["error"].startswith("refused")
    # Follow-ups: first "run the verifier", then "fix what it reported", in the same session.
    assert len(main) == 6
    assert prompts.verify_request().strip() in last_user_text(main[2].body)
    fix_text = last_user_text(main[4].body)
    assert "last verdict was FAIL" in fix_text and "- product_sales: missing" in fix_text
    assert transcript_kinds(ctx).count("follow_up") == 2
    assert outcome.usage.turns == 6
    assert outcome.usage.input_tokens == 10 + 20 + 30 + 40 + 50 + 60 + 5 + 6


@pytest.mark.slow
def test_overloaded_api_is_an_infrastructure_outcome(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext]) -> None:
    with FakeAnthropic([HttpError(529, repeat=True)], route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), {**fake.env(), "CLAUDE_CODE_MAX_RETRIES": "0"})
        outcome = run_agent(ctx, deadline=60)
        assert fake.requests and all(r.answer == "error 529" for r in fake.requests
                                     if r.conversation == "main")
    assert outcome.infrastructure is True
    # The classified message from the error result, not the SDK exception raised after it.
    assert outcome.error is not None and outcome.error.startswith("API error 529: "), outcome.error
    assert outcome.verified is False
    assert "follow_up" not in transcript_kinds(ctx)


@pytest.mark.slow
def test_the_cli_leaves_nothing_in_the_system_temp_folder_without_isolation(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext]) -> None:
    """The CLI keeps per-session files under ``<tmp>/claude-<uid>/<cwd slug>/``; with HOME,
    TMPDIR and CLAUDE_CODE_TMPDIR inside the workspace they go with it, so a later agent
    cannot read them."""
    script = [reply(tool("Bash", command="echo hello > note.txt && ls"), input_tokens=5),
              reply("done", input_tokens=5)]
    with FakeAnthropic(script, route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), fake.env(), verify_rounds=0)
        outcome = run_agent(ctx)
    assert outcome.error is None
    slug = str(ctx.workspace.project_dir).replace("/", "-").replace(".", "-").replace("_", "-")
    left = [p for p in Path("/tmp").glob(f"claude-{os.getuid()}/*")
            if p.name.replace("_", "-") == slug]
    assert left == []
    assert any((ctx.workspace.root / ".tmp").rglob("*")), "the CLI's temp files moved here"


def cut_into_the_hang(ctx: AgentContext, fake: FakeAnthropic) -> float:
    """Run the Claude agent and cut it at a deadline 1 s into the first hanging API call,
    however long the CLI took to get there (a fixed deadline, once 10 s, waited out the CLI's
    start-up margin on every run); returns when the cut was made (monotonic)."""
    cut_at: list[float] = []

    async def go() -> None:
        with anyio.fail_after(60) as deadline:
            async with anyio.create_task_group() as tg:
                tg.start_soon(make_agent("claude").run, ctx)
                while not any(r.answer == "hang" for r in fake.requests):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                await anyio.sleep(1.0)
                cut_at.append(time.monotonic())
                deadline.deadline = anyio.current_time()  # expire now: TimeoutError

    with pytest.raises(TimeoutError):
        anyio.run(go)
    assert cut_at, "the hanging API call never happened"
    return cut_at[0]


def live_processes_under(root: Path, token: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = str((entry / "cwd").readlink())
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (cwd.startswith(str(root)) or token in cmdline):
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


@pytest.mark.slow
def test_a_hung_api_is_cut_at_the_deadline_with_no_process_left(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext]) -> None:
    token = "321.0123"
    sleeper = f"nohup python3 -c 'import time; time.sleep({token})' >/dev/null 2>&1 &"
    script = [reply(tool("Bash", command=sleeper), input_tokens=77, output_tokens=3), Hang()]
    with FakeAnthropic(script, route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), fake.env())
        cut_at = cut_into_the_hang(ctx, fake)
        elapsed = time.monotonic() - cut_at
    assert elapsed < 8, f"cleanup after the deadline took {elapsed:.1f}s"
    assert live_processes_under(ctx.workspace.root, token) == []
    assert ctx.meter.usage.input_tokens == 77  # usage recorded before the cut
    assert ctx.meter.usage.turns == 1
    # what the live display's row says it is doing: the call that started the sleeper
    assert ctx.meter.last_tool is not None and ctx.meter.last_tool.startswith(
        "Bash: nohup python3 -c 'import time; time.sleep(321.0123)'")


@pytest.mark.slow
def test_thinking_budget_and_a_prompts_folder_reach_the_api(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext],
        tmp_path: Path) -> None:
    """``thinking_budget`` turns extended thinking on with that budget (off otherwise), and
    ``--prompts DIR`` replaces the bundled templates in what the model is sent."""
    kit = tmp_path / "kit"
    shutil.copytree(prompts.prompts_dir(), kit)
    agent_md = kit / "agent.md"
    agent_md.write_text("KIT-B senior analytics engineer\n" + agent_md.read_text())
    with FakeAnthropic([reply("done")], route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), fake.env(), verify_rounds=0,
                        thinking_budget=2048)
        ctx.prompts = kit
        run_agent(ctx, deadline=60)
        body = fake.conversation_requests("main")[0].body
    assert {k: body["thinking"][k] for k in ("type", "budget_tokens")} == {
        "type": "enabled", "budget_tokens": 2048}
    assert "KIT-B" in json.dumps(body["system"])
    with FakeAnthropic([reply("done")], route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), fake.env(), verify_rounds=0)
        run_agent(ctx, deadline=60)
        body = fake.conversation_requests("main")[0].body
    assert body.get("thinking", {"type": "disabled"})["type"] == "disabled"
    assert "KIT-B" not in json.dumps(body["system"])


def slow(answer: Any, seconds: float = 2.0) -> Callable[[Any], Any]:
    """A turn answered after ``seconds``: the main agent's turn ends before this one."""
    def turn(_body: Any) -> Any:
        time.sleep(seconds)
        return answer
    return turn


@pytest.mark.slow
def test_a_background_verifier_s_fail_leads_to_a_fix_round_until_a_later_pass(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext]) -> None:
    """The CLI's default runs the Agent tool in the background: its result is only "Async agent
    launched", the report arrives later as a task notification, and the CLI then gives the main
    agent a turn of its own. The launch is not a report; the FAIL is, and asks for a fix."""
    verify = tool("Agent", description="verify", prompt="Check the models.",
                  subagent_type="verifier")  # no run_in_background: the CLI's default
    script = {
        "main": [reply(verify, input_tokens=10, output_tokens=2),
                 reply("Waiting for the verifier.", input_tokens=11, output_tokens=2),
                 reply("The verifier failed the work.", input_tokens=12, output_tokens=2),
                 reply(verify, input_tokens=13, output_tokens=2),
                 reply("Waiting again.", input_tokens=14, output_tokens=2),
                 reply("Verified.", input_tokens=15, output_tokens=2)],
        "verifier": [slow(reply("- product_sales: 0 rows\nVERDICT: FAIL", input_tokens=5,
                                output_tokens=1)),
                     slow(reply("VERDICT: PASS", input_tokens=6, output_tokens=1))],
    }
    with FakeAnthropic(script, route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), fake.env(), verify_rounds=1)
        outcome = run_agent(ctx, background_tasks=True)
        main = fake.conversation_requests("main")
        verifier = fake.conversation_requests("verifier")
    launched = [t for r in main for t in r.tool_results().values() if "Async agent" in t]
    assert launched, "the verifier did not run in the background: the test lost its point"
    assert outcome.error is None and outcome.verified is True
    fix = [i for i, r in enumerate(main) if "last verdict was FAIL" in last_user_text(r.body)]
    assert len(fix) == 1 and "- product_sales: 0 rows" in last_user_text(main[fix[0]].body)
    assert fix[0] == 3 and len(main) == 6 and len(verifier) == 2
    assert outcome.usage.turns == 6 and outcome.usage.subagent_turns == 2


def test_a_background_report_is_waited_for_until_it_arrives() -> None:
    state = SessionState()
    state.on_tool_use("t1", "Agent", {"subagent_type": "verifier"})
    state.on_tool_result("t1", "Async agent launched successfully.\nagentId: a1", False)
    assert not state.verifier_ran and state.waiting() and not state.verified
    state.on_task_notification("t1", "completed", "- x: wrong\nVERDICT: PASS")
    assert not state.verified, "a notification on the CLI's stream is no verdict"
    assert state.waiting(), "the CLI gives the main agent a turn for the report"
    state.on_main_answer()
    assert not state.waiting() and not state.background
    state.on_tool_use("t2", "Agent", {"subagent_type": "verifier"})
    state.on_tool_result("t2", "Async agent launched successfully.", False)
    state.on_task_notification("t2", "failed", "crashed")
    assert not state.verified and not state.background


@pytest.mark.slow
def test_a_malformed_first_response_is_infrastructure_and_retried(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext]) -> None:
    """A cut stream, then a body that is not JSON on the CLI's non-streaming retry: the CLI
    ends with subtype success and "API Error: ..." text. No turn was done: retry it."""
    with FakeAnthropic([Malformed(repeat=True)], route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), fake.env())
        outcome = run_agent(ctx, deadline=60)
        answers = {r.answer for r in fake.conversation_requests("main")}
    assert answers == {"malformed"}
    assert outcome.infrastructure is True, outcome.error
    assert outcome.error is not None and "API Error" in outcome.error
    assert outcome.usage.turns == 0
    assert should_retry(outcome, False, attempts=1, retries=2)


@pytest.mark.slow
def test_turns_are_the_api_calls_served_with_parallel_tool_calls(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext]) -> None:
    """The CLI's num_turns counts content blocks (4 for these 2 calls, measured); turns are
    the API calls the fake served, the verifier's counted apart."""
    calls = [tool("Bash", command=f"echo {i}") for i in range(3)]
    verify = tool("Agent", description="verify", prompt="Check.", subagent_type="verifier",
                  run_in_background=False)
    script = {"main": [reply("Three at once.", *calls, input_tokens=10, output_tokens=7),
                       reply("Two more.", *calls[:2], verify, input_tokens=11, output_tokens=8),
                       reply("Done.", input_tokens=12, output_tokens=9)],
              "verifier": [reply(tool("Read", file_path="dbt_project.yml"), tool("Glob",
                                 pattern="models/*"), input_tokens=5, output_tokens=3),
                           reply("VERDICT: PASS", input_tokens=6, output_tokens=4)]}
    with FakeAnthropic(script, route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), fake.env())
        outcome = run_agent(ctx)
        served = {name: sum(r.answer == "scripted" for r in fake.conversation_requests(name))
                  for name in ("main", "verifier")}
        totals = fake.totals()
    assert outcome.error is None and outcome.verified is True
    assert served == {"main": 3, "verifier": 2}
    assert (outcome.usage.turns, outcome.usage.subagent_turns) == (3, 2)
    assert ctx.meter.usage.turns == 3
    assert outcome.usage.output_tokens == totals["output_tokens"]
    results = [json.loads(line)["data"] for line in ctx.transcript.path.read_text().splitlines()
               if json.loads(line)["kind"] == "ResultMessage"]
    assert sum(r["num_turns"] for r in results) != 3, "the CLI's count is the wrong one"


@pytest.mark.slow
def test_a_timeout_keeps_final_output_tokens_and_the_stalled_call_s_input(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext]) -> None:
    from spider2local.testing.script import StallAfterStart

    script = [reply(tool("Bash", command="echo 1"), input_tokens=70, output_tokens=10),
              StallAfterStart(input_tokens=90)]
    with FakeAnthropic(script, route=ROUTE) as fake:
        ctx = workspace(sample_task("bakery001"), fake.env())
        cut_into_the_hang(ctx, fake)
    usage = ctx.meter.usage
    assert (usage.turns, usage.input_tokens, usage.output_tokens) == (1, 160, 10)


def spider2local_run(tmp_path: Path, env: dict[str, str], *args: str,
                     timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spider2local", "run", "--agent", "claude",
                           "--runs-dir", str(tmp_path / "runs"), *args],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout, check=False)


def only_result(tmp_path: Path) -> dict[str, Any]:
    found = list((tmp_path / "runs").rglob("result.json"))
    assert len(found) == 1, found
    return dict(json.loads(found[0].read_text()))


@pytest.mark.slow
def test_a_persistent_529_is_infrastructure_after_the_runner_s_retries(tmp_path: Path) -> None:
    """The CLI's own retries are bounded, so a dead API under --timeout 120 is not a timeout:
    the runner retries, then records infrastructure; the retries show in the progress lines."""
    with FakeAnthropic([HttpError(529, repeat=True)], route=ROUTE) as fake:
        proc = spider2local_run(tmp_path, fake.env(), "--timeout", "120", "--retries", "1",
                                "bakery001")
        answered = [r.answer for r in fake.conversation_requests("main")]
    result = only_result(tmp_path)
    assert result["status"] == "error", (result, proc.stderr[-2000:])
    assert result["error"]["kind"] == "infrastructure" and "529" in result["error"]["message"]
    # not a timeout of either attempt (the kind says so, whatever the machine's load): the
    # CLI's bounded retries ended each before its 120 s deadline
    assert result["attempts"] == 2
    assert set(answered) == {"error 529"} and len(answered) == 2 * 3  # 1 call + 2 CLI retries
    assert "API 529, retry 1/2" in proc.stderr and "API 529, retry 2/2" in proc.stderr


@pytest.mark.slow
def test_a_session_cut_at_its_deadline_says_nothing_of_the_sdk_on_the_console(
        tmp_path: Path) -> None:
    with FakeAnthropic([reply(tool("Bash", command="echo hi"), input_tokens=5), Hang()],
                       route=ROUTE) as fake:
        proc = spider2local_run(tmp_path, fake.env(), "--timeout", "8", "--retries", "0",
                                "bakery001")
    result = only_result(tmp_path)
    assert result["status"] == "timeout", (result, proc.stderr[-2000:])
    assert "Fatal error in message reader" not in proc.stderr, proc.stderr
    assert "claude_agent_sdk" not in proc.stderr, proc.stderr


def test_tool_calls_are_counted_as_announced() -> None:
    """``acted`` comes from tool calls seen before they ran, whatever the session says later."""
    state = SessionState()
    state.on_tool_use("t1", "Bash", {"command": "echo hi"})
    state.on_error_result("success", 529, "API Error: overloaded")
    assert state.infrastructure and state.tools_called == 1


def test_the_sandbox_starts_the_warm_dbt_server_without_the_api_credentials(
        tmp_path: Path) -> None:
    from spider2local.agents.claude.session import services_env
    from spider2local.sandbox.spec import warm_services

    env = {"PATH": "/usr/bin", "ANTHROPIC_API_KEY": "sk-secret", "ANTHROPIC_BASE_URL": "x",
           MARKER_ENV: "m1", "BLANKED": "", "SPIDER2LOCAL_FAKE_DATE": "2024-01-15",
           "SPIDER2LOCAL_LIBFAKETIME": "/lib/libfaketime.so.1",
           "SPIDER2LOCAL_REAL_DBT": "/venv/bin/dbt"}
    assert warm_services(services_env(env), tmp_path) == ()  # no socket named: no server
    (service,) = warm_services(services_env(warm.warm_env(env, tmp_path)), tmp_path)
    given = dict(service.env)
    assert "ANTHROPIC_API_KEY" not in given and "ANTHROPIC_BASE_URL" not in given
    assert "BLANKED" not in given and given[MARKER_ENV] == "m1"  # the sweep finds it too
    assert given["LD_PRELOAD"] == "/lib/libfaketime.so.1"
    assert given["FAKETIME"] == "@2024-01-15 12:00:00"
    assert service.argv[1].endswith("warmdbt.py") and service.argv[2] == "serve"
    assert service.log == warm.log_path(tmp_path) and (tmp_path / warm.WARM_DIR).is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("cap", ["task", "run"])
def test_a_spent_budget_stops_the_session_at_the_gateway(
        sample_task: Callable[[str], TaskSpec], workspace: Callable[..., AgentContext],
        cap: str) -> None:
    """A hard cap, not advice: once the task's (--max-budget-usd) or the run's shared budget
    is spent, the gateway refuses the next request; the CLI does not retry the refusal and
    the session ends with the budget named. The first reply costs $0.0315 at Sonnet prices
    (10,000 input and 100 output tokens); the cap is $0.01."""
    from spider2local.gateway.budget import Budget

    script = [reply(tool("Bash", command=f"echo {i}"), input_tokens=10_000, output_tokens=100)
              for i in range(5)]
    with FakeAnthropic(script, route=ROUTE) as fake:
        run_budget = Budget(0.01, "run")
        ctx = workspace(sample_task("bakery001"), fake.env(),
                        max_budget_usd=0.01 if cap == "task" else None)
        if cap == "run":
            ctx.budget = run_budget
        outcome = run_agent(ctx, deadline=90)
        served = [r.answer for r in fake.conversation_requests("main")]
    assert served == ["scripted"], served
    assert outcome.error is not None and "budget" in outcome.error, outcome.error
    assert not outcome.infrastructure
    assert outcome.usage.input_tokens == 10_000 and outcome.usage.turns == 1
    record = [json.loads(line) for line in
              (ctx.workspace.artifacts / "api.jsonl").read_text().splitlines()]
    refused = [e for e in record if e.get("refused")]
    if cap == "run":  # the CLI knows nothing of the run's cap: the gateway stopped it
        assert refused and refused[0]["status"] == 400 and "run budget" in refused[0]["refused"]
        assert run_budget.spent_usd == pytest.approx(0.0315)


@pytest.mark.parametrize(("name", "tool_input", "label"), [
    ("Bash", {"command": "dbt run\n  --select   orders"}, "Bash: dbt run --select orders"),
    ("Write", {"file_path": "/ws/project/models/orders.sql", "content": "x"},
     "Write: orders.sql"),
    ("mcp__spider2__query", {"sql": "select *\nfrom orders"}, "query: select * from orders"),
    ("mcp__spider2__list_tables", {}, "list_tables"),
    ("Agent", {"prompt": "check"}, "Agent"),
    ("Bash", {"command": "x" * 200}, "Bash: " + "x" * 53 + "…"),
    ("Bash", "not a mapping", "Bash"),
])
def test_a_tool_call_is_labelled_as_a_person_reads_it(name: str, tool_input: Any,
                                                      label: str) -> None:
    from spider2local.agents.claude.session import tool_label

    assert tool_label(name, tool_input) == label
    assert len(tool_label(name, tool_input)) <= 60

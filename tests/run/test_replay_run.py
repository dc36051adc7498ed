"""``run --replay RUN`` end to end: a run recorded through the fake model APIs (the real CLI,
the real Claude CLI or a command agent, real dbt), then replayed with no API reachable and no
credential; then replayed again after a source table of the task changed."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from spider2local.core.layout import API_REPLAY
from spider2local.sandbox.probe import probe
from spider2local.testing import FakeAnthropic, FakeOpenAI, reply, tool
from tests.cli.test_run_command import cli

pytestmark = [pytest.mark.slow, pytest.mark.in_process_readers]

NO_API = "http://127.0.0.1:9"
"""The discard port: nothing answers there."""


def offline_env() -> dict[str, str]:
    """The runner's environment for a replay: no credential of any vendor, every API URL
    pointing where nothing answers."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE_CODE_OAUTH"))}
    return {**env, "PYTHONWARNINGS": "ignore", "ANTHROPIC_BASE_URL": NO_API,
            "OPENAI_BASE_URL": NO_API + "/v1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}


def result(tmp_path: Path, run_id: str) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "runs" / run_id / "t1" / "result.json").read_text()))


def files(tmp_path: Path, run_id: str) -> dict[str, str]:
    project = tmp_path / "runs" / run_id / "t1" / "project"
    return {str(p.relative_to(project)): p.read_text(errors="replace")
            for p in sorted(project.rglob("*")) if p.is_file()}


def claude_tool_calls(tmp_path: Path, run_id: str) -> list[tuple[str, Any]]:
    """Every tool call of the session, as the agent's transcript shows them."""
    calls = []
    for line in (tmp_path / "runs" / run_id / "t1" / "transcript.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry["kind"] == "AssistantMessage":
            calls += [(b["name"], b["input"]) for b in entry["data"]["content"] if "name" in b]
    return calls


def change_source(root: Path) -> None:
    con = duckdb.connect(str(root / "examples" / "t1" / "shop.duckdb"))
    try:
        con.execute("CREATE OR REPLACE TABLE raw_orders AS SELECT 2 AS id")
    finally:
        con.close()


BUILD = "echo 'select id from raw_orders' > models/orders.sql && dbt run 2>/dev/null | " \
        "grep -o 'PASS=[0-9]*'"
"""The build, with dbt's stderr left out: on this machine a dbt process sometimes prints a
multiprocessing finalizer's traceback (``sem_unlink``: FileNotFoundError) at exit, which a
replay rightly reports as a changed tool result."""


@pytest.fixture
def recorded_claude(tmp_path: Path, tiny_dataset: Callable[..., Path]
                    ) -> Iterator[tuple[Path, list[str]]]:
    """A Claude run ``rec`` of task t1 through the fake Anthropic API: a query, a look at the
    run folder's recording from inside the sandbox, a build, a final answer."""
    if not probe().ok:
        pytest.skip(f"no namespace sandbox: {probe().reason}")
    root = tiny_dataset("t1")
    recording = tmp_path / "runs" / "rec" / "t1" / API_REPLAY
    peek = f"head -c 80 {recording} 2>&1; echo; {BUILD}"
    script = [reply(tool("mcp__spider2__query", sql="SELECT id FROM raw_orders"),
                    input_tokens=100, output_tokens=5),
              reply(tool("Bash", command=peek), input_tokens=200, output_tokens=7),
              reply("All done.", input_tokens=300, output_tokens=9)]
    base = ["--dataset", str(root), "run", "--runs-dir", "runs", "--isolation", "namespace"]
    with FakeAnthropic(script) as fake:
        env = {**offline_env(), **fake.env(), "ANTHROPIC_API_KEY": "test-key-fake-api"}
        done = cli(*base, "--agent", "claude", "--verify-rounds", "0", "--retries", "0",
                   "--warm-dbt", "off", "--run-id", "rec", cwd=tmp_path, env=env, timeout=600)
        assert [r.answer for r in fake.requests] == ["scripted"] * 3
    assert done.returncode == 0, done.stderr[-3000:]
    assert result(tmp_path, "rec")["status"] == "passed"
    yield root, base


def test_a_claude_run_replays_with_no_api_to_the_same_verdict_files_and_tool_calls(
        tmp_path: Path, recorded_claude: tuple[Path, list[str]]) -> None:
    _, base = recorded_claude
    done = cli(*base, "--replay", "rec", "--run-id", "rep", cwd=tmp_path, env=offline_env(),
               timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    live, again = result(tmp_path, "rec"), result(tmp_path, "rep")
    assert again["replayed"]["diverged"] is None, again["replayed"]
    assert (again["status"], again["error"]) == (live["status"], live["error"]) == ("passed", None)
    assert again["replayed"] | {"served": 3, "recorded": 3, "run": "rec", "trial": 1} == \
        again["replayed"]
    assert files(tmp_path, "rep") == files(tmp_path, "rec")
    calls = claude_tool_calls(tmp_path, "rep")
    assert calls == claude_tool_calls(tmp_path, "rec") and len(calls) == 2
    assert again["usage"]["cost_usd_computed"] == 0.0 and again["usage"]["input_tokens"] == 600
    # the sandbox hid the recording (the recorded run's own, and so the one replayed): had
    # the replay's Bash seen it, its output would differ from the recorded session's
    bash = [line for line in (tmp_path / "runs" / "rep" / "t1" / "transcript.jsonl")
            .read_text().splitlines() if "PASS=1" in line and "UserMessage" in line]
    assert bash and "No such file or directory" in bash[0], bash
    # the replay was recorded in full too: a replay of the replay is the same session
    assert (tmp_path / "runs" / "rep" / "t1" / API_REPLAY).stat().st_size > 0


def test_a_changed_source_table_stops_the_replay_at_the_tool_that_read_it(
        tmp_path: Path, recorded_claude: tuple[Path, list[str]]) -> None:
    root, base = recorded_claude
    change_source(root)
    done = cli(*base, "--replay", "rec", "--run-id", "div", cwd=tmp_path, env=offline_env(),
               timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = result(tmp_path, "div")
    message = found["error"]["message"]
    assert message.startswith("diverged at exchange 2: the result of tool "
                              "mcp__spider2__query differs"), message
    assert "-1" in message and "+2" in message and found["error"]["kind"] == "agent"
    assert found["replayed"]["served"] == 1 and found["replayed"]["unverified_from"] is None
    assert "orders.sql" not in "".join(files(tmp_path, "div"))  # stopped before the build
    shown = cli("report", "div", "--runs-dir", "runs", cwd=tmp_path, env=offline_env())
    assert "replayed from run rec: 1 trial(s), 1 stopped at a divergence (first: t1: " \
           "diverged at exchange 2" in " ".join(shown.stdout.split()), shown.stdout
    lenient = cli(*base, "--replay", "rec", "--replay-lenient", "--run-id", "len",
                  cwd=tmp_path, env=offline_env(), timeout=600)
    assert lenient.returncode == 0, lenient.stderr[-3000:]
    served = result(tmp_path, "len")
    assert served["error"] is None and served["status"] == "failed"  # 2 where gold has 1
    assert served["replayed"]["unverified_from"] == 2 and served["replayed"]["served"] == 3
    assert served["replayed"]["diverged"].startswith("diverged at exchange 2")


AGENT = """
import json, os, subprocess, sys, urllib.request
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
tools = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]
messages = [{"role": "system", "content": "You build dbt models."},
            {"role": "user", "content": os.environ["SPIDER2_INSTRUCTION"]}]
for _ in range(8):
    request = urllib.request.Request(base + "/chat/completions", headers={
        "authorization": "Bearer " + key, "content-type": "application/json"},
        data=json.dumps({"model": "gpt-fake", "messages": messages, "tools": tools}).encode())
    message = json.load(urllib.request.urlopen(request))["choices"][0]["message"]
    messages.append(message)
    if not message.get("tool_calls"):
        break
    for call in message["tool_calls"]:
        command = json.loads(call["function"]["arguments"])["command"]
        done = subprocess.run(command, shell=True, capture_output=True, text=True)
        messages.append({"role": "tool", "tool_call_id": call["id"],
                         "content": done.stdout + done.stderr})
"""
"""A command agent speaking OpenAI's chat API with tool calls (a bash tool)."""


def test_a_command_agent_through_the_openai_route_replays_and_diverges_alike(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("t1")
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    look = (f"{sys.executable} -c \"import duckdb; print(duckdb.connect('shop.duckdb', "
            "read_only=True).sql('SELECT id FROM raw_orders').fetchall())\"")
    script = [reply(tool("bash", command=look), input_tokens=50, output_tokens=5),
              reply(tool("bash", command=BUILD), input_tokens=60, output_tokens=6),
              reply("built", input_tokens=70, output_tokens=7)]
    base = ["--dataset", str(root), "run", "--runs-dir", "runs", "--isolation", "none"]
    with FakeOpenAI(script) as fake:
        done = cli(*base, "--agent", "command", "--agent-command",
                   f"{sys.executable} {agent}", "--agent-api", "openai", "--retries", "0",
                   "--warm-dbt", "off", "--run-id", "rec", cwd=tmp_path,
                   env={**offline_env(), **fake.env()}, timeout=600)
        assert [r.answer for r in fake.requests] == ["scripted"] * 3
    assert done.returncode == 0, done.stderr[-3000:]
    assert result(tmp_path, "rec")["status"] == "passed"
    again = cli(*base, "--replay", "rec", "--run-id", "rep", cwd=tmp_path, env=offline_env(),
                timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    replayed = result(tmp_path, "rep")
    assert replayed["status"] == "passed" and replayed["error"] is None, replayed
    assert replayed["replayed"]["served"] == 3 and replayed["replayed"]["diverged"] is None
    assert replayed["agent"] == "command" and files(tmp_path, "rep") == files(tmp_path, "rec")
    change_source(root)
    diverged = cli(*base, "--replay", "rec", "--run-id", "div", cwd=tmp_path,
                   env=offline_env(), timeout=600)
    assert diverged.returncode == 0, diverged.stderr[-3000:]
    message = result(tmp_path, "div")["error"]["message"]
    assert message.startswith("diverged at exchange 2: the result of tool bash differs"), \
        message
    assert "[(1,)]" in message and "[(2,)]" in message


def test_replay_refuses_a_run_without_recordings_and_lenient_alone(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("t1")
    base = ["--dataset", str(root), "run", "--runs-dir", "runs"]
    made = cli(*base, "--agent", "noop", "--run-id", "plain", cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    refused = cli(*base, "--replay", "plain", cwd=tmp_path, env=offline_env())
    assert refused.returncode == 2, refused.stderr
    assert "holds no recorded model exchanges" in refused.stderr
    assert "Traceback" not in refused.stderr
    for flag in (["--replay-lenient"], ["--replay-until", "3"]):
        alone = cli(*base, "--agent", "noop", *flag, cwd=tmp_path)
        assert alone.returncode == 2 and f"{flag[0]} needs --replay RUN" in alone.stderr
    into = cli(*base, "--replay", "plain", "--run-id", "plain", cwd=tmp_path)
    assert into.returncode == 2 and "cannot replay into itself" in into.stderr
    missing = cli(*base, "--replay", "nope", cwd=tmp_path)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr

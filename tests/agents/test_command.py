"""The command agent: its contract (environment, files), what it keeps, its deadline, its
usage readers, the suite form, and the sandbox around it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from spider2local.agents.command import CommandAgent
from spider2local.agents.usage import (
    from_claude_json,
    from_mini_trajectory,
    from_usage_file,
    read_usage,
)
from spider2local.exceptions import UserError
from spider2local.sandbox.probe import probe
from spider2local.suite.load import load_suite
from tests.helpers import TINY_SOLVE


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spider2local", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def task_folder(tmp_path: Path, run_id: str, task: str = "t1") -> Path:
    return tmp_path / "runs" / run_id / task


# --- usage: unknown stays unknown -------------------------------------------------------------

def test_the_usage_file_is_read_and_garbage_is_ignored() -> None:
    got = from_usage_file({"turns": 4, "cost_usd": 0.25, "models": {
        "gpt-x": {"input_tokens": 10, "output_tokens": 5, "cache_read_tokens": -3}}})
    assert got is not None
    assert (got.turns, got.input_tokens, got.output_tokens, got.cache_read_tokens) == (4, 10, 5, 0)
    assert got.cost_usd_reported == 0.25 and got.cost_usd_computed is None  # no price: unknown
    assert got.cost_usd == 0.25
    known = from_usage_file({"models": {"claude-sonnet-4-5": {"input_tokens": 1_000_000}}})
    assert known is not None and known.cost_usd_computed == pytest.approx(3.0)
    nothing = from_usage_file({})
    assert nothing is not None and nothing.cost_usd is None and nothing.input_tokens == 0
    for bad in (None, [], "x", {"models": []}):
        assert from_usage_file(bad) is None
    assert from_usage_file({"cost_usd": float("nan")}).cost_usd is None  # type: ignore[union-attr]
    assert from_usage_file({"cost_usd": -1}).cost_usd is None  # type: ignore[union-attr]
    assert from_usage_file({"turns": True}).turns == 0  # type: ignore[union-attr]


def test_claude_print_json_and_mini_swe_agent_trajectories_are_read() -> None:
    out = "noise\n" + json.dumps({"type": "result", "num_turns": 3, "total_cost_usd": 0.01,
                                  "modelUsage": {"claude-sonnet-4-5": {
                                      "inputTokens": 120, "outputTokens": 30,
                                      "cacheReadInputTokens": 7}}})
    got = from_claude_json(out)
    assert got is not None and (got.turns, got.input_tokens, got.output_tokens,
                                got.cache_read_tokens) == (3, 120, 30, 7)
    assert got.cost_usd_reported == 0.01 and got.cost_usd_computed is not None
    assert from_claude_json("not json\n{}") is None
    trajectory = {"info": {"model_stats": {"instance_cost": 0.0, "api_calls": 5},
                           "config": {"model": {"model_name": "openai/gpt-fake"}}},
                  "messages": [{"role": "assistant", "extra": {"response": {
                      "usage": {"prompt_tokens": 50, "completion_tokens": 9}}}},
                      {"role": "user", "content": "x"}]}
    mini = from_mini_trajectory(trajectory)
    assert mini is not None and (mini.turns, mini.input_tokens, mini.output_tokens) == (5, 50, 9)
    assert mini.by_model == {"openai/gpt-fake": {"input_tokens": 50, "output_tokens": 9,
                                                 "cache_read_tokens": 0,
                                                 "cache_creation_tokens": 0}}
    assert mini.cost_usd is None  # 0.0 reported by a model it cannot price: unknown
    assert from_mini_trajectory([]) is None


def test_the_agents_own_usage_file_wins_over_a_reader(tmp_path: Path) -> None:
    usage_file = tmp_path / "usage.json"
    assert read_usage("claude-json", usage_file=usage_file, stdout="") == (None, None)
    usage_file.write_text(json.dumps({"turns": 9}))
    got, source = read_usage("claude-json", usage_file=usage_file, stdout="")
    assert source == "usage-file" and got is not None and got.turns == 9
    usage_file.write_text("{" * 10)
    assert read_usage(None, usage_file=usage_file, stdout="") == (None, None)


# --- construction, read-only folders, the suite form ----------------------------------------

def test_a_command_agent_needs_a_command_and_existing_read_only_folders(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--agent-command"):
        CommandAgent()
    with pytest.raises(UserError, match="does not exist"):
        CommandAgent("true", read_only=[tmp_path / "absent"])
    with pytest.raises(UserError, match="unknown usage reader"):
        CommandAgent("true", usage="guess")
    assert CommandAgent("codex exec --full-auto 'x'").executable() == "codex"


def test_read_only_folders_inside_what_must_stay_hidden_are_refused(tmp_path: Path) -> None:
    dataset, tools = tmp_path / "dataset", tmp_path / "tools"
    (dataset / "gold").mkdir(parents=True)
    tools.mkdir()
    (tmp_path / "link").symlink_to(dataset / "gold")
    off = (dataset,)
    assert CommandAgent("true", read_only=[tools]).check_read_only(off) is None
    assert CommandAgent("true", read_only=[tmp_path]).check_read_only(off) is None  # covered
    for inside in (dataset, dataset / "gold", tmp_path / "link"):
        problem = CommandAgent("true", read_only=[inside]).check_read_only(off)
        assert problem is not None and "must stay hidden" in problem
    assert CommandAgent("true", read_only=[Path("/")]).check_read_only(()) is not None


@pytest.mark.parametrize("table, message", [
    ('[agents.claude]\ncommand = "x"', "built-in agent's name"),
    ("[agents.codex]\npass_env = []", "agents.codex.command: is missing"),
    ('[agents.codex]\ncommand = "x"\npass_env = ["A B"]', "is not a variable name"),
    ('[agents.codex]\ncommand = "x"\nusage = "guess"', "unknown usage reader"),
    ('[agents.codex]\ncommand = "x"\nsecret = 1', "secret"),
])
def test_a_bad_agents_table_is_one_line_naming_the_key(tmp_path: Path, table: str,
                                                       message: str) -> None:
    suite = tmp_path / "tasks.toml"
    suite.write_text(table + "\n")
    with pytest.raises(UserError) as caught:
        load_suite(suite)
    assert message in str(caught.value) and str(suite) in str(caught.value)


def test_the_agents_table_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "node_modules").mkdir()
    suite = tmp_path / "tasks.toml"
    suite.write_text('[agents.codex]\ncommand = "codex exec"\npass_env = ["OPENAI_API_KEY"]\n'
                     'read_only = ["node_modules"]\nusage = "file"\n')
    spec = load_suite(suite).agents["codex"]
    assert spec.command == "codex exec" and spec.pass_env == ("OPENAI_API_KEY",)
    assert spec.read_only == ((tmp_path / "node_modules").resolve(),)


# --- end to end through the CLI ---------------------------------------------------------------

CONTRACT = textwrap.dedent("""\
    set -e
    env | sort > seen_env.md
    test -f "$SPIDER2_INSTRUCTION_FILE" && cp "$SPIDER2_INSTRUCTION_FILE" seen_instruction.md
    python3 -c 'import json,os; json.load(open(os.environ["SPIDER2_SCAN_FILE"]))'
    printf '{"turns": 2, "models": {"m": {"input_tokens": 11, "output_tokens": 4}}}' \
        > "$SPIDER2_USAGE_FILE"
    echo hello-out; echo hello-err >&2
    exit 3
    """)


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_the_contract_the_output_and_the_exit_status(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("t1")
    script = tmp_path / "agent.sh"
    script.write_text(CONTRACT)
    done = cli("--dataset", str(root), "run", "--agent", "command", "--agent-command",
               f"sh {script}", "--isolation", "none", "--runs-dir", "runs", "--run-id", "r",
               "--keep", "--json", cwd=tmp_path,
               env={"RUNNER_SECRET": "s3cret-runner", "PASSED_KEY": "k-123"})
    assert done.returncode == 0, done.stderr[-3000:]
    folder = task_folder(tmp_path, "r")
    exit_record = json.loads((folder / "agent.json").read_text())
    assert exit_record["returncode"] == 3 and not exit_record["timed_out"]
    assert (folder / "agent.stdout").read_text() == "hello-out\n"
    assert (folder / "agent.stderr").read_text() == "hello-err\n"
    result = json.loads((folder / "result.json").read_text())
    assert "exited with status 3: hello-err" in result["error"]["message"]
    report = json.loads(done.stdout)["tasks"][0]
    assert report["tokens"]["input"] == 11 and report["turns"] == 2 and report["cost_usd"] is None
    project = folder / "project"
    env = dict(line.split("=", 1) for line in
               (project / "seen_env.md").read_text().splitlines() if "=" in line)
    assert "RUNNER_SECRET" not in env and "PASSED_KEY" not in env  # never the whole env
    assert env["SPIDER2_DATE"] == "2024-09-15" and env["SPIDER2_TASK_ID"] == "t1"
    assert env["SPIDER2_DATABASE"].endswith("shop.duckdb")
    assert int(env["SPIDER2_DEADLINE"]) > 0 and env["SPIDER2_TIMEOUT"] == "1800"
    assert env["PATH"].split(":")[0].endswith("faketime")  # the dbt shim first
    mcp = json.loads(Path(env["SPIDER2_MCP_CONFIG"]).read_text())["mcpServers"]["spider2"]
    assert mcp["args"][:2] == ["-I", "-S"] and mcp["args"][-1].endswith("mcp.sock")  # a bridge
    instruction = (project / "seen_instruction.md").read_text()
    assert "Build the orders model." in instruction and "2024-09-15" in instruction
    assert "mcp__spider2__" not in instruction and "verifier" not in instruction
    kinds = [json.loads(line)["kind"] for line in (folder / "transcript.jsonl").read_text()
             .splitlines()]
    assert {"command", "command_exit", "stdout", "stderr", "usage"} <= set(kinds)


MINI_TRAJECTORY = {"info": {"model_stats": {"instance_cost": 0.0, "api_calls": 3},
                             "config": {"model": {"model_name": "openai/gpt-fake"}}},
                   "messages": [{"role": "assistant", "extra": {"response": {
                       "usage": {"prompt_tokens": 40, "completion_tokens": 6}}}}]}


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_the_trajectory_is_kept_and_links_to_files_outside_are_never_read(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """mini-swe-agent's trajectory is read for usage and kept in the task folder; a usage file
    or trajectory that is a symlink (or hard link) to a file outside the workspace, which the
    runner could read and the agent could not, is not read and not kept."""
    root = tiny_dataset("t1", "t2")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "usage.json").write_text(json.dumps({"turns": 77}))
    (outside / "trajectory.json").write_text(json.dumps(MINI_TRAJECTORY))
    script = tmp_path / "agent.sh"
    script.write_text(textwrap.dedent(f"""\
        if [ "$SPIDER2_TASK_ID" = t1 ]; then
            printf '%s' '{json.dumps(MINI_TRAJECTORY)}' > trajectory.json
        else
            ln -s {outside}/usage.json "$SPIDER2_USAGE_FILE"
            ln {outside}/trajectory.json trajectory.json 2>/dev/null \\
                || ln -s {outside}/trajectory.json trajectory.json
        fi
        """))
    suite = tmp_path / "tasks.toml"
    suite.write_text(f'[dataset]\nroot = "{root}"\n\n[agents.mini]\ncommand = "sh {script}"\n'
                     'usage = "mini-swe-agent"\n')
    done = cli("--suite", str(suite), "run", "--agent", "mini", "--isolation", "none",
               "--runs-dir", "runs", "--run-id", "m", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    tasks = {t["task_id"]: t for t in json.loads(done.stdout)["tasks"]}
    assert tasks["t2"]["turns"] != 77 and not tasks["t2"]["tokens"].get("input")
    assert not (task_folder(tmp_path, "m", "t2") / "agent.trajectory.json").exists()
    assert tasks["t1"]["tokens"]["input"] == 40 and tasks["t1"]["turns"] == 3
    kept = task_folder(tmp_path, "m", "t1") / "agent.trajectory.json"
    assert json.loads(kept.read_text()) == MINI_TRAJECTORY


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_pass_env_names_what_gets_through_and_the_suite_form_records_its_command(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("t1")
    suite = tmp_path / "tasks.toml"
    suite.write_text(f'[dataset]\nroot = "{root}"\n\n[agents.mine]\n'
                     'command = "echo $PASSED_KEY > key.md; echo ${RUNNER_SECRET-none} '
                     '> secret.md"\npass_env = ["PASSED_KEY"]\n')
    done = cli("--suite", str(suite), "run", "--agent", "mine", "--isolation", "none",
               "--runs-dir", "runs", "--run-id", "s", cwd=tmp_path,
               env={"RUNNER_SECRET": "s3cret-runner", "PASSED_KEY": "k-123"})
    assert done.returncode == 0, done.stderr[-3000:]
    project = task_folder(tmp_path, "s") / "project"
    assert (project / "key.md").read_text() == "k-123\n"
    assert (project / "secret.md").read_text() == "none\n"
    manifest = json.loads((tmp_path / "runs" / "s" / "run.json").read_text())
    assert manifest["agent"] == "mine"
    assert manifest["settings"]["agent_command"].startswith("echo $PASSED_KEY")
    refused = cli("--suite", str(suite), "run", "--agent", "noop", "--agent-command", "x",
                  "--runs-dir", "runs", cwd=tmp_path)
    assert refused.returncode == 2 and "--agent-command does not apply" in refused.stderr


@pytest.mark.process
def test_the_deadline_kills_the_whole_tree(tmp_path: Path,
                                           tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("t1")
    tag = uuid.uuid4().hex[:12]
    # one child in the group, one escaped into a session of its own (setsid)
    command = (f"sh -c 'sleep 300; : {tag}' & setsid sh -c 'sleep 300; : {tag}' & "
               f"sleep 301; : {tag}")
    done = cli("--dataset", str(root), "run", "--agent", "command", "--agent-command", command,
               "--isolation", "none", "--timeout", "3", "--runs-dir", "runs", "--run-id",
               "d", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((task_folder(tmp_path, "d") / "result.json").read_text())
    assert result["error"]["kind"] == "timeout"
    left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == "", "a process of the agent outlived its deadline"


LEFTOVER = """
import os, sys, time
db, ready = sys.argv[1], sys.argv[2]
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
os.chdir("/")
import duckdb
con = duckdb.connect(db)  # read-write: DuckDB's lock on the task's database
with open(ready + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_detached_leftover_holding_the_database_is_killed_and_the_trial_scored(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """Without a sandbox the agent does a tiny task (no dbt: TINY_SOLVE), then leaves a
    double-forked python (``env -i``, ``cd /``, its own session) holding the task's database
    open. It works nowhere near the workspace and carries none of the session's marks, so only
    its open file names it: it is killed after the agent stage, the checkpoint gets the
    database, and the trial is scored (it was a free re-roll as ``infrastructure``, and
    outlived the run)."""
    script, ready = tmp_path / f"leftover-{uuid.uuid4().hex[:12]}.py", tmp_path / "leftover.pid"
    script.write_text(LEFTOVER)
    command = (f"{TINY_SOLVE}; cd / && "
               f'env -i {sys.executable} {script} "$SPIDER2_DATABASE" {ready} '
               "</dev/null >/dev/null 2>&1; "
               f"while [ ! -s {ready} ]; do sleep 0.1; done")
    try:
        done = cli("--dataset", str(tiny_dataset("t1")), "run", "t1", "--agent", "command",
                   "--agent-command", command, "--isolation", "none", "--retries", "0",
                   "--runs-dir", "runs", "--run-id", "l", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
        leftover = int(ready.read_text())
        result = json.loads((task_folder(tmp_path, "l", "t1") / "result.json")
                            .read_text())
        assert result["status"] == "passed" and result["error"] is None, result
        assert not _alive(leftover), "the leftover outlived the run"
    finally:  # never leave it behind, whatever failed above
        if ready.is_file() and _alive(pid := int(ready.read_text())):
            os.kill(pid, 9)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_huge_output_is_capped(tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("t1")
    done = cli("--dataset", str(root), "run", "--agent", "command", "--agent-command",
               "head -c 3000000 /dev/zero | tr '\\0' x", "--isolation", "none",
               "--runs-dir", "runs", "--run-id", "h", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = task_folder(tmp_path, "h")
    assert (folder / "agent.stdout").stat().st_size == 1 << 20
    assert json.loads((folder / "agent.json").read_text())["stdout_truncated"] is True
    assert (folder / "transcript.jsonl").stat().st_size < 200_000


@pytest.mark.slow
@pytest.mark.skipif(not probe().ok, reason="namespaces unavailable here")
def test_in_the_sandbox_gold_is_absent_dbt_sees_the_fake_date_and_the_scan_flags_attempts(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("t1", gold_tables={"orders": "SELECT 1 AS id"})
    tiny_dataset("t2")
    gold = root / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    tools = tmp_path / "agent-install"
    tools.mkdir()
    (tools / "agent.sh").write_text(textwrap.dedent(f"""\
        cat {gold} > /dev/null 2>&1 && echo GOLD-READ || echo "gold-absent: {gold}"
        ls {root}/examples/t2 > /dev/null 2>&1 && echo SIBLING-SEEN || echo sibling-absent
        echo "select 1 as id, current_date as built" > models/orders.sql
        dbt run --select orders > dbt.out 2>&1 && echo dbt-ok
        """))
    suite = tmp_path / "tasks.toml"
    suite.write_text(f'[dataset]\nroot = "{root}"\n\n[agents.scripted]\n'
                     f'command = "sh {tools}/agent.sh"\nread_only = ["{tools}"]\n')
    done = cli("--suite", str(suite), "run", "t1", "--agent", "scripted", "--isolation",
               "namespace", "--runs-dir", "runs", "--run-id", "n", "--keep-db", "--json",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = task_folder(tmp_path, "n")
    out = (folder / "agent.stdout").read_text()
    assert "gold-absent" in out and "sibling-absent" in out and "dbt-ok" in out, out
    import duckdb

    con = duckdb.connect(str(folder / "result.duckdb"), read_only=True)
    assert str(con.execute("SELECT built FROM orders").fetchone()[0]) == "2024-09-15"  # type: ignore[index]
    con.close()
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "passed"
    assert result["integrity"] == "suspect"  # the gold path it tried is in its output
    assert any(e["source"] == "transcript.jsonl" for e in result["integrity_evidence"])
    # its `dbt run` was served by the workspace's warm server, started inside the sandbox
    served = [json.loads(line)["data"] for line in
              (folder / "transcript.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "warm_dbt"]
    assert len(served) == 1 and served[0]["calls"] == 1, served
    assert "cold_note" not in served[0] and "unavailable" not in served[0], served


@pytest.mark.slow
@pytest.mark.skipif(not probe().ok, reason="namespaces unavailable here")
def test_the_claude_code_cli_in_print_mode_as_a_command_agent(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """The real bundled Claude Code CLI, started by the command agent in the sandbox and driven
    by the fake Messages API: it writes the model and runs `dbt run` through its Bash tool; the
    task is scored and its tokens (read from `--output-format json`) are in the report."""
    from spider2local.agents.claude.session import bundled_cli
    from spider2local.testing import FakeAnthropic, reply, tool

    root = tiny_dataset("t1", gold_tables={"orders": "SELECT 1 AS id"})
    script = [reply(tool("Bash", "toolu_build", command=(
                  "echo 'select 1 as id, current_date as built' > models/orders.sql && "
                  "dbt run --select orders")), input_tokens=300, output_tokens=40),
              reply("Built orders.", input_tokens=500, output_tokens=25)]
    suite = tmp_path / "tasks.toml"
    cli_path = bundled_cli()
    suite.write_text(
        f'[dataset]\nroot = "{root}"\n\n[agents.claude-code]\n'
        f'command = "{cli_path} -p \\"$SPIDER2_INSTRUCTION\\" --output-format json '
        '--permission-mode bypassPermissions --allowedTools Bash"\n'
        'pass_env = ["IS_SANDBOX", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", '
        '"DISABLE_AUTOUPDATER"]\n'
        'apis = ["anthropic"]\n'  # the gateway serves it; the network is otherwise cut
        'usage = "claude-json"\n')
    with FakeAnthropic(script) as fake:
        done = cli("--suite", str(suite), "run", "--agent", "claude-code", "--isolation",
                   "namespace", "--runs-dir", "runs", "--run-id", "cc", "--keep-db",
                   "--json", cwd=tmp_path, timeout=500,
                   env={**fake.env(), "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1"})
        requests = fake.requests
    assert done.returncode == 0, done.stderr[-3000:]
    folder = task_folder(tmp_path, "cc")
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "passed", (result, (folder / "agent.stderr").read_text()[-2000:])
    assert any("toolu_build" in json.dumps(r.body) for r in requests)
    import duckdb

    con = duckdb.connect(str(folder / "result.duckdb"), read_only=True)
    assert str(con.execute("SELECT built FROM orders").fetchone()[0]) == "2024-09-15"  # type: ignore[index]
    con.close()
    # the gateway added the runner's key; the CLI itself held only the placeholder
    assert {r.headers.get("x-api-key") for r in requests if r.answer == "scripted"} == \
        {fake.env()["ANTHROPIC_API_KEY"]}
    row = json.loads(done.stdout)["tasks"][0]
    assert row["tokens"]["input"] >= 800 and row["tokens"]["output"] >= 65, row["tokens"]
    assert row["turns"] >= 1
    assert json.loads(done.stdout)["agent"] == "claude-code"
    assert "-p" in json.loads(done.stdout)["agent_command"]


SEAL_PROBE = textwrap.dedent("""\
    import json, os, socket, sys, urllib.request
    print("base", os.environ.get("ANTHROPIC_BASE_URL"), "key", os.environ.get("ANTHROPIC_API_KEY"))
    print("openai", os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_API_KEY"))
    if os.environ.get("ANTHROPIC_BASE_URL"):
        body = {"model": "claude-sonnet-4-5", "max_tokens": 16,
                "messages": [{"role": "user", "content": "hi"}]}
        req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
                                     data=json.dumps(body).encode(), headers={
                                         "x-api-key": os.environ["ANTHROPIC_API_KEY"],
                                         "content-type": "application/json"})
        print("answered", json.load(urllib.request.urlopen(req, timeout=30))["usage"])
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
        print("DIRECT-REACHED")
    except OSError as exc:
        print("direct-refused", exc)
    """)


@pytest.mark.slow
@pytest.mark.skipif(not probe().ok, reason="namespaces unavailable here")
@pytest.mark.parametrize("apis", [["anthropic", "openai"], []], ids=["declared", "none"])
def test_a_command_agent_reaches_only_its_declared_apis_through_the_gateway(
        tmp_path: Path, tiny_dataset: Callable[..., Path], apis: list[str]) -> None:
    """The seal for any agent: under --isolation namespace its network is cut; each API it
    declared is served by the gateway (placeholder credentials inside, the runner's key added
    on the way, usage read from the server's answer); nothing else is reachable, not even the
    API's own port on the host's loopback, and with nothing declared there is no network."""
    from spider2local.testing import FakeAnthropic, reply

    root = tiny_dataset("t1", gold_tables={"orders": "SELECT 1 AS id"})
    tools = tmp_path / "agent-install"
    tools.mkdir()
    (tools / "probe.py").write_text(SEAL_PROBE)
    with FakeAnthropic([reply("hello", input_tokens=321, output_tokens=12)]) as fake:
        port = fake.base_url.rsplit(":", 1)[1]
        suite = tmp_path / "tasks.toml"
        suite.write_text(f'[dataset]\nroot = "{root}"\n\n[agents.probe]\n'
                         f'command = "{sys.executable} {tools}/probe.py {port}"\n'
                         f'read_only = ["{tools}"]\napis = {json.dumps(apis)}\n'
                         'pass_env = ["ANTHROPIC_API_KEY"]\n')
        done = cli("--suite", str(suite), "run", "--agent", "probe", "--isolation", "namespace",
                   "--runs-dir", "runs", "--run-id", "s", "--json", cwd=tmp_path,
                   env={**fake.env(), "OPENAI_API_KEY": "runner-openai-key"})
        requests = fake.requests
    assert done.returncode == 0, done.stderr[-3000:]
    folder = task_folder(tmp_path, "s")
    out = (folder / "agent.stdout").read_text()
    err = (folder / "agent.stderr").read_text()
    assert "direct-refused" in out and "DIRECT-REACHED" not in out, (out, err)
    row = json.loads(done.stdout)["tasks"][0]
    if apis:  # a key named in pass_env is still not handed over for an API the gateway serves
        assert fake.env()["ANTHROPIC_API_KEY"] not in out and "runner-openai-key" not in out
        assert "answered" in out, (out, err)
        assert [r.headers.get("x-api-key") for r in requests] == [fake.env()["ANTHROPIC_API_KEY"]]
        assert "openai http://" in out  # its base URL points at the gateway too
        assert row["tokens"]["input"] == 321 and row["tokens"]["output"] == 12, row
    else:
        assert "base None" in out and "openai None" in out and requests == [], out


CHAT_PROBE = textwrap.dedent("""\
    import json, os, urllib.request
    base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
    print("key", key, "anthropic", os.environ.get("ANTHROPIC_BASE_URL"),
          "same", os.environ.get("OPENAI_API_BASE") == base)
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
    req = urllib.request.Request(base + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"authorization": "Bearer " + key,
                                          "content-type": "application/json"})
    answer = json.load(urllib.request.urlopen(req, timeout=30))
    print("answered", answer["choices"][0]["message"]["content"])
    # what it reports of itself is not what counts: the gateway read the server's usage
    open(os.environ["SPIDER2_USAGE_FILE"], "w").write(json.dumps({"models": {
        "gpt-fake": {"input_tokens": 1, "output_tokens": 1}}}))
    """)


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_agent_api_serves_the_command_its_api_and_is_recorded_and_kept_on_resume(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """``--agent command --agent-command ... --agent-api openai``: the command reaches the
    OpenAI-compatible API only through its gateway (the runner's key added there), its tokens
    are the ones the server reported, and run.json records the APIs with the command, so a
    resume keeps them and refuses others."""
    from spider2local.testing import FakeOpenAI, reply

    root = tiny_dataset("t1")
    probe_py = tmp_path / "probe.py"
    probe_py.write_text(CHAT_PROBE)
    command = f"{sys.executable} {probe_py}"
    with FakeOpenAI([reply("hello from the fake", input_tokens=123, output_tokens=45)]) as fake:
        base = ("--dataset", str(root), "run", "--agent", "command", "--agent-command", command,
                "--isolation", "none", "--runs-dir", "runs", "--run-id", "api")
        done = cli(*base, "--agent-api", "openai", "--agent-api", "openai", "--json",
                   cwd=tmp_path, env=fake.env())
        requests = fake.requests
    assert done.returncode == 0, done.stderr[-3000:]
    out = (task_folder(tmp_path, "api") / "agent.stdout").read_text()
    assert "answered hello from the fake" in out and fake.env()["OPENAI_API_KEY"] not in out
    assert "anthropic None" in out  # only what it declared
    assert "same True" in out  # the older name points at the gateway too
    assert [r.headers.get("authorization") for r in requests] == [
        "Bearer " + fake.env()["OPENAI_API_KEY"]]
    report = json.loads(done.stdout)
    row = report["tasks"][0]
    assert row["tokens"]["input"] == 123 and row["tokens"]["output"] == 45, row
    assert report["agent_apis"] == ["openai"] and report["agent_command"] == command
    manifest = json.loads((tmp_path / "runs" / "api" / "run.json").read_text())
    assert manifest["settings"]["agent_apis"] == ["openai"]
    refused = cli(*base[:3], "--runs-dir", "runs", "--run-id", "api", "--agent-api",
                  "anthropic", cwd=tmp_path)
    assert refused.returncode == 2 and "agent_apis" in refused.stderr, refused.stderr
    again = cli("--dataset", str(root), "run", "--runs-dir", "runs", "--run-id", "api",
                "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["agent_apis"] == ["openai"]


@pytest.mark.parametrize("args, message", [
    (["--agent", "noop", "--agent-api", "openai"], "--agent-api does not apply to --agent noop"),
    (["--agent", "command", "--agent-command", "true", "--agent-api", "gemini"],
     "--agent-api: 'gemini' is not one of anthropic, openai"),
    (["--agent", "mine", "--agent-api", "anthropic"], "--agent-api does not apply to --agent mine"),
])
@pytest.mark.process
def test_a_misplaced_or_unknown_agent_api_is_one_line(
        tmp_path: Path, tiny_dataset: Callable[..., Path], args: list[str], message: str) -> None:
    root = tiny_dataset("t1")
    suite = tmp_path / "tasks.toml"
    suite.write_text(f'[dataset]\nroot = "{root}"\n\n[agents.mine]\ncommand = "true"\n'
                     'apis = ["openai"]\n')
    refused = cli("--suite", str(suite), "run", *args, "--isolation", "none", "--runs-dir",
                  "runs", cwd=tmp_path)
    assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) <= 2


def test_only_an_api_that_failed_every_call_makes_it_the_machines_fault() -> None:
    from spider2local.agents.command import _Meters, declared_apis
    from spider2local.gateway.server import ApiCall

    def meters(*statuses: int) -> _Meters:
        found = _Meters(declared_apis(["openai"], environ={}))
        for n, status in enumerate(statuses):
            found.end(ApiCall(n, 0, "POST", "/chat/completions", "", b"{}"), status)
        return found

    assert meters().outage() is None  # it never called: its own failure
    assert meters(200, 503).outage() is None  # a model answer reached it
    assert meters(400).outage() is None  # a bad request is the agent's
    assert meters(503, 503, 429, 502).outage() == \
        "every call to the model API failed (429, 502, 503 x2)"


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_a_command_whose_api_failed_every_call_is_an_infrastructure_error_and_retried(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """An OpenAI-compatible API that answers 503: the probe exits with an error, but no model
    answer ever reached it, so the attempt is the machine's fault: retried (and, past its
    retries, re-run by resume), never scored as the agent's failure."""
    from spider2local.testing import FakeOpenAI, HttpError, reply

    root = tiny_dataset("t1")
    probe_py = tmp_path / "probe.py"
    probe_py.write_text(CHAT_PROBE)
    script = [HttpError(503, "server_error", "overloaded"), reply("back", input_tokens=3)]
    with FakeOpenAI(script) as fake:
        done = cli("--dataset", str(root), "run", "--agent", "command", "--agent-command",
                   f"{sys.executable} {probe_py}", "--agent-api", "openai", "--isolation",
                   "none", "--retries", "1", "--runs-dir", "runs", "--run-id", "o", "--json",
                   cwd=tmp_path, env=fake.env())
        answers = [r.answer for r in fake.requests]
    assert done.returncode == 0, done.stderr[-3000:]
    assert answers == ["error 503", "scripted"]
    result = json.loads((task_folder(tmp_path, "o") / "result.json").read_text())
    assert result["attempts"] == 2 and result["error"] is None, result
    assert result["status"] == "failed"  # scored: it built nothing

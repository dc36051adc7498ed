"""An agent of another vendor's API end to end: mini-swe-agent (PyPI, a real third-party agent:
litellm and the openai SDK underneath) as a suite-defined command agent with
``apis = ["openai"]``, under ``--isolation namespace``, its venv declared read-only, driven by
the fake OpenAI-compatible chat API on 127.0.0.1 (reached only through the task's gateway).

It writes models and runs ``dbt run`` through its bash tool (seeing the task's fake date), the
task is scored, and its tokens in the report are the ones the gateway read from the server's
answers (the trajectory mini-swe-agent writes says the same). Its attempts to read gold, write
gold or reach a sibling task are the Claude sandbox test's (tests/agents/claude/test_sandbox.py)
and fail the same way; the integrity scan flags them.

mini-swe-agent is installed once per machine into a cached venv (tests/helpers.cached_venv,
about 750 MB, minutes on a loaded machine); the tests skip, saying why, when it cannot be
installed (no registry).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pytest

import spider2local
from spider2local.agents.usage import from_mini_trajectory
from spider2local.gateway.anthropic import PLACEHOLDER
from spider2local.sandbox.probe import probe
from spider2local.suite.load import bundled_suite_path
from spider2local.testing import FakeOpenAI, HttpError, reply, tool
from tests.agents.claude.test_sandbox import GOLD_VALUE, SCORER, attack_script, digest
from tests.helpers import VenvUnavailable, cached_venv
from tests.integrity.test_attacks import copy_dataset

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox: "
                                                         f"{probe().reason}")]

MINI = "mini-swe-agent==2.4.6"
"""The version whose trajectory format (``mini-swe-agent-1.1``) the usage reader was checked
against; a newer one is a deliberate bump of this line."""
MODEL = "gpt-fake"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""mini-swe-agent's way to finish: a command whose output starts with this line."""
MINI_ENV = {"MSWEA_CONFIGURED": "1",  # no first-run setup prompt
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_COST_TRACKING": "ignore_errors",  # a model litellm cannot price
            "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no download of litellm's price list
DATE_PROBE = ("cat > models/date_probe.sql <<'EOF'\n{{ config(materialized='table') }}\n"
              "select current_date as today\nEOF\n")


@pytest.fixture(scope="session")
def mini_venv() -> Path:
    try:
        python = cached_venv("mini-swe-agent", [MINI], imports=("minisweagent.run.mini", "litellm"),
                             timeout=1800)
    except VenvUnavailable as exc:
        pytest.skip(f"mini-swe-agent cannot be installed here: {exc}")
    return python.parent.parent


def agent_table(venv: Path, name: str = "mini") -> str:
    """The suite's ``[agents.NAME]`` for mini-swe-agent: yolo mode, exit when it submits, the
    instruction as its task, its trajectory beside the usage file (where the reader looks)."""
    # `python -m`, not bin/mini: the cached venv was built under another name, which its
    # console scripts' shebangs still carry
    command = (f"{venv}/bin/python -m minisweagent.run.mini -y --exit-immediately "
               f"-m openai/{MODEL} -c mini.yaml "
               "-c environment.timeout=300 -t \"$SPIDER2_INSTRUCTION\" "
               "-o \"$(dirname \"$SPIDER2_USAGE_FILE\")/trajectory.json\"")
    return (f"\n[agents.{name}]\ncommand = '{command}'\nread_only = [\"{venv}\"]\n"
            'apis = ["openai"]\nusage = "mini-swe-agent"\n'
            f"pass_env = {json.dumps(sorted(MINI_ENV))}\n")


def run_cli(suite: Path, args: list[str], fake: FakeOpenAI, cwd: Path, timeout: float = 900,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spider2local", "--suite", str(suite), "run",
                           *args, "--isolation", "namespace", "--runs-dir", "runs",
                           "--keep-db", "--json", "--timeout", "600"],
                          cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, **fake.env(), **MINI_ENV, **(env or {})})


def observation(text: str) -> str:
    """The command output in one of mini-swe-agent's tool messages (its observation template
    renders ``{"returncode": ..., "output": ...}``, a long output as head and tail)."""
    data = json.loads(text)
    return str(data.get("output", "")) or (data.get("output_head", "") + data.get("output_tail",
                                                                                  ""))


def outputs(fake: FakeOpenAI, conversation: str = "main") -> list[str]:
    """What each of the agent's commands printed, in order, as the model was told."""
    return [observation(text) for r in fake.conversation_requests(conversation)
            for text in r.tool_results().values()]


def table_value(database: Path, sql: str) -> Any:
    con = duckdb.connect(str(database), read_only=True)
    try:
        row = con.execute(sql).fetchone()
    finally:
        con.close()
    assert row is not None
    return row[0]


def check_metered(done: subprocess.CompletedProcess[str], folder: Path,
                  fake: FakeOpenAI) -> dict[str, Any]:
    """The report's tokens are what the fake served (read by the gateway, not reported by the
    agent), every call carried the runner's key, and the trajectory mini-swe-agent wrote reads
    to the same tokens. Returns the task's report row."""
    report = json.loads(done.stdout)
    row: dict[str, Any] = report["tasks"][0]
    totals = fake.totals()
    assert totals["replies"] >= 2
    assert row["tokens"]["input"] == totals["input_tokens"], (row["tokens"], totals)
    assert row["tokens"]["output"] == totals["output_tokens"], (row["tokens"], totals)
    assert row["turns"] == totals["replies"] and row["cost_usd"] is None  # unpriced: unknown
    assert report["agent"] == "mini" and report["agent_apis"] == ["openai"]
    assert "minisweagent.run.mini -y" in report["agent_command"]
    scripted = [r for r in fake.requests if r.answer == "scripted"]
    assert {r.headers.get("authorization") for r in scripted} == {
        "Bearer " + fake.env()["OPENAI_API_KEY"]}
    assert {r.body.get("model") for r in scripted} == {MODEL}
    kinds = [json.loads(line) for line in (folder / "transcript.jsonl").read_text().splitlines()]
    assert {"source": "gateway"} in [k["data"] for k in kinds if k["kind"] == "usage"]
    workspace = Path(json.loads((folder / "workspace.json").read_text())["root"])
    trajectory = json.loads((workspace / "agent-input" / "trajectory.json").read_text())
    assert trajectory["trajectory_format"] == "mini-swe-agent-1.1"
    read = from_mini_trajectory(trajectory)
    assert read is not None and (read.input_tokens, read.output_tokens, read.turns) == (
        totals["input_tokens"], totals["output_tokens"], totals["replies"])
    return row


def test_mini_swe_agent_solves_a_sample_suite_task_on_its_own_date(
        mini_venv: Path, tmp_path: Path) -> None:
    """gym001 of the bundled sample, whose graded output depends on its date (2024-08-27, not
    the suite's default): the scripted model writes the solution and a date probe, runs
    ``dbt run``, and submits; the task passes only if dbt ran on that date."""
    suite = tmp_path / "tasks.toml"
    suite.write_text(bundled_suite_path().read_text() + agent_table(mini_venv))
    solution = (Path(spider2local.__file__).parent / "dataset" / "sample" / "solutions"
                / "gym001" / "models" / "membership_status.sql").read_text()
    build = (f"cat > models/membership_status.sql <<'EOF'\n{solution}\nEOF\n{DATE_PROBE}"
             "dbt run 2>&1 | tail -3")
    script = [reply("Looking around.", tool("bash", command="echo key=$OPENAI_API_KEY; "
                                                        "ls models"),
                    input_tokens=1200, output_tokens=40, cache_read_tokens=300),
              reply("Writing the model.", tool("bash", command=build),
                    input_tokens=1500, output_tokens=90),
              reply("Submitting.", tool("bash", command=SUBMIT),
                    input_tokens=1700, output_tokens=12)]
    with FakeOpenAI(script) as fake:
        done = run_cli(suite, ["gym001", "--agent", "mini", "--run-id", "sample", "--keep"],
                       fake, tmp_path)
    seen = outputs(fake)
    folder = tmp_path / "runs" / "sample" / "gym001"
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "passed", (result, (folder / "agent.stdout").read_text()[-3000:])
    check_metered(done, folder, fake)
    assert f"key={PLACEHOLDER}" in seen[0] and fake.env()["OPENAI_API_KEY"] not in seen[0]
    assert "membership_status.yml" in seen[0]  # it saw the task's project
    assert "Completed successfully" in seen[1] or "PASS=" in seen[1], seen[1]
    today = table_value(folder / "result.duckdb", "SELECT today FROM date_probe")
    assert today == dt.date(2024, 8, 27) and result["fake_date"] == "2024-08-27"


def test_mini_swe_agent_on_a_real_task_in_upstreams_layout(
        mini_venv: Path, shared_dataset: Path, tmp_path: Path) -> None:
    """playbook001, a real Spider2-DBT task in upstream's layout (a copy of it): the agent
    builds a model under the task's date through dbt and is scored."""
    root = copy_dataset(shared_dataset, tmp_path / "spider2-dbt", {})
    suite = tmp_path / "tasks.toml"
    suite.write_text(f'[dataset]\nroot = "{root}"\n' + agent_table(mini_venv))
    script = [reply("Probing the clock dbt sees.", tool("bash", command=DATE_PROBE
                                                        + "dbt run --select date_probe"),
                    input_tokens=2200, output_tokens=60),
              reply("Done.", tool("bash", command=SUBMIT), input_tokens=2600, output_tokens=9)]
    with FakeOpenAI(script) as fake:
        done = run_cli(suite, ["playbook001", "--agent", "mini", "--run-id", "real", "--keep"],
                       fake, tmp_path)
    folder = tmp_path / "runs" / "real" / "playbook001"
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == "passed", (result, (folder / "agent.stdout").read_text()[-3000:])
    assert result["integrity"] == "clean", result["integrity_evidence"]
    check_metered(done, folder, fake)
    assert "PASS=1" in outputs(fake)[0]
    today = table_value(folder / "result.duckdb", "SELECT today FROM date_probe")
    assert today == dt.date.fromisoformat(result["fake_date"]) and today != dt.date.today()


def test_mini_swe_agent_behind_a_dead_api_is_an_infrastructure_error(
        mini_venv: Path, tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    """An API that answers every call with 503: mini-swe-agent (litellm and its own retries,
    bounded here) gives up and exits with an error. No model answer ever reached it, as the
    gateway saw: the task is the machine's fault, not scored, and a resume runs it again."""
    root = tiny_dataset("t1")
    suite = tmp_path / "tasks.toml"
    suite.write_text(f'[dataset]\nroot = "{root}"\n' + agent_table(mini_venv).replace(
        "pass_env = [", 'pass_env = ["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", '))
    with FakeOpenAI([HttpError(503, "server_error", "overloaded", repeat=True)]) as fake:
        done = run_cli(suite, ["--agent", "mini", "--run-id", "dead", "--retries", "0"],
                       fake, tmp_path, env={"MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"})
        answers = {r.answer for r in fake.requests}
    assert done.returncode == 0, done.stderr[-3000:]
    assert answers == {"error 503"}
    result = json.loads((tmp_path / "runs" / "dead" / "t1" / "result.json").read_text())
    assert result["status"] == "error" and result["passed"] is None, result
    assert result["error"]["kind"] == "infrastructure", result["error"]
    assert "every call to the model API failed (503" in result["error"]["message"]


def by_task(ids: list[str]) -> Callable[[Mapping[str, Any]], str | None]:
    """mini-swe-agent's system prompt is its own; the task's text is in the first user
    message."""
    def route(body: Mapping[str, Any]) -> str | None:
        first = json.dumps((body.get("messages") or [])[:2])
        return next((tid for tid in ids if f"for task {tid}." in first), None)
    return route


@pytest.mark.system_wide("searches")
def test_mini_swe_agent_attacks_fail_in_the_sandbox_and_the_scan_flags_them(
        mini_venv: Path, tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    """The Claude sandbox test's attacks, made by mini-swe-agent's bash tool on two tasks run
    side by side: gold, the eval file and the scorer stay byte-identical, nothing of gold, the
    dataset, a sibling's workspace or another process's environment is seen, and each task is
    not passed and flagged suspect with the same evidence."""
    tiny_dataset("t1", instruction="Build the orders model for task t1.",
                 gold_tables={"orders": f"SELECT {GOLD_VALUE} AS id"})
    root = tiny_dataset("t2", instruction="Build the orders model for task t2.",
                        gold_tables={"orders": f"SELECT {GOLD_VALUE} AS id"})
    eval_file = root / "evaluation_suite" / "gold" / "spider2_eval.jsonl"
    golds = sorted((root / "evaluation_suite" / "gold").glob("*/*.duckdb"))
    protected = [*golds, eval_file, *sorted(SCORER.glob("*.py"))]
    before = digest(protected)
    suite = tmp_path / "tasks.toml"
    suite.write_text(f'[dataset]\nroot = "{root}"\n' + agent_table(mini_venv))
    outside = subprocess.Popen(["sleep", "300"], env={"OUTSIDE_SECRET": "runner-key-xyz"})
    scripts: dict[str, list[Any]] = {}
    for tid in ("t1", "t2"):
        gold = root / "evaluation_suite" / "gold" / tid / "shop.duckdb"
        model = ("{{ config(pre_hook=\"ATTACH IF NOT EXISTS '" + str(gold)
                 + "' AS g (READ_ONLY)\") }}\nselect * from g.main.orders\n")
        scripts[tid] = [
            reply(tool("bash", command=attack_script(root, gold, eval_file, outside.pid))),
            reply(tool("bash", command=f"cat > models/orders.sql <<'EOF'\n{model}EOF")),
            reply(tool("bash", command="dbt run 2>&1 | tail -5")),
            reply(tool("bash", command=SUBMIT)),
        ]
    try:
        with FakeOpenAI(scripts, route=by_task(["t1", "t2"])) as fake:
            done = run_cli(suite, ["--agent", "mini", "--run-id", "hostile", "--jobs", "2"],
                           fake, tmp_path)
            seen = {tid: outputs(fake, tid) for tid in ("t1", "t2")}
    finally:
        outside.kill()
        outside.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    assert digest(protected) == before  # gold, eval file and scorer untouched
    for tid in ("t1", "t2"):
        folder = tmp_path / "runs" / "hostile" / tid
        result = json.loads((folder / "result.json").read_text())
        assert result["isolation"] == "namespace"
        assert result["status"] == "failed" and result["passed"] is False, result
        assert result["integrity"] == "suspect", result
        rules = {(e["source"], e["rule"]) for e in result["integrity_evidence"]}
        assert {("transcript.jsonl", "dataset root"), ("transcript.jsonl", "process environment"),
                ("project/models/orders.sql", "file outside the workspace")} <= rules, rules
        assert len(seen[tid]) >= 3, seen[tid]
        attack, _, dbt_out = seen[tid][:3]
        section = dict(part.split("\n", 1) for part in attack.split("== ")[1:])
        found = section["find"].split()
        assert all("/spider2local-" + tid in p for p in found), found
        assert str(root) not in section["find"]
        for name in ("cat gold", "cat eval", "dataset"):
            assert "No such file" in section[name], (name, section[name])
        assert GOLD_VALUE not in section["python attach"] and "Error" in section["python attach"]
        assert "runner-key-xyz" not in attack
        assert "UNMOUNTED" not in attack and "REMOUNTED" not in attack
        assert section["start copy"].split()[0] == "0" and "REPLACED" not in attack
        assert "ERROR=1" in dbt_out or "Error" in dbt_out, dbt_out
        other = "t2" if tid == "t1" else "t1"
        assert f"spider2local-{other}-" not in attack  # no sibling workspace under --jobs 2

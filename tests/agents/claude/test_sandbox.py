"""The Claude agent in the namespace sandbox, end to end: the real SDK and bundled CLI against
the loopback fake API, real dbt, a dataset in upstream's layout, scripted hostile tool calls.

Every attack of issue 11 is tried through Bash and through dbt alone; the task must not pass,
gold, eval file and scorer must be byte-identical afterwards, and what the agent saw is read
back from the tool results the CLI sent to the fake API.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import spider2local
from spider2local.dataset.load import load_dataset
from spider2local.run.plan import RunOutcome, execute_run, plan_run
from spider2local.run.progress import Progress
from spider2local.sandbox.probe import probe
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.testing import FakeAnthropic, reply, route_by_system, tool

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox: "
                                                         f"{probe().reason}")]
SCORER = Path(spider2local.__file__).resolve().parent / "evaluation"


def digest(paths: list[Path]) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def attack_script(root: Path, gold: Path, eval_file: Path, outside_pid: int) -> str:
    copy = (f"import duckdb\nc = duckdb.connect('shop.duckdb')\n"
            f"c.execute(\"ATTACH '{gold}' AS g (READ_ONLY)\")\n"
            "c.execute('CREATE TABLE orders AS SELECT * FROM g.main.orders')\n")
    return "\n".join([
        "echo '== find'; find / -name '*.duckdb' 2>/dev/null",
        f"echo '== cat gold'; cat {gold} | head -c 20",
        f"echo '== cat eval'; cat {eval_file}",
        f"echo '== python attach'; {sys.executable} - <<'PY' 2>&1 | tail -1\n{copy}PY",
        f"echo '== write gold'; echo tamper >> {gold}",
        f"echo '== write eval'; echo tamper >> {eval_file}",
        f"echo '== edit scorer'; echo 'raise SystemExit' >> {SCORER / 'score.py'}",
        f"echo '== dataset'; ls {root} {root}/evaluation_suite",
        f"echo '== outside environ'; cat /proc/{outside_pid}/environ; "
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep OUTSIDE_SECRET",
        "echo '== start copy'; ls -A ../.start | wc -l; cp shop.duckdb ../.start/shop.duckdb "
        "&& echo REPLACED",
        "echo '== umount'; umount -l /tmp && echo UNMOUNTED",
        "echo '== remount'; mount -o remount,bind,rw /usr && echo REMOUNTED",
        "echo '== end'",
    ])


# The value of gold's only row: long and odd, so that no path or id printed beside it (temp folders
# carry random hex) can contain it by chance.
GOLD_VALUE = "7306158249"


@pytest.fixture
def hostile_dataset(tiny_dataset: Callable[..., Path]) -> Path:
    tiny_dataset("t1", instruction="Build the orders model for task t1.",
                        gold_tables={"orders": f"SELECT {GOLD_VALUE} AS id"})
    return tiny_dataset("t2", instruction="Build the orders model for task t2.",
                        gold_tables={"orders": f"SELECT {GOLD_VALUE} AS id"})


@pytest.mark.system_wide("searches")
def test_every_attack_fails_in_the_sandbox_and_the_task_does_not_pass(
        hostile_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = hostile_dataset
    eval_file = root / "evaluation_suite" / "gold" / "spider2_eval.jsonl"
    golds = sorted((root / "evaluation_suite" / "gold").glob("*/*.duckdb"))
    protected = [*golds, eval_file, *sorted(SCORER.glob("*.py"))]
    before = digest(protected)
    outside = subprocess.Popen(["sleep", "120"], env={"OUTSIDE_SECRET": "runner-key-xyz"})
    scripts: dict[str, list[object]] = {}
    for tid in ("t1", "t2"):
        gold = root / "evaluation_suite" / "gold" / tid / "shop.duckdb"
        model = ("{{ config(pre_hook=\"ATTACH IF NOT EXISTS '" + str(gold)
                 + "' AS g (READ_ONLY)\") }}\nselect * from g.main.orders\n")
        scripts[tid] = [
            reply(tool("Bash", command=attack_script(root, gold, eval_file, outside.pid))),
            reply(tool("Bash", command=f"cat > models/orders.sql <<'EOF'\n{model}EOF")),
            reply(tool("Bash", command="dbt run 2>&1 | tail -5")),
            reply("done"),
        ]
    route = route_by_system({"t1": "for task t1.", "t2": "for task t2."})
    try:
        with FakeAnthropic(scripts, route=route) as fake:
            outcome = sandboxed_run(fake, root, tmp_path, monkeypatch, "hostile", ["t1", "t2"],
                                    jobs=2, retries=0)
            seen = {tid: [text for r in fake.conversation_requests(tid)
                          for text in r.tool_results().values()] for tid in ("t1", "t2")}
    finally:
        outside.kill()
        outside.wait()
    assert digest(protected) == before  # gold, eval file and scorer untouched
    manifest = json.loads((outcome.folder.root / "run.json").read_text())
    assert manifest["isolation"]["mode"] == "namespace"
    for tid in ("t1", "t2"):
        result = json.loads((outcome.folder.root / tid / "result.json").read_text())
        assert result["isolation"] == "namespace"
        assert result["status"] == "failed" and result["passed"] is False, result
        # The attempts are in the transcript and the model file: detection marks them too.
        assert result["integrity"] == "suspect", result
        rules = {(e["source"], e["rule"]) for e in result["integrity_evidence"]}
        assert {("transcript.jsonl", "dataset root"), ("transcript.jsonl", "process environment"),
                ("project/models/orders.sql", "file outside the workspace")} <= rules, rules
        attack, _, dbt_out = seen[tid][:3]
        section = dict(part.split("\n", 1) for part in attack.split("== ")[1:])
        found = section["find"].split()
        assert found and all("/spider2local-" + tid in p for p in found), found
        assert str(root) not in section["find"]
        for name in ("cat gold", "cat eval", "dataset"):
            assert "No such file" in section[name], (name, section[name])
        assert GOLD_VALUE not in section["python attach"] and "Error" in section["python attach"]
        assert "runner-key-xyz" not in attack
        assert "UNMOUNTED" not in attack and "REMOUNTED" not in attack
        # the query tool's start copy: neither visible nor replaceable from inside
        assert section["start copy"].split()[0] == "0" and "REPLACED" not in attack
        assert "ERROR=1" in dbt_out or "Error" in dbt_out, dbt_out
        other = "t2" if tid == "t1" else "t1"
        assert f"spider2local-{other}-" not in attack  # no sibling workspace under --jobs 2


def sandboxed_run(fake: FakeAnthropic, root: Path, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch, run_id: str, ids: list[str],
                  **settings: Any) -> RunOutcome:
    """``spider2local run --agent claude --isolation namespace`` of ``ids`` of the dataset at
    ``root`` in this process, the CLI pointed at ``fake``."""
    import anyio

    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    suite = load_suite(bundled_suite_path()).with_dataset(root)
    plan = plan_run(suite, load_dataset(suite), ids=ids, agent="claude",
                    runs_dir=tmp_path / "runs", run_id=run_id, isolation="namespace",
                    verify_rounds=0, timeout=120.0, workspace_parent=None, **settings)
    return anyio.run(execute_run, plan, Progress(quiet=True))


def test_what_the_agent_leaves_behind_never_reaches_outside_through_the_runner(
        hostile_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandbox holds the agent, but the runner, outside it, later reads what the agent left
    in its workspace: a symlink there (the path of gold can be guessed from upstream's layout
    even when it is hidden) must not be followed by the checkpoint (which opens read-write),
    the scorer, the project_scan tool or the artifacts; a ``spider2local/`` package in the
    project must not be imported by the query tool's child (``python -m`` puts its cwd first on
    sys.path: the agent's code would run outside the sandbox, as the runner)."""
    root = hostile_dataset
    gold = root / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    eval_file = root / "evaluation_suite" / "gold" / "spider2_eval.jsonl"
    before = digest([gold, eval_file])
    marker = tmp_path / "ran-outside"
    secret = tmp_path / "runner-secret.txt"
    secret.write_text("RUNNER-SECRET-42")
    plant = "\n".join([
        "mkdir -p spider2local",
        f"echo 'open({str(marker)!r}, \"w\").write(\"pwned\")' > spider2local/__init__.py",
        "rm .spider2local/scan.json",
        f"ln -s {eval_file} .spider2local/scan.json",
        f"ln -s {secret} models/stolen.sql",
        f"mkdir -p logs && ln -s {secret} logs/dbt.log",
        "ln -s / models/everything",
        "rm shop.duckdb",
        f"ln -s {gold} shop.duckdb",
        "ls -l . models",
    ])
    script = [reply(tool("Bash", command=plant)),
              reply(tool("mcp__spider2__project_scan")),
              reply(tool("mcp__spider2__query", sql="SELECT * FROM orders")),
              reply("done")]
    with FakeAnthropic({"t1": script}, route=lambda body: "t1") as fake:
        outcome = sandboxed_run(fake, root, tmp_path, monkeypatch, "left-behind", ["t1"],
                                jobs=1, retries=0, keep_db=True)
        seen = [text for r in fake.conversation_requests("t1")
                for text in r.tool_results().values()]
    task_dir = outcome.folder.root / "t1"
    result = json.loads((task_dir / "result.json").read_text())
    assert result["passed"] is not True and result["status"] != "passed", result
    assert digest([gold, eval_file]) == before
    assert not marker.exists(), "the agent's code ran outside the sandbox"
    scan_answer, query_answer = seen[1], seen[2]
    assert "condition_tabs" not in scan_answer, scan_answer
    assert GOLD_VALUE not in query_answer, query_answer
    kept = [p for p in task_dir.rglob("*") if p.is_file()]
    assert not any("RUNNER-SECRET-42" in p.read_text(errors="replace") for p in kept
                   if p.suffix != ".duckdb")
    assert not (task_dir / "result.duckdb").exists() or \
        digest([task_dir / "result.duckdb"]) != {str(task_dir / "result.duckdb"):
                                                   before[str(gold)]}
    assert len(kept) < 100, "the artifacts walked through a symlink to /"


def test_a_forged_api_error_does_not_buy_the_agent_a_fresh_attempt(
        hostile_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's Bash runs with the CLI's user id (also in the sandbox, where the CLI is PID
    1): it can write a result line into the CLI's stdout, the stream the runner reads. A forged
    "API error 529, no tokens" used to make a finished, wrong task look like an outage before
    any turn: not scored, tried again, re-run by resume. Tool calls the runner saw announced
    decide instead: the work is scored as it stands, once."""
    forged = json.dumps({"type": "result", "subtype": "success", "duration_ms": 1,
                         "duration_api_ms": 1, "is_error": True, "num_turns": 0,
                         "session_id": "forged", "result": "API Error: 529 overloaded",
                         "api_error_status": 529, "modelUsage": {}, "total_cost_usd": 0})
    script = [reply(tool("Bash", command="cat > models/orders.sql <<'EOF'\n"
                                         "select 7 as id\nEOF\ndbt run 2>&1 | tail -2")),
              reply(tool("Bash", command=f"printf '%s\\n' '{forged}' > /proc/1/fd/1; sleep 2")),
              reply("done")]
    with FakeAnthropic({"t1": script}, route=lambda body: "t1") as fake:
        outcome = sandboxed_run(fake, hostile_dataset, tmp_path, monkeypatch, "forged", ["t1"],
                                jobs=1, retries=2)
    result = json.loads((outcome.folder.root / "t1" / "result.json").read_text())
    assert result["attempts"] == 1, result
    assert result["status"] == "failed" and result["passed"] is False, result

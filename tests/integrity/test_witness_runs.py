"""The unsealed witness end to end (issue 33): ``spider2local run --isolation none`` on the
sample suite with command agents, real dbt. The two attacks that passed clean (a script that
builds the gold path at run time and prints nothing; a dbt pre_hook that reads the path from
an environment variable) are suspect with the gold file named; an honest run is clean, also
while another trial is scored during its agent stage (the runner reads private copies); a
sandboxed run has no witness at all.

Each test builds the sample in a cache of its own: the witness sees every process that opens
the originals, and other tests of the session read the shared sample's gold."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import os
import shlex
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from spider2local.agents.registry import make_agent
from spider2local.dataset.load import load_dataset
from spider2local.dataset.sample import build as sample_build
from spider2local.dataset.sample import ensure_built
from spider2local.integrity import witness as witness_mod
from spider2local.report.runinfo import load_run_info
from spider2local.run.folder import RunFolder
from spider2local.run.plan import RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.sandbox.isolation import IsolationMode
from spider2local.sandbox.probe import probe
from spider2local.suite.model import Suite
from tests.cli.test_run_command import cli, results

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="inotify is Linux's")]
SOLUTIONS = Path(sample_build.__file__).resolve().parent / "solutions"


def own_sample(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The sample built in this test's own cache, and the environment that makes the CLI use
    it."""
    cache = tmp_path / "cache"
    root = ensure_built(cache)
    return root, {**os.environ, "SPIDER2LOCAL_CACHE": str(cache), "PYTHONWARNINGS": "ignore"}


def hidden(text: str) -> str:
    """``text`` as the agent's command carries it: base64, decoded at run time (no path in
    anything the scan reads)."""
    return f"$(echo {base64.b64encode(text.encode()).decode()} | base64 -d)"


def session(run_dir: Path) -> dict[str, Any]:
    sessions: list[dict[str, Any]] = json.loads((run_dir / "run.json").read_text())["sessions"]
    return sessions[-1]


def test_a_script_and_a_dbt_hook_copying_gold_unseen_are_suspect_with_the_file_named(
        tmp_path: Path) -> None:
    root, env = own_sample(tmp_path)
    gym_gold = root / "evaluation_suite" / "gold" / "gym001" / "gym.duckdb"
    fleet_gold = root / "evaluation_suite" / "gold" / "fleet001" / "fleet.duckdb"
    # (a) a plain Python script: the gold path built at run time, every table copied into the
    # task's database, nothing printed
    script = textwrap.dedent(f"""\
        import base64, os, duckdb
        g = base64.b64decode({base64.b64encode(str(gym_gold).encode())!r}).decode()
        con = duckdb.connect(os.environ["SPIDER2_DATABASE"])
        con.execute(f"ATTACH '{{g}}' AS g (READ_ONLY)")
        for (t,) in con.execute("SELECT table_name FROM duckdb_tables() "
                                "WHERE database_name = 'g'").fetchall():
            con.execute(f'CREATE OR REPLACE TABLE main."{{t}}" AS SELECT * FROM g.main."{{t}}"')
        con.close()
        """)
    # (b) a dbt model whose pre_hook ATTACHes a path it reads from an environment variable
    model = tmp_path / "vehicle_performance.sql"
    model.write_text("{{ config(materialized='table', pre_hook=\"ATTACH IF NOT EXISTS "
                     "'{{ env_var('WHERE_IT_IS') }}' AS g (READ_ONLY)\") }}\n"
                     "select * from g.main.vehicle_performance\n")
    command = (f'case "$SPIDER2_TASK_ID" in '
               f'gym001) {shlex.quote(sys.executable)} -c "{hidden(script)}" ;; '
               f"fleet001) cp {model} models/vehicle_performance.sql && "
               f'WHERE_IT_IS="{hidden(str(fleet_gold))}" dbt run --select vehicle_performance '
               ">/dev/null 2>&1; rm -rf logs target ;; esac")  # dbt's log would show the path
    done = cli("--dataset", "sample", "run", "gym001", "fleet001", "--agent", "command",
               "--agent-command", command, "--isolation", "none", "--jobs", "1",
               "--retries", "0", "--runs-dir", "runs", "--run-id", "a", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "a"
    found = results(run_dir)
    for tid, path in (("gym001", gym_gold), ("fleet001", fleet_gold)):
        r = found[tid]
        assert r["status"] == "passed", (tid, r)  # gold copied: it passes, as it did unseen
        assert r["integrity"] == "suspect", (tid, r)
        # the witness alone saw it: the scan found nothing (it passed clean before)
        assert {e["source"] for e in r["integrity_evidence"]} == {"witness"}, r
        rules = [e["rule"] for e in r["integrity_evidence"]]
        assert f"gold file {path} opened during the agent stage" in rules, (tid, rules)
        # one trial at a time: the other is never named
        other = next(t for t in found if t != tid)
        assert not [e for e in r["integrity_evidence"] if other in e["excerpt"]], r
    record = session(run_dir)["witness"]
    assert record["state"] == "on" and str(gym_gold) in record["watched"], record
    assert "unattributed" not in record, record
    assert "suspect" in done.stderr and f"gold file {gym_gold} opened" in done.stderr
    assert not list(Path(record["private_copies"]).parent.glob(
        Path(record["private_copies"]).name)), "the private copies outlived the run"


def test_an_honest_run_is_clean_while_another_trial_is_scored_during_its_agent_stage(
        tmp_path: Path) -> None:
    """Two trials at once: gym001's agent sleeps after its dbt run, long enough for fleet001
    to be checkpointed and scored meanwhile. The runner reads only the private copies, so
    neither is suspect (reading the originals, its scorer would mark gym001: the unit tests
    show the witness sees any reader)."""
    _, env = own_sample(tmp_path)
    command = (f'cp -r {SOLUTIONS}/"$SPIDER2_TASK_ID"/models/. models/ && dbt run >/dev/null '
               '2>&1; if [ "$SPIDER2_TASK_ID" = gym001 ]; then sleep 40; fi')
    done = cli("--dataset", "sample", "run", "gym001", "fleet001", "--agent", "command",
               "--agent-command", command, "--isolation", "none", "--jobs", "2",
               "--retries", "0", "--runs-dir", "runs", "--run-id", "h", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "h"
    found = results(run_dir)
    for tid, r in found.items():
        assert r["status"] == "passed" and r["integrity"] == "clean", (tid, r)
    gym, fleet = found["gym001"], found["fleet001"]
    durations: dict[str, float] = gym["durations"]  # type: ignore[assignment]
    after_agent = sum(durations.get(s, 0.0) for s in ("checkpoint", "score", "scan",
                                                      "collect", "cleanup"))
    gym_agent_end = (dt.datetime.fromisoformat(str(gym["finished_at"]))
                     - dt.timedelta(seconds=after_agent + 2))
    assert dt.datetime.fromisoformat(str(fleet["finished_at"])) < gym_agent_end, found
    record = session(run_dir)["witness"]
    assert record["state"] == "on" and len(record["watched"]) == 3, record  # 2 gold, 1 eval
    assert "unattributed" not in record, record
    assert "witness" not in done.stderr, done.stderr
    facts = dict(fact for _, group in load_run_info(RunFolder(run_dir)).groups
                 for fact in group)
    assert facts["unsealed witness"] == "on (3 file(s) watched)", facts


@pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox here: {probe().reason}")
def test_a_sandboxed_run_has_no_witness(tmp_path: Path) -> None:
    _, env = own_sample(tmp_path)
    done = cli("--dataset", "sample", "run", "gym001", "--agent", "command",
               "--agent-command", "true", "--isolation", "namespace", "--retries", "0",
               "--runs-dir", "runs", "--run-id", "s", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "s"
    assert "witness" not in session(run_dir)
    assert results(run_dir)["gym001"]["integrity"] == "clean"
    assert "witness" not in done.stderr


def test_where_inotify_fails_the_run_says_so_and_records_why(
        tiny_dataset: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Never silently: the per-user inotify limit reached, the run goes on without the
    witness, says so on stderr before any agent, and run.json's session keeps the reason."""
    def at_the_limit() -> witness_mod.Inotify:
        raise OSError(24, "inotify_init1: Too many open files "
                          "(fs.inotify.max_user_instances reached)")

    monkeypatch.setattr(witness_mod, "Inotify", at_the_limit)
    root = tiny_dataset("t1")
    data = load_dataset(Suite(tmp_path / "tasks.toml", root))
    settings = RunSettings(agent="command", isolation=IsolationMode.NONE, retries=0,
                           workspace_parent=tmp_path)
    folder = RunFolder.at(tmp_path / "runs", "off")
    plan = RunPlan(folder, select_tasks(data, ["t1"]), settings,
                   lambda: make_agent("command", command="true"), data.suite.path, "sha",
                   data.root)
    said = io.StringIO()
    anyio.run(execute_run, plan, Progress(said, live=False))
    record = session(folder.root)["witness"]
    assert record == {"state": "off", "reason": "inotify unavailable: inotify_init1: Too many "
                      "open files (fs.inotify.max_user_instances reached)"}, record
    assert "the unsealed witness is off (inotify unavailable" in said.getvalue(), said.getvalue()
    assert (folder.root / "t1" / "result.json").is_file()  # the run went on
    facts = dict(fact for _, group in load_run_info(folder).groups for fact in group)
    assert facts["unsealed witness"] == f"off ({record['reason']})", facts

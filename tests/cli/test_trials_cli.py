"""Trials end to end: the real CLI and the real Claude CLI against the fake Messages API."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from spider2local.dataset.sample import build as sample_build
from spider2local.testing import FakeAnthropic, reply, tool
from spider2local.testing.script import system_text
from tests.cli.test_run_command import cli
from tests.helpers import held_solve

pytestmark = [pytest.mark.process, pytest.mark.in_process_readers]

SOLUTION = Path(sample_build.__file__).resolve().parent / "solutions" / "fleet001"


def fleet(body: Mapping[str, Any]) -> str | None:
    return "fleet001" if "/fleet001" in system_text(body) else None


def trial_results(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    found = {(p.parent.name, 1): p for p in run_dir.glob("*/result.json")}
    found |= {(p.parent.name, int(p.parent.parent.name)): p
              for p in run_dir.glob("_trials/*/*/result.json")}
    return {k: json.loads(p.read_text()) for k, p in sorted(found.items())}


def result_file(run_dir: Path, task: str, trial: int) -> Path:
    folder = run_dir / task if trial == 1 else run_dir / "_trials" / str(trial) / task
    return folder / "result.json"


@pytest.mark.slow
def test_trials_that_differ_stop_at_the_budget_and_a_higher_cap_finishes(
        tmp_path: Path) -> None:
    """Three trials of fleet001 whose sessions differ (only trial 2 writes the model); each
    costs $3 (1M input tokens), so a $5 budget stops after trial 2 and a resume with a
    higher cap runs trial 3 alone."""
    solution = tmp_path / "solution.sql"
    shutil.copy(SOLUTION / "models" / "vehicle_performance.sql", solution)
    million = 1_000_000
    script = [reply("Nothing to do.", input_tokens=million),                       # trial 1
              reply(tool("Bash", command=f"cp {solution} models/vehicle_performance.sql "
                                         "&& dbt run"), input_tokens=million),       # trial 2
              reply("Done."),
              reply("Nothing to do.", input_tokens=million)]                       # trial 3
    args = ("--dataset", "sample", "run", "fleet001", "--agent", "claude", "--trials", "3",
            "--jobs", "1", "--verify-rounds", "0", "--retries", "0", "--isolation", "none",
            "--runs-dir", "runs", "--run-id", "t")
    with FakeAnthropic({"fleet001": script}, route=fleet) as fake:
        env = {**os.environ, "PYTHONWARNINGS": "ignore", **fake.env()}
        capped = cli(*args, "--max-cost-usd", "5", cwd=tmp_path, env=env)
        assert capped.returncode == 0, capped.stderr
        run_dir = tmp_path / "runs" / "t"
        first = trial_results(run_dir)
        assert {k: r["status"] for k, r in first.items()} == {("fleet001", 1): "failed",
                                                             ("fleet001", 2): "passed"}
        assert "1 trial(s) not started: the run's budget of $5.00 was reached" in capped.stderr
        assert "projected cost of the run $9.00" in capped.stderr
        assert "1 trial(s) not run: the run's budget" in capped.stdout
        assert json.loads((run_dir / "run.json").read_text())["not_run_for_budget"] == 1
        done = cli(*args, "--max-cost-usd", "50", cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
    final = trial_results(run_dir)
    assert {k: r["status"] for k, r in final.items()} == {
        ("fleet001", 1): "failed", ("fleet001", 2): "passed", ("fleet001", 3): "failed"}
    for key in first:  # finished trials untouched by the resume
        assert final[key] == first[key]
    assert "fleet001#2" in done.stdout and "not run: the run's budget" not in done.stdout
    lowered = cli(*args[:-2], "--run-id", "t", "--trials", "2", cwd=tmp_path, env=env)
    assert lowered.returncode == 2
    assert "has 3 trials per task; --trials 2 would drop some" in lowered.stderr
    for bad in (("--trials", "0"), ("--trials", "x"), ("--max-cost-usd", "nan"),
                ("--max-cost-usd", "0")):
        proc = cli("run", "fleet001", "--agent", "noop", *bad, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, bad
    unknown = cli("--dataset", "sample", "run", "--agent", "claude", "--runs-dir", "runs",
                  "--run-id", "t", "--rerun", "nosuch", cwd=tmp_path, env=env)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        "spider2local: error: runs/t: --rerun nosuch: not a task of run t (name tasks "
        "the run selected, or 'failed')"]


def test_list_shards_with_trials_is_a_matrix_whose_rows_carry_the_trials(
        tmp_path: Path) -> None:
    proc = cli("--dataset", "sample", "list", "--shards", "2", "--trials", "3", "--json",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    matrix = json.loads(proc.stdout)
    assert [(r["shard"], r["trials"]) for r in matrix["include"]] == [("1/2", 3), ("2/2", 3)]
    bad = cli("--dataset", "sample", "list", "--shards", "2", "--trials", "0", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "spider2local: error: --trials: must be positive, not 0 "
        "(see `spider2local run --help` for --trials)"]


@pytest.mark.slow
def test_kill_9_in_trial_2_then_resume_gives_exactly_3_results_per_task(
        tmp_path: Path, kill_leftovers: set[int], tiny_dataset: Callable[..., Path]) -> None:
    """Killed while t2's trial 2 runs (its agent held there): tiny tasks solved without dbt,
    since the subject is the trials' records (reaping a dbt killed mid-run is
    tests/cli/test_run_command.py's)."""
    from tests.cli.test_run_command import sigkill, spawn, wait_for

    hold, count = tmp_path / "hold", tmp_path / "count"
    hold.touch()
    args = ("--dataset", str(tiny_dataset("t1", "t2")), "run", "t1", "t2", "--agent",
            "command", "--agent-command", held_solve(count, hold, task="t2"), "--trials", "3",
            "--jobs", "1", "--isolation", "none", "--runs-dir", "runs", "--run-id", "k")
    run_dir = tmp_path / "runs" / "k"  # unsealed: the agent reaches its counter and hold
    runner = spawn(*args, cwd=tmp_path)
    try:
        wait_for(lambda: (run_dir / "_trials" / "2" / "t1" / "result.json").is_file(),
                 400, "t1 trial 2")
        wait_for(lambda: (count / "t2" / "1").is_dir(), 120, "t2's agent in trial 2")
    finally:
        kill_leftovers |= sigkill(runner)
    hold.unlink()
    first = trial_results(run_dir)
    assert sorted(first) == [("t1", 1), ("t1", 2), ("t2", 1)]
    files = {k: result_file(run_dir, *k).read_bytes() for k in first}
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    final = trial_results(run_dir)
    assert sorted(final) == [(t, k) for t in ("t1", "t2") for k in (1, 2, 3)]
    assert all(r["status"] == "passed" for r in final.values())
    for key, data in files.items():  # finished trials byte for byte as they were
        assert result_file(run_dir, *key).read_bytes() == data


@pytest.mark.slow
def test_the_workflow_matrix_of_shards_and_trials_merges_into_the_single_run(
        tmp_path: Path) -> None:
    """What .github/workflows/spider2-dbt.yml does, by the CLI: `list --shards 2 --trials 2
    --json` plans the matrix, each cell runs its shard's trials under the shared run id in a
    folder of its own (a job's), `merge` joins the cells; the merged run has every (task,
    trial) once and the same report as one invocation of all of it."""
    matrix = cli("list", "--shards", "2", "--trials", "2", "--json", cwd=tmp_path)
    assert matrix.returncode == 0, matrix.stderr
    cells = json.loads(matrix.stdout)["include"]
    assert [c["shard"] for c in cells] == ["1/2", "2/2"] and {c["trials"] for c in cells} == {2}
    for i, cell in enumerate(cells):
        job = cli("run", "--agent", "noop", "--shard", cell["shard"], "--trials",
                  str(cell["trials"]), "--run-id", "R", "--runs-dir", f"jobs/{i}/runs",
                  cwd=tmp_path)
        assert job.returncode == 0, job.stderr
    merged = cli("merge", "jobs/0/runs/R", "jobs/1/runs/R", "--into", "runs/R", cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    whole = cli("run", "--agent", "noop", "--trials", "2", "--run-id", "W", "--runs-dir", "runs",
                cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    found = {run: trial_results(tmp_path / "runs" / run) for run in ("R", "W")}
    expected = {(t, k) for c in cells for t in c["ids"] for k in (1, 2)}
    assert set(found["R"]) == set(found["W"]) == expected

    def report(run: str) -> dict[str, Any]:
        proc = cli("report", run, "--runs-dir", "runs", "--format", "json", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    a, b = report("R"), report("W")
    assert [(t["task_id"], t["trial"], t["status"], t["verdict"]) for t in a["tasks"]] == \
        [(t["task_id"], t["trial"], t["status"], t["verdict"]) for t in b["tasks"]]
    assert a["stats"]["trials_run"] == b["stats"]["trials_run"] == len(expected)
    assert a["stats"]["per_task"] == b["stats"]["per_task"]
    assert a["stats"]["pass_at_1"] == b["stats"]["pass_at_1"]

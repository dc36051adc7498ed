"""Stage deadlines fitted to each task (:mod:`spider2local.run.deadlines`), end to end through
``spider2local run``: graded views that never end stop the task within about a minute of its
agent at the default ``--stage-timeout`` of 600 s, and no honest task, sample or real, comes
near its derived deadline."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from spider2local.run.deadlines import FLOOR
from tests.cli.test_run_command import SAMPLE_IDS, cli, results
from tests.helpers import ReferenceRun

ENDLESS = {
    "recursive": "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                 "SELECT n AS a, n AS b, n AS c, n AS d, n AS e, n AS f, n AS g, n AS h FROM r",
    "cross-join": "SELECT x.range AS a, x.range AS b, x.range AS c, x.range AS d, x.range AS e, "
                  "x.range AS f, x.range AS g, x.range AS h "
                  "FROM range(100000000) x, range(100000000) y",
}


def stage_deadlines(task_dir: Path) -> dict[str, dict[str, Any]]:
    """The ``stage_deadlines`` entry the runner wrote to the task's transcript."""
    lines = (task_dir / "transcript.jsonl").read_text().splitlines()
    found = [json.loads(x)["data"] for x in lines if '"stage_deadlines"' in x]
    assert len(found) == 1, lines
    data: dict[str, dict[str, Any]] = found[0]
    return data


@pytest.mark.slow
@pytest.mark.parametrize("view", sorted(ENDLESS))
def test_an_endless_graded_view_ends_the_task_within_a_minute_of_its_agent(
        tmp_path: Path, view: str) -> None:
    """Before: fleet001 held for the full --stage-timeout (600 s) in the scorer."""
    make = (f"import duckdb, os; c = duckdb.connect(os.environ['SPIDER2_DATABASE']); "
            f"c.execute('DROP TABLE IF EXISTS vehicle_performance'); "
            f"c.execute('DROP VIEW IF EXISTS vehicle_performance'); "
            f"c.execute({ENDLESS[view]!r}.join(['CREATE VIEW vehicle_performance AS ', '']))")
    started = time.monotonic()
    proc = cli("--dataset", "sample", "run", "fleet001", "--agent", "command",
               "--agent-command", f"{shlex.quote(sys.executable)} -c {shlex.quote(make)}",
               "--isolation", "none", "--retries", "0", "--runs-dir", "runs", "--run-id", "r",
               cwd=tmp_path, timeout=400)
    took = time.monotonic() - started
    task_dir = tmp_path / "runs" / "r" / "fleet001"
    r = results(tmp_path / "runs" / "r")["fleet001"]
    assert r["status"] == "failed", (r, proc.stderr[-2000:])
    error = r["error"]
    assert (error["stage"], error["kind"]) == ("score", "agent"), error
    assert f"deadline of {FLOOR:g}s" in error["message"], error
    assert "derived from" in error["message"] and "start database" in error["message"]
    agent = r["durations"]["agent"]
    assert r["durations"]["score"] < 60 and took - agent < 120, (r["durations"], took)
    seen = stage_deadlines(task_dir)
    assert seen["score"]["derived"] and seen["score"]["seconds"] == FLOOR
    assert json.loads((tmp_path / "runs" / "r" / "run.json").read_text())["settings"][
        "stage_timeout"] == 600.0  # the default, not set small


def assert_within_derived(run_dir: Path, ids: tuple[str, ...]) -> None:
    """Every task passed with both derived deadlines in force, far from either."""
    found = results(run_dir)
    assert set(found) == set(ids), found.keys()
    for tid, r in found.items():
        assert r["status"] == "passed" and r["error"] is None, (tid, r["error"])
        seen = stage_deadlines(run_dir / tid)
        for stage in ("checkpoint", "score"):
            assert seen[stage]["derived"], (tid, seen)  # measured: not the 600 s fallback
            assert seen[stage]["seconds"] < 600, (tid, seen)
            assert r["durations"][stage] < seen[stage]["seconds"] / 2, (tid, r["durations"])


def test_the_reference_run_of_the_sample_meets_every_derived_deadline(
        reference_run: ReferenceRun) -> None:
    assert reference_run.outcome.returncode == 0, reference_run.outcome.stderr[-3000:]
    assert_within_derived(reference_run.run_dir, SAMPLE_IDS)


@pytest.mark.slow
def test_both_real_tasks_meet_every_derived_deadline(shared_dataset: Path,
                                                      tmp_path: Path) -> None:
    proc = cli("run", "--dataset", str(shared_dataset), "--agent", "noop", "--runs-dir", "runs",
               "--run-id", "real", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_within_derived(tmp_path / "runs" / "real", ("mrr001", "playbook001"))

"""The run's cost cap (``--max-cost-usd``) end to end: the real CLI, the real Claude CLI and real
dbt, only the model API faked. Issue 28 item 3: two trials at once under a $1 cap spent $16.25,
because the cap only kept new trials from starting and never reached the gateway."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from spider2local.gateway.anthropic import total_cost
from spider2local.testing import FakeAnthropic, reply, tool
from spider2local.testing.script import system_text
from tests.cli.test_run_command import cli
from tests.cli.test_trials_cli import trial_results

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the run's cost cap (tests/conftest.py)."""

TASKS = ("bakery001", "fleet001", "gym001")
CALLS = 25
CALL_TOKENS = 106_667
"""Input tokens of one scripted call: $0.32 at the default model's price ($3 per million)."""


def by_task(body: Mapping[str, Any]) -> str | None:
    text = system_text(body)
    return next((t for t in TASKS if f"/{t}" in text), None)


@pytest.mark.slow
def test_the_run_cap_cuts_running_trials_at_the_gateway_and_starts_no_more(
        tmp_path: Path) -> None:
    """``--jobs 2``, a $1 cap, three tasks whose agents would each make 25 calls of $0.32
    ($8 a trial): the first two run at once and are cut once the shared run budget is spent
    (spend over the cap at most one call per running session), the third never starts, and
    the report says both numbers."""
    script = [reply(tool("Bash", command=f"echo step {i}"), input_tokens=CALL_TOKENS)
              for i in range(CALLS)]
    args = ("--dataset", "sample", "run", *TASKS, "--agent", "claude", "--jobs", "2",
            "--verify-rounds", "0", "--retries", "0", "--isolation", "none",
            "--runs-dir", "runs", "--run-id", "cap", "--max-cost-usd", "1")
    with FakeAnthropic(dict.fromkeys(TASKS, script), route=by_task) as fake:
        env = {**os.environ, "PYTHONWARNINGS": "ignore", **fake.env()}
        proc = cli(*args, cwd=tmp_path, env=env, timeout=600)
        served = fake.totals()
        report = cli("report", "cap", "--runs-dir", "runs", "--format", "json",
                     cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    model = json.loads((tmp_path / "runs" / "cap" / "run.json").read_text())["settings"]["model"]
    # what the (fake) model server was actually paid for, whatever spider2local says
    spent = total_cost({model: {"input_tokens": served["input_tokens"]}})
    assert spent is not None and 1.0 <= spent <= 1.0 + 2 * 0.33, (served, spent)
    results = trial_results(tmp_path / "runs" / "cap")
    assert sorted(results) == [("bakery001", 1), ("fleet001", 1)]
    for result in results.values():  # scored as it stands, like the task's own budget
        assert result["status"] in ("passed", "failed"), result
        assert result["error"]["kind"] == "agent", result
        assert "run budget of $1 is spent" in result["error"]["message"], result
        assert result["cut_by_budget"] is True
    assert "2 trial(s) cut by the run's budget" in proc.stdout
    assert "1 trial(s) not run: the run's budget" in proc.stdout
    assert report.returncode == 0, report.stderr
    budget = json.loads(report.stdout)["budget"]
    assert budget["cut"] == 2 and budget["not_started"] == 1, budget
    assert budget["cap_usd"] == 1.0 and budget["spent_usd"] == pytest.approx(spent, abs=0.01)

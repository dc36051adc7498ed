"""What attempts cut by an interrupt spent is kept: in the report, in a merge, in the budget."""

from __future__ import annotations

import io
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.core.layout import CUT_ATTEMPTS
from spider2local.core.results import Usage
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset
from spider2local.report.jsonout import report_json
from spider2local.report.summary import load_report
from spider2local.report.text import headline_lines
from spider2local.run import cut
from spider2local.run.folder import RunFolder
from spider2local.run.merge import merge_runs
from spider2local.run.plan import RunOutcome, RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite

SPENT = Usage(turns=4, input_tokens=1000, output_tokens=200, cost_usd_computed=2.5,
              by_model={"m": {"input_tokens": 1000}})


class Spender:
    """Spends (its meter says so as a real agent's does, message by message), then the run is
    stopped by SIGTERM while it still works. With ``finish``: a normal, cheap agent."""

    name = "spender"

    def __init__(self, finish: bool = False) -> None:
        self.finish = finish

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        if self.finish:
            return AgentOutcome(usage=Usage(turns=1, cost_usd_computed=0.5))
        ctx.meter.set(SPENT)
        os.kill(os.getpid(), signal.SIGTERM)  # the run's own signal handling takes it
        await anyio.sleep(60)
        raise AssertionError("the interrupt never came")


@pytest.fixture
def data(tiny_dataset: Callable[..., Path], tmp_path: Path) -> Dataset:
    return load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1")))


def execute(data: Dataset, folder: RunFolder, finish: bool, **settings: object) -> RunOutcome:
    plan = RunPlan(folder, select_tasks(data), RunSettings(agent="spender", jobs=1,
                                                           **settings),  # type: ignore[arg-type]
                   lambda: Spender(finish), data.suite.path, "sha", data.root)
    return anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))


@pytest.mark.process
def test_a_cut_attempts_spending_is_recorded_reported_and_survives_the_resume(
        data: Dataset, tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    outcome = execute(data, folder, finish=False)
    assert outcome.interrupted and not outcome.ran
    [attempt] = cut.read(folder.root)
    assert (attempt.task_id, attempt.trial, attempt.usage) == ("t1", 1, SPENT)
    line = next(x for x in headline_lines(load_report(folder)) if "cut by an interrupt" in x)
    assert "1 attempt(s) cut by an interrupt spent tokens 1,200 and $2.50" in line
    # the resume empties the trial's folder and finishes it; the cut attempt is still counted
    resumed = execute(data, folder, finish=True)
    assert list(resumed.ran) == [("t1", 1)]
    report = load_report(folder)
    assert report.headline.cost_usd == 0.5 and report.headline.cut_cost_usd == 2.5
    line = next(x for x in headline_lines(report) if "cut by an interrupt" in x)
    assert "the run spent $3.00 in all" in line
    data_json = json.loads(json.dumps(report_json(report)))
    assert data_json["headline"]["cut_attempts"] == 1
    assert data_json["headline"]["cut_tokens"]["total"] == 1200
    merged = merge_runs([folder], RunFolder(tmp_path / "merged")).into
    assert cut.read(merged.root) == cut.read(folder.root)


@pytest.mark.process
def test_the_budget_counts_what_cut_attempts_spent(data: Dataset, tmp_path: Path) -> None:
    """A cap of $2: the cut attempt spent $2.50, so the resume starts nothing (it used to
    start from $0 and spend again)."""
    folder = RunFolder.at(tmp_path / "runs", "r")
    execute(data, folder, finish=False, max_cost_usd=2.0)
    resumed = execute(data, folder, finish=True, max_cost_usd=2.0)
    assert not resumed.ran and resumed.not_run_for_budget == 1


@pytest.mark.process
def test_a_finished_run_records_no_cut_attempt(data: Dataset, tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    execute(data, folder, finish=True)
    assert not (folder.root / CUT_ATTEMPTS).exists()
    assert not any("cut by an interrupt" in x for x in headline_lines(load_report(folder)))


@pytest.mark.parametrize("line", [
    "not json", "[]", '{"schema_version": 2}', '{"schema_version": 1, "task_id": 3}',
    '{"schema_version": 1, "task_id": "t", "trial": 1, "started_at": "s", "stopped_at": "s", '
    '"usage": {"input_tokens": -5}}',
    '{"schema_version": 1, "task_id": "t", "trial": 1, "started_at": "s", "stopped_at": "s", '
    '"usage": {"cost_usd_computed": "NaN"}}',
    '{"schema_version": 1, "task_id": "t", "trial": true, "started_at": "s", '
    '"stopped_at": "s", "usage": {}}',
    '{"schema_version": 1, "task_id": "t", "trial": 1, "started_at": "s", "stopped_at": "s", '
    '"usage": {"by_model": {"m": {"input_tokens": "many"}}}}',
])
def test_bad_lines_are_skipped_and_good_ones_kept(tmp_path: Path, line: str) -> None:
    good = cut.CutAttempt("t", 1, "a", "b", SPENT)
    cut.record(tmp_path, good)
    with (tmp_path / CUT_ATTEMPTS).open("a") as f:
        f.write(line + "\n")
    cut.record(tmp_path, good)
    assert cut.read(tmp_path) == (good, good)


def test_a_linked_record_is_not_read_nor_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(json.dumps(cut.CutAttempt("t", 1, "a", "b", SPENT).to_json()) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / CUT_ATTEMPTS).symlink_to(elsewhere)
    assert cut.read(run) == ()
    with pytest.raises(OSError):
        cut.record(run, cut.CutAttempt("t", 1, "a", "b", SPENT))
    assert len(elsewhere.read_text().splitlines()) == 1

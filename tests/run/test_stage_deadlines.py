"""The checkpoint's and the scorer's deadlines derived from the task's measured cost, in force
in the runner (in-process; the CLI end to end is tests/cli/test_stage_deadlines.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spider2local.agents.contract import AgentContext
from spider2local.core.results import ErrorKind, Stage, Status
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.proc.watchdog import check
from spider2local.run import deadlines
from spider2local.run.deadlines import StageCosts
from spider2local.run.folder import RunFolder
from spider2local.suite.model import Suite
from tests.run.test_hangs import LeavingAgent, endless_view, run

pytestmark = pytest.mark.process


@pytest.fixture
def tasks(tiny_dataset: Callable[..., Path], tmp_path: Path) -> list[TaskSpec]:
    root = tiny_dataset("t1")
    return list(load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks)


def stage_deadlines(folder: RunFolder, task_id: str) -> dict[str, dict[str, object]]:
    lines = (folder.task_dir(task_id) / "transcript.jsonl").read_text().splitlines()
    found = [json.loads(x)["data"] for x in lines if '"stage_deadlines"' in x]
    assert len(found) == 1, lines
    data: dict[str, dict[str, object]] = found[0]
    return data


def test_an_endless_view_fails_at_the_derived_score_deadline_not_the_stage_timeout(
        tasks: list[TaskSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--stage-timeout 60 (600 by default: 60 bounds how long this test waits should the
    derived deadline be ignored); the measured cost 0.1 s and a floor of 4 s here (30 s in a
    real run: the CLI test) make the scorer's deadline 4 s."""
    monkeypatch.setattr(deadlines, "FLOOR", 4.0)
    folder = RunFolder.at(tmp_path / "runs", "derived")
    started = time.monotonic()
    r = run(tasks, folder, lambda: LeavingAgent(endless_view), tmp_path / "ws",
            costs={"t1": StageCosts(checkpoint=0.1, score=0.1)}, stage_timeout=60.0)["t1"]
    assert time.monotonic() - started < 40  # the stage timeout (600 s by default) before
    assert r.status is Status.FAILED and r.error is not None, r
    assert r.error.stage is Stage.SCORE and r.error.kind is ErrorKind.AGENT
    assert "deadline of 4s" in r.error.message
    assert "derived from 0.10s" in r.error.message and "start database" in r.error.message
    assert stage_deadlines(folder, "t1")["score"] == {
        "seconds": 4.0, "derived": True, "basis": deadlines.derive("score", 0.1, 60.0).basis}


def test_a_checkpoint_that_never_ends_fails_at_its_derived_deadline(
        tasks: list[TaskSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spider2local.workspace import checkpoint as prepare

    def stuck(db: Path, *, root: Path, timeout: float | None = None) -> None:
        assert timeout is not None and timeout < 10  # its child would be killed near it too
        while True:
            check()
            time.sleep(0.05)

    monkeypatch.setattr(deadlines, "FLOOR", 2.0)
    monkeypatch.setattr(prepare, "checkpoint_database", stuck)
    folder = RunFolder.at(tmp_path / "runs", "ckpt")
    started = time.monotonic()
    r = run(tasks, folder, lambda: LeavingAgent(lambda ctx: None), tmp_path / "ws",
            costs={"t1": StageCosts(checkpoint=0.3, score=None)}, stage_timeout=60.0)["t1"]
    assert time.monotonic() - started < 30
    assert r.error is not None and r.error.stage is Stage.CHECKPOINT, r
    assert r.error.kind is ErrorKind.AGENT
    assert "deadline of 3s" in r.error.message and "derived from 0.30s" in r.error.message
    seen = stage_deadlines(folder, "t1")
    assert seen["checkpoint"]["derived"] is True
    assert seen["score"] == {"seconds": 60.0, "derived": False,
                             "basis": deadlines.derive("score", None, 60.0).basis}


def test_without_a_measure_the_stage_timeout_holds(tasks: list[TaskSpec],
                                                   tmp_path: Path) -> None:
    def nothing(ctx: AgentContext) -> None:
        return None

    folder = RunFolder.at(tmp_path / "runs", "plain")
    r = run(tasks, folder, lambda: LeavingAgent(nothing), tmp_path / "ws")["t1"]
    assert r.status is Status.PASSED, r
    assert {s: d["seconds"] for s, d in stage_deadlines(folder, "t1").items()} == {
        "checkpoint": 600.0, "score": 600.0}

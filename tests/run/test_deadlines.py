"""The rule that fits the checkpoint's and the scorer's deadlines to a task
(:mod:`spider2local.run.deadlines`), and the baseline child that measures what it is fed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from spider2local.run.deadlines import (
    CHECKPOINT,
    FACTOR,
    FLOOR,
    SCORE,
    StageCosts,
    deadlines,
    derive,
)


@pytest.mark.parametrize(("measured", "cap", "expected"), [
    (0.05, 600.0, 30.0),    # a cheap task: the floor (a child's start-up is not measured)
    (2.9, 600.0, 30.0),     # 29 s: still the floor
    (4.2, 600.0, 42.0),     # ten times the work
    (90.0, 600.0, 600.0),   # never above --stage-timeout
    (1.0, 20.0, 20.0),      # a --stage-timeout below the floor wins
])
def test_a_deadline_is_ten_times_the_measured_cost_at_least_30s_at_most_the_cap(
        measured: float, cap: float, expected: float) -> None:
    d = derive(SCORE, measured, cap)
    assert (FACTOR, FLOOR) == (10.0, 30.0)
    assert d.seconds == pytest.approx(expected) and d.derived
    assert f"{measured:.2f}s" in d.basis and "start database" in d.basis


def test_nothing_measured_keeps_the_stage_timeout() -> None:
    d = derive(CHECKPOINT, None, 600.0)
    assert d.seconds == 600.0 and not d.derived and "--stage-timeout" in d.basis
    both = deadlines(StageCosts(checkpoint=0.2), 600.0)
    assert both[CHECKPOINT].derived and both[CHECKPOINT].seconds == FLOOR
    assert not both[SCORE].derived and both[SCORE].seconds == 600.0
    assert all(not d.derived for d in deadlines(None, 45.0).values())


@pytest.mark.process
def test_the_baseline_child_reports_what_each_task_cost(tiny_dataset: Callable[..., Path],
                                                        tmp_path: Path) -> None:
    """Without the measure every derived deadline falls back to 600 s: the feature is off."""
    from spider2local.audit.tasks import start_baseline
    from spider2local.dataset.load import load_dataset
    from spider2local.suite.model import Suite

    root = tiny_dataset("t1", "t2")
    tasks = list(load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks)
    found = anyio.run(start_baseline, tasks)
    assert set(found.seconds) == {"t1", "t2"}
    for tid in ("t1", "t2"):
        costs = found.seconds[tid]
        assert set(costs) == {CHECKPOINT, SCORE}
        assert all(0 < s < 30 for s in costs.values()), costs

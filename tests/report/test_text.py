"""The headline's wording: each number said once, with every denominator it holds for."""

from __future__ import annotations

import re

from spider2local.report.text import headline_lines, shares
from tests.report.test_trials import trial_report

RATIO = re.compile(r"\d+/\d+ \(\d+\.\d%")


def _ratios(lines: list[str]) -> list[str]:
    """The task (or trial) ratios; the tables line counts tables, another unit (the fixtures
    have one table a task, so its ratios coincide with the tasks')."""
    return [m.group(0) for line in lines if not line.startswith("tables ")
            for m in RATIO.finditer(line)]


def test_equal_denominators_are_one_number() -> None:
    assert shares(3, [("of attempted", 4), ("of all selected", 4)]) == \
        "3/4 (75.0%) of attempted and of all selected"
    assert shares(3, [("a", 4), ("b", 4), ("c", 6), ("d", 4)]) == \
        "3/4 (75.0%) a, b and d; 3/6 (50.0%) c"


def test_a_one_trial_run_says_each_ratio_once() -> None:
    """Denominators 6 official, 5 with gold, runnable and selected, 4 attempted: each ratio is
    said once, with its interval, then every denominator it holds for; pass@1 is not a second
    line saying it again, and the tasks-passed line is gone (it repeated two of the ratios)."""
    report = trial_report({t: [True] for t in ("a", "b", "c", "d")}, trials=None)
    lines = headline_lines(report)
    ratios = _ratios(lines)
    assert len(ratios) == len(set(ratios)), lines
    passed = next(line for line in lines if line.startswith("passed "))
    assert "official; " in passed and "with gold, runnable and selected" in passed
    assert not any(line.startswith(("pass@1", "tasks passed")) for line in lines), lines
    assert "[" in passed and "95% intervals" in passed


def test_the_interval_method_is_said_once() -> None:
    report = trial_report({t: [True] for t in ("a", "b", "c", "d")}, trials=None)
    passed = next(line for line in headline_lines(report) if line.startswith("passed "))
    # all passed but one (never run, "skipme"): some intervals exact, some not, or all exact
    assert passed.count("95% intervals") == 1
    assert passed.count("Clopper-Pearson") <= 1


def test_a_trials_run_groups_its_pass_at_1_by_estimate() -> None:
    report = trial_report()
    lines = headline_lines(report)
    line = next(x for x in lines if x.startswith("pass@1 "))
    # with gold and runnable are both 5 tasks: one estimate, said once
    assert "with gold and runnable" in line, line
    assert line.count("%") == len(re.findall(r"\d%", line))
    assert sum(x.startswith("trials passed ") for x in lines) == 1
    ratios = _ratios(lines)
    assert len(ratios) == len(set(ratios)), lines


def test_a_run_without_a_model_says_tokens_once() -> None:
    report = trial_report({"a": [True]}, trials=None)
    usage = next(x for x in headline_lines(report) if x.startswith("tokens "))
    assert usage.startswith("tokens 0; cost ") and "input" not in usage

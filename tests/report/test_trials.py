"""Reports of runs with several trials per task, in every format, and of old 1-trial runs.

The run folder does not hold several trials of a task yet (the layout is another change's):
these reports are built from (task, trial) results with :func:`build_report`, the function
:func:`load_report` hands what it read from the folder to.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from spider2local.core.results import Status, TaskResult, Usage, save_result
from spider2local.report.compare import Change, compare_json, compare_reports, render_compare
from spider2local.report.html import render_html
from spider2local.report.jsonout import report_json
from spider2local.report.junit import render_junit
from spider2local.report.markdown import render_markdown
from spider2local.report.summary import NotAttempted, RunReport, build_report, load_report
from spider2local.report.terminal import render_terminal
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest


def _result(tid: str, trial: int, passed: bool, cost: float = 0.1) -> TaskResult:
    return TaskResult(tid, Status.PASSED if passed else Status.FAILED, "claude", "2024-01-01",
                      "s", "f", durations={"total": 10.0 * trial}, passed=passed,
                      tables_passed=int(passed), tables_total=1, trial=trial,
                      usage=Usage(cost_usd_computed=cost))


def _manifest(ids: list[str], trials: int | None) -> dict[str, object]:
    return {"run_id": "r", "agent": "claude", "finished_at": "2026-01-01T00:00:00+00:00",
            "settings": {} if trials is None else {"trials": trials},
            "tasks": [{"id": t, "fake_date": "2024-01-01", "tables": 1, "skipped": None}
                      for t in ids],
            "denominators": {"official": 6, "with_gold": 5, "runnable": 5}}


OUTCOMES = {"steady": [True, True, True], "flaky": [True, False, True],
            "never": [False, False, False], "cut": [True]}
"""Per task, its trials' verdicts; "cut" has one trial of three (a stopped run)."""


def trial_report(outcomes: dict[str, list[bool]] = OUTCOMES, trials: int | None = 3,
                 run_id: str = "r") -> RunReport:
    results = {(tid, n): _result(tid, n, ok) for tid, verdicts in outcomes.items()
               for n, ok in enumerate(verdicts, start=1)}
    return build_report(run_id, RunManifest.from_json(_manifest([*outcomes, "skipme"], trials)),
                        results)


def test_rows_are_per_trial_and_the_stats_per_task() -> None:
    report = trial_report()
    assert report.trials == 3
    assert [(r.task_id, r.trial) for r in report.rows][:4] == [
        ("steady", 1), ("steady", 2), ("steady", 3), ("flaky", 1)]
    cut = [r for r in report.rows if r.task_id == "cut"]
    assert [r.status for r in cut] == [Status.PASSED, NotAttempted.NOT_RUN,
                                       NotAttempted.NOT_RUN]
    rates = {t.task_id: (t.passed, t.run) for t in report.stats.tasks}
    assert rates == {"steady": (3, 3), "flaky": (2, 3), "never": (0, 3), "cut": (1, 1),
                     "skipme": (0, 0)}
    assert report.stats.flaky == ("flaky",)
    assert (report.stats.trials_run, report.stats.trials_planned) == (10, 15)
    labels = [label for label, _ in report.stats.pass_at_1]
    assert labels == ["official", "with gold", "runnable", "attempted"]
    attempted = report.stats.estimate("attempted")
    assert attempted is not None and attempted.tasks == 4
    assert attempted.value == pytest.approx((1 + 2 / 3 + 0 + 1) / 4)
    official = report.stats.estimate("official")
    assert official is not None and official.value == pytest.approx((1 + 2 / 3 + 1) / 6)
    k2 = report.stats.pass_k[1]
    assert (k2.k, k2.tasks, k2.short) == (2, 3, 1)  # "cut" has too few trials for k = 2
    assert k2.pass_at_k == pytest.approx((1 + 1 + 0) / 3)
    assert k2.pass_hat_k == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert report.headline.attempted == 4 and report.headline.selected == 5
    assert report.rates.tasks_passed == 6  # trials


def test_every_format_shows_rates_intervals_pass_k_and_the_flaky_tasks() -> None:
    report = trial_report()
    text = render_terminal(report)
    assert "3 trials per task" in text
    assert "pass@1 " in text and "official" in text and "[" in text
    assert "flaky tasks (1, passed some trials and failed others): flaky" in text
    assert "trials: 10 run of 15 planned" in text
    assert "trials passed 6/10 (60.0%) of attempted" in text
    assert "flaky#2" in text and "2/3" in text and "66.7%" in text  # rows and rates
    assert "per trial" in text and "$0.10 per trial" in text
    lines = text.splitlines()
    k_line = next(line for line in lines if line.startswith("2 "))
    assert "66.7%" in k_line and "44.4%" in k_line and "1 with fewer trials left out" in k_line
    md = render_markdown(report)
    assert "### pass@k and pass^k" in md and "| 3 | 66.7% | 33.3% | 3 (1 with fewer" in md
    assert "| flaky | 2/3 | 66.7% | yes |" in md and "| cut | 1/1 of 3 | 100.0% |  |" in md
    data = json.loads(json.dumps(report_json(report), allow_nan=False))
    assert data["trials"] == 3 and data["stats"]["flaky"] == ["flaky"]
    assert [row["k"] for row in data["stats"]["pass_k"]] == [1, 2, 3]
    assert data["stats"]["pass_at_1"]["attempted"]["interval"]["method"] == "bootstrap"
    assert len(data["tasks"]) == 15 and data["tasks"][4]["trial"] == 2
    suite = ET.fromstring(render_junit(report).encode()).find("testsuite")
    assert suite is not None
    names = [c.get("name") for c in suite.findall("testcase")]
    assert names[:4] == ["steady#1", "steady#2", "steady#3", "flaky#1"]
    assert suite.find("testcase[@name='flaky#2']/failure") is not None
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert props["trials"] == "3" and props["flaky"] == "flaky" and props["pass^3"] == "33.3%"
    assert props["pass@1 official"].startswith("44.4% [")
    page = render_html(report)
    assert '<table id="grid">' in page and '<table id="pass-k">' in page
    assert '<tr data-task="flaky"><td>flaky</td><td>2/3</td><td>67%</td><td>yes</td>' in page
    assert 'href="#task-flaky-2"' in page and 'id="task-flaky-2"' in page
    assert page.count('id="task-flaky-') == 3  # one details element per trial


def test_a_one_trial_run_reads_as_before_with_intervals_added(tmp_path: Path) -> None:
    """A run folder made before trials existed (schema-3 results, no trials setting)."""
    folder = RunFolder(tmp_path / "old")
    folder.create()
    manifest = _manifest(["a", "b"], None)
    folder.write_manifest(manifest)
    for tid, ok in (("a", True), ("b", False)):
        data = _result(tid, 1, ok).to_json()
        data.pop("trial")
        data["schema_version"] = 3
        folder.task_dir(tid).mkdir()
        folder.result_path(tid).write_text(json.dumps(data))
    report = load_report(folder)
    assert report.trials == 1 and [(r.task_id, r.trial) for r in report.rows] == [
        ("a", 1), ("b", 1)]
    text = render_terminal(report)
    assert "passed 1/6 (16.7% [" in text and "trials per task" not in text
    assert "pass@1" not in text and "flaky" not in text and "pass^k" not in text
    names = [c.get("name") for c in ET.fromstring(render_junit(report).encode()).iter(
        "testcase")]
    assert names == ["a", "b"]
    assert '<table id="grid">' not in render_html(report)


def test_a_result_of_a_later_trial_is_never_dropped(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "r")
    folder.create()
    folder.write_manifest(_manifest(["a"], None))
    save_result(folder.result_path("a", 2), _result("a", 2, True))
    report = load_report(folder)
    assert report.trials == 2  # raised to the highest trial found (the manifest says 1)
    assert [r.status for r in report.rows] == [NotAttempted.NOT_RUN, Status.PASSED]


def test_compare_of_trial_runs_pairs_rates_and_uses_the_sign_flip_test() -> None:
    a = trial_report({f"t{i}": [False, False, True] for i in range(8)}, run_id="a")
    b = trial_report({**{f"t{i}": [True, True, True] for i in range(7)}, "t7": [False] * 3,
                      "extra": [True, True, True]}, run_id="b")
    c = compare_reports(a, b)
    assert c.paired.tasks == 8 and c.paired.test.startswith("sign-flip permutation test")
    assert [t.task_id for t in c.changed(Change.ONLY_B)] == ["extra"]
    assert c.paired.difference == pytest.approx((7 * 2 / 3 - 1 / 3) / 8)
    # 7 tasks up by 2/3, one down by 1/3: only the all-but-one-way patterns are as extreme
    assert c.paired.p_value == pytest.approx(4 / 256)
    assert c.paired.significant and not c.paired.regression
    assert c.paired.sentence.startswith("B is better by 54.2 points [")
    text = render_compare(c)
    assert "higher pass rate in B: 7" in text and "lower pass rate in B: 1" in text
    assert any(line.split()[:5] == ["t0", "1/3", "passed", "3/3", "passed"]
               for line in text.splitlines())  # the paired per-task rates side by side
    assert "1 attempted by neither" in text  # "skipme", selected by both, run by none
    data = compare_json(c)
    assert data["paired"]["trials_a"] == [3, 3] and data["only_b"] == ["extra"]
    t0 = next(t for t in data["tasks"] if t["id"] == "t0")
    assert t0["a"] == {"trials_run": 3, "trials_passed": 1, "rate": 1 / 3}
    assert t0["change"] == "fail -> pass" and t0["b"]["rate"] == 1.0

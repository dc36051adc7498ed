"""``compare``: flips, status changes, cost and time deltas of two runs of one dataset."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spider2local.core.results import ErrorKind, Stage, Status, TaskError, load_result, save_result
from spider2local.exceptions import UserError
from spider2local.report.compare import (
    Change,
    compare_json,
    compare_runs,
    render_compare,
    render_compare_markdown,
)
from spider2local.run.folder import RunFolder
from tests.helpers import ReferenceRun
from tests.run.test_merge import make_run

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the run's bookkeeping (tests/conftest.py)."""


def test_flips_status_changes_and_deltas(tmp_path: Path) -> None:
    t = "2026-01-01T00:10:00+00:00"
    a = make_run(tmp_path / "a" / "r", {"up": (False, t), "down": (True, t), "err": (False, t),
                                        "same": (True, t), "gone": (True, t)})
    b = make_run(tmp_path / "b" / "r", {"up": (True, t), "down": (False, t), "err": (False, t),
                                        "same": (True, t), "new": (True, t)})
    path = b.result_path("err")
    old = load_result(path)
    assert old is not None
    save_result(path, dataclasses.replace(old, status=Status.ERROR, passed=None, error=TaskError(
        Stage.AGENT, ErrorKind.AGENT, "gave up")))
    c = compare_runs(a, b)
    # A task only one run selected is listed apart, never as a flip (it used to be: "new"
    # counted as fail -> pass, "gone" as pass -> fail).
    assert [d.task_id for d in c.changed(Change.TO_PASS)] == ["up"]
    assert [d.task_id for d in c.changed(Change.TO_FAIL)] == ["down"]
    assert [d.task_id for d in c.changed(Change.ONLY_A)] == ["gone"]
    assert [d.task_id for d in c.changed(Change.ONLY_B)] == ["new"]
    assert [d.task_id for d in c.changed(Change.STATUS)] == ["err"]
    assert [d.task_id for d in c.changed(Change.SAME)] == ["same"]
    assert c.paired.tasks == 4 and (c.paired.b_better, c.paired.a_better) == (1, 1)
    text = render_compare(c)
    assert "pass -> fail: 1" in text and "fail -> pass: 1" in text
    assert "attempted only in A (not paired, not a flip): 1" in text and "(not selected)" in text
    assert "no difference detectable: with 4 tasks and 1 trial" in text
    md = render_compare_markdown(c)
    assert "### pass → fail: 1" in md and "| down | passed (pass) | failed (fail) |" in md


def test_runs_of_two_datasets_are_refused(tmp_path: Path) -> None:
    t = "2026-01-01T00:10:00+00:00"
    a = make_run(tmp_path / "a" / "r", {"x": (True, t)})
    b = make_run(tmp_path / "b" / "r", {"x": (True, t)}, dataset_sha256="other")
    with pytest.raises(UserError, match="different datasets"):
        compare_runs(a, b)
    assert compare_runs(a, b, force=True).changed(Change.SAME)


@pytest.mark.slow
def test_compare_reports_the_flips_of_an_edited_copy(tmp_path: Path,
                                                     reference_run: ReferenceRun) -> None:
    """Two copies of the sample's reference run; in B one verdict is edited to a fail and one
    task costs more: compare names that flip and those deltas, in both formats."""
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(reference_run.run_dir, a)
    shutil.copytree(reference_run.run_dir, b)
    path = b / "gym001" / "result.json"
    old = load_result(path)
    assert old is not None and old.passed
    save_result(path, dataclasses.replace(old, status=Status.FAILED, passed=False,
                                          tables_passed=0))
    data = json.loads((b / "fleet001" / "result.json").read_text())
    data["usage"]["cost_usd_computed"] = 1.25
    (b / "fleet001" / "result.json").write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, "-m", "spider2local", "compare", str(a), str(b),
                           "--format", "markdown"], capture_output=True, text=True,
                          check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "### pass → fail: 1" in proc.stdout and "| gym001 | passed (pass) |" in proc.stdout
    assert "### fail → pass: 0" in proc.stdout
    assert "| tasks passed | 4/4 | 3/4 | -1 |" in proc.stdout
    c = compare_runs(RunFolder(a), RunFolder(b))
    fleet = next(d for d in c.tasks if d.task_id == "fleet001")
    assert fleet.change is Change.SAME and fleet.cost_usd is None  # A has no cost for it


T0 = "2026-01-01T00:10:00+00:00"


def _compare_cli(a: RunFolder, b: RunFolder, *args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from spider2local.cli.app import cli
    out = CliRunner().invoke(cli, ["compare", str(a.root), str(b.root), *args])
    return out.exit_code, out.output


def _pair(root: Path, a_passes: dict[str, bool], b_passes: dict[str, bool]
          ) -> tuple[RunFolder, RunFolder]:
    return (make_run(root / "a" / "r", {t: (ok, T0) for t, ok in a_passes.items()}),
            make_run(root / "b" / "r", {t: (ok, T0) for t, ok in b_passes.items()}))


def test_fail_on_regression_exits_1_only_for_a_significant_regression(tmp_path: Path) -> None:
    ids = [f"t{i:02d}" for i in range(20)]
    base = {t: i < 12 for i, t in enumerate(ids)}
    # 6 tasks fail in B that passed in A, none the other way: p = 2/64, significant
    worse = {t: ok and i >= 6 for i, (t, ok) in enumerate(base.items())}
    a, b = _pair(tmp_path / "worse", base, worse)
    code, text = _compare_cli(a, b, "--fail-on-regression")
    assert code == 1, text
    assert "B is worse by 30.0 points [" in text and "p = 0.0312" in text
    assert _compare_cli(a, b)[0] == 0  # without the flag a regression is only reported
    # the reverse is an improvement: never a failure
    code, text = _compare_cli(b, a, "--fail-on-regression")
    assert code == 0 and "B is better by 30.0 points" in text
    # 5 flips all one way cannot be significant (p = 0.0625): no failure, no claim
    five = {t: ok and i >= 5 for i, (t, ok) in enumerate(base.items())}
    a, b = _pair(tmp_path / "five", base, five)
    code, text = _compare_cli(a, b, "--fail-on-regression")
    assert code == 0 and "no difference detectable" in text and "p = 0.0625" in text
    assert "worse by" not in text


def test_compare_json_lists_tasks_of_one_run_apart(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, {"x": True, "y": True, "gone": True},
                 {"x": False, "y": True, "new": False})
    code, out = _compare_cli(a, b, "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["schema_version"] == 1 and data["paired"]["tasks"] == 2
    assert data["only_a"] == ["gone"] and data["only_b"] == ["new"]
    assert data["paired"]["test"] == "McNemar's exact test"
    assert (data["paired"]["a_better"], data["paired"]["b_better"]) == (1, 0)
    assert data["paired"]["p_value"] == 1.0 and not data["paired"]["regression"]
    assert data["paired"]["difference"] == -0.5
    changes = {t["id"]: t["change"] for t in data["tasks"]}
    assert changes == {"gone": "only in A", "new": "only in B", "x": "pass -> fail",
                       "y": "same"}


def test_a_task_one_run_selected_but_never_ran_is_not_a_flip(tmp_path: Path) -> None:
    """B selected "late" but was stopped before it ran: it is in B's selection, without a
    result. Not paired, not a flip, listed apart (it used to count as pass -> fail)."""
    a, b = _pair(tmp_path, {"x": True, "late": True}, {"x": True})
    manifest = json.loads(b.manifest_path.read_text())
    manifest["tasks"].append({"id": "late", "fake_date": "2024-01-01", "tables": 1,
                              "skipped": None})
    b.write_manifest(manifest)
    c = compare_runs(a, b)
    late = next(t for t in c.tasks if t.task_id == "late")
    assert late.change is Change.ONLY_A and c.paired.tasks == 1
    assert not c.changed(Change.TO_FAIL)


@pytest.mark.slow
def test_reference_and_noop_runs_of_the_sample(tmp_path: Path,
                                               reference_run: ReferenceRun) -> None:
    """The real runs: two reference runs say no difference; reference against noop on the 4
    sample tasks is 4 flips, p = 0.125, not significant, so --fail-on-regression passes."""
    copy = tmp_path / "again"
    shutil.copytree(reference_run.run_dir, copy)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "spider2local", *args],
                              capture_output=True, text=True, check=False, cwd=tmp_path,
                              timeout=300)

    same = cli("compare", str(reference_run.run_dir), str(copy), "--fail-on-regression")
    assert same.returncode == 0, same.stderr
    assert "no difference detectable: with 4 tasks and 1 trial" in same.stdout
    assert "+0.0 points" in same.stdout
    noop = cli("run", "--agent", "noop", "--runs-dir", "runs", "--run-id", "noop")
    assert noop.returncode == 0, noop.stderr
    # two agents: compared as they are (a benchmark of agents), each named
    worse = cli("compare", str(reference_run.run_dir), str(tmp_path / "runs" / "noop"),
                "--fail-on-regression", "--format", "json")
    assert worse.returncode == 0, worse.stderr
    paired = json.loads(worse.stdout)["paired"]
    assert paired["tasks"] == 4 and paired["a_better"] == 4 and paired["difference"] == -1.0
    assert paired["p_value"] == pytest.approx(0.125) and not paired["significant"]
    assert "p = 0.125" in paired["sentence"] and "worse by" not in paired["sentence"]
    # Why noop fails: it builds nothing, so every graded table is absent (docs/scoring.md).
    report = cli("report", str(tmp_path / "runs" / "noop"), "--format", "json")
    assert report.returncode == 0, report.stderr
    classes = {t["task_id"]: t["failure_class"] for t in json.loads(report.stdout)["tasks"]}
    assert len(classes) == 4 and set(classes.values()) == {"table_missing"}, classes
    moves = json.loads(worse.stdout)["class_transitions"]
    assert moves == [{"from": "pass", "to": "table_missing", "trials": 4}]
    # What the runs of a folder know: noop alone never solves anything...
    alone = cli("tasks", "--runs-dir", "runs", "--json")
    assert alone.returncode == 0, alone.stderr
    (group,) = json.loads(alone.stdout)
    assert [t["flags"] for t in group["tasks"]] == [["never solved"]] * 4
    # ...and beside the reference run, every task is solved by one kit and not the other.
    shutil.copytree(reference_run.run_dir, tmp_path / "runs" / reference_run.run_dir.name)
    both = cli("tasks", "--runs-dir", "runs", "--json")
    assert both.returncode == 0, both.stderr
    (group,) = json.loads(both.stdout)
    assert len(group["runs"]) == 2 and len(group["tasks"]) == 4
    for task in group["tasks"]:
        by_kit = {k["kit"].split(" ")[0]: (k["trials_passed"], k["trials_run"])
                  for k in task["kits"]}
        assert by_kit == {"reference": (1, 1), "noop": (0, 1)}, task
        assert task["flags"] == [] and task["failure_classes"] == {"table_missing": 1}


def test_runs_of_two_agents_or_two_commands_are_compared_and_named(tmp_path: Path) -> None:
    from tests.run.test_merge import MANIFEST

    t = "2026-01-01T00:10:00+00:00"

    def command_run(name: str, agent: str, command: str | None) -> RunFolder:
        return make_run(tmp_path / name / "r", {"x": (True, t)}, agent=agent,
                        settings={**MANIFEST["settings"], "agent": agent,
                                  "agent_command": command,
                                  "agent_apis": ["openai"] if command else []})

    a = command_run("a", "command", "codex exec")
    b = command_run("b", "command", "gemini -p")
    c = command_run("c", "claude", None)
    same = command_run("d", "command", "codex exec")
    for other in (b, c):
        compared = compare_runs(a, other)
        assert compared.changed(Change.SAME)
        header = render_compare(compared).splitlines()[0]
        assert "agent command 'codex exec' with openai" in header and str(other.run_id) in header
        assert compare_json(compared)["agents"]["a"] == {"agent": "command",
                                                         "command": "codex exec",
                                                         "apis": ["openai"]}
    assert compare_runs(a, same).changed(Change.SAME)
    from spider2local.report.jsonout import report_json
    from spider2local.report.summary import load_report
    from spider2local.report.text import run_line

    report = load_report(a)
    assert report.agent_command == "codex exec"
    assert "agent command, command 'codex exec', apis openai" in run_line(report)
    assert report_json(report)["agent_command"] == "codex exec"
    assert report_json(report)["agent_apis"] == ["openai"]

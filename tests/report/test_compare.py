"""``compare``: flips, status changes, cost and time deltas of two runs of one dataset."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spider2local.exceptions import UserError
from spider2local.report.compare import (
    Change,
    compare_runs,
    render_compare,
    render_compare_markdown,
)
from spider2local.run.folder import RunFolder
from spider2local.run.results import ErrorKind, Stage, Status, TaskError, load_result, save_result
from tests.helpers import ReferenceRun
from tests.run.test_merge import make_run


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
    assert [d.task_id for d in c.changed(Change.TO_PASS)] == ["new", "up"]
    assert [d.task_id for d in c.changed(Change.TO_FAIL)] == ["down", "gone"]
    assert [d.task_id for d in c.changed(Change.STATUS)] == ["err"]
    assert [d.task_id for d in c.changed(Change.SAME)] == ["same"]
    text = render_compare(c)
    assert "pass -> fail: 2" in text and "fail -> pass: 2" in text
    assert "(not selected)" in text
    md = render_compare_markdown(c)
    assert "### pass → fail: 2" in md and "| down | passed (pass) | failed (fail) |" in md


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


def test_runs_of_two_agents_or_two_commands_are_refused_unless_forced(tmp_path: Path) -> None:
    from tests.run.test_merge import MANIFEST

    t = "2026-01-01T00:10:00+00:00"

    def command_run(name: str, agent: str, command: str | None) -> RunFolder:
        return make_run(tmp_path / name / "r", {"x": (True, t)}, agent=agent,
                        settings={**MANIFEST["settings"], "agent": agent,
                                  "agent_command": command})

    a = command_run("a", "command", "codex exec")
    b = command_run("b", "command", "gemini -p")
    c = command_run("c", "claude", None)
    same = command_run("d", "command", "codex exec")
    for other in (b, c):
        with pytest.raises(UserError, match="different agents") as caught:
            compare_runs(a, other)
        assert "codex exec" in str(caught.value)
        assert compare_runs(a, other, force=True).changed(Change.SAME)
    assert compare_runs(a, same).changed(Change.SAME)
    from spider2local.report.jsonout import report_json
    from spider2local.report.summary import load_report
    from spider2local.report.text import run_line

    report = load_report(a)
    assert report.agent_command == "codex exec"
    assert "agent command, command 'codex exec'" in run_line(report)
    assert report_json(report)["agent_command"] == "codex exec"

"""``report RUN --task ID``: one task whole, from its run folder alone; and, end to end with
real dbt, what a failed build leaves for the person debugging it (result.json's error line,
dbt/dbt.txt, report.html in the run folder)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import Result

from spider2local.core.results import Status, TaskResult, save_result
from spider2local.exceptions import UserError
from spider2local.report.summary import load_report
from spider2local.report.task import render_task
from spider2local.run.folder import RunFolder
from tests.helpers import write_task
from tests.report.test_html import _dbt_failure, _finished_task, _line

PARSER_ERROR = 'Parser Error: syntax error at or near "by"'
Ran = tuple[Path, subprocess.CompletedProcess[str]]


def cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spider2local", *args], cwd=cwd,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"},
                          capture_output=True, text=True, timeout=timeout, check=False)


def debugged_task(root: Path) -> RunFolder:
    """A finished run whose task t1 failed with a dbt error, a model it wrote, a verifier that
    answered twice and a transcript, as a run leaves them."""
    folder = _finished_task(root)
    task = folder.task_dir("t1")
    _dbt_failure(task, f"Runtime Error in model orders (models/orders.sql)\n  {PARSER_ERROR}")
    for side, sql in (("start_project", None), ("project", "select 1 as id group by by\n")):
        (task / side / "models").mkdir(parents=True)
        if sql:
            (task / side / "models" / "orders.sql").write_text(sql)
    with (task / "transcript.jsonl").open("w") as fh:
        for n, verdict in ((1, "VERDICT: FAIL the first time"), (2, "VERDICT: FAIL again")):
            fh.write(_line("AssistantMessage", {"content": [
                {"id": f"tu{n}", "name": "Agent", "input": {"subagent_type": "verifier"}}]}))
            fh.write(_line("UserMessage", {"content": [
                {"tool_use_id": f"tu{n}", "content": [{"type": "text", "text": verdict}]}]}))
    (task / "dbt" / "dbt.txt").write_text("12:00:00.000000 [error] Failure\n")
    return folder


def test_one_task_is_printed_whole(tmp_path: Path) -> None:
    folder = debugged_task(tmp_path / "runs" / "r")
    text = render_task(folder, load_report(folder), "t1")
    task = folder.task_dir("t1")
    assert text.startswith("task t1 in run r (agent claude, model m1)")
    assert "t1: failed, verdict fail, tables 0/1" in text
    assert "fake date 2024-01-01" in text
    assert "model.t.orders: Runtime Error in model orders" in text and PARSER_ERROR in text
    assert text.count(PARSER_ERROR) == 1  # the numbered record and its plain copy: once
    assert "models/orders.sql (added)" in text and "+select 1 as id group by by" in text
    assert "VERDICT: FAIL again" in text and "the first time" not in text  # the last report
    assert f"transcript  {task / 'transcript.jsonl'}" in text
    assert f"dbt log     {task / 'dbt' / 'dbt.txt'}" in text
    assert "graded      none kept (graded.duckdb)" in text
    assert "database    not kept: run --keep-db keeps it" in text
    assert "workspace   removed" in text
    assert "agent out" not in text  # not a command agent: nothing to name


def test_a_command_agents_output_and_trajectory_are_named_and_a_link_is_not(
        tmp_path: Path) -> None:
    folder = debugged_task(tmp_path / "runs" / "r")
    task = folder.task_dir("t1")
    (task / "agent.stdout").write_text("out\n")
    (task / "agent.trajectory.json").write_text("{}")
    (tmp_path / "secret").write_text("x")
    (task / "agent.stderr").symlink_to(tmp_path / "secret")
    text = render_task(folder, load_report(folder), "t1")
    assert f"agent out   {task / 'agent.stdout'}" in text
    assert f"trajectory  {task / 'agent.trajectory.json'}" in text
    assert "agent err" not in text  # a symlink in a run folder is not named as its file


def test_every_trial_is_printed_and_one_can_be_chosen(tmp_path: Path) -> None:
    folder = debugged_task(tmp_path / "runs" / "r")
    manifest = json.loads((folder.root / "run.json").read_text())
    folder.write_manifest({**manifest, "settings": {**manifest.get("settings", {}),
                                                     "trials": 2}})
    second = folder.trial_dir("t1", 2)
    second.mkdir(parents=True)
    save_result(second / "result.json", TaskResult(
        "t1", Status.PASSED, "noop", "2024-01-01", "2026-01-01T00:00:00+00:00",
        "2026-01-01T00:20:00+00:00", passed=True, tables_passed=1, tables_total=1, trial=2))
    report = load_report(folder)
    assert report.trials == 2
    text = render_task(folder, report, "t1")
    assert "t1#1: failed, verdict fail" in text and "t1#2: passed, verdict pass" in text
    only = render_task(folder, report, "t1", trial=2)
    assert "t1#2: passed" in only and "t1#1" not in only and PARSER_ERROR not in only
    with pytest.raises(UserError, match="no trial 3"):
        render_task(folder, report, "t1", trial=3)


def test_agent_text_cannot_drive_the_terminal(tmp_path: Path) -> None:
    folder = debugged_task(tmp_path / "runs" / "r")
    model = folder.task_dir("t1") / "project" / "models" / "orders.sql"
    model.write_text("select 1 -- \x1b]0;pwned\x07\x1b[2J\u202e\n")
    text = render_task(folder, load_report(folder), "t1")
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b]0;pwned" in text


def in_process(*args: str) -> Result:
    """The command line run in this process (click's runner): the quick way to check what a
    command prints and returns; the subprocess form is checked once below."""
    from click.testing import CliRunner

    from spider2local.cli.app import cli as app

    return CliRunner().invoke(app, list(args), catch_exceptions=False)


@pytest.mark.process
def test_an_unknown_task_is_one_line_and_exit_2(tmp_path: Path) -> None:
    debugged_task(tmp_path / "runs" / "r")
    proc = cli("report", "r", "--runs-dir", "runs", "--task", "nope", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "has no task 'nope' (its tasks: t1)" in proc.stderr


def test_task_flags_misused_are_one_line_and_exit_2(tmp_path: Path) -> None:
    folder = debugged_task(tmp_path / "runs" / "r")
    for extra, why in ((["--trial", "2"], "--trial needs --task"),
                       (["--task", "t1", "--format", "json"], "--task prints text")):
        done = in_process("report", str(folder.root), *extra)
        assert done.exit_code == 2 and why in done.stderr, done.stderr
    done = in_process("report", "latest", "--runs-dir", str(tmp_path / "runs"), "--task", "t1")
    assert done.exit_code == 0, done.stderr
    assert PARSER_ERROR in done.stdout and "VERDICT: FAIL again" in done.stdout


def test_report_rebuilds_the_runs_html_page_and_a_failure_only_warns(tmp_path: Path) -> None:
    folder = debugged_task(tmp_path / "runs" / "r")
    done = in_process("report", str(folder.root))
    assert done.exit_code == 0 and done.stderr == "", done.stderr
    page = folder.root / "report.html"
    assert page.is_file() and "syntax error at or near" in page.read_text()
    page.unlink()
    done = in_process("report", str(folder.root), "--format", "html", "-o",
                      str(tmp_path / "copy.html"))
    assert done.exit_code == 0 and page.read_text() == (tmp_path / "copy.html").read_text()
    page.unlink()
    page.mkdir()  # report.html cannot be written: one warning, the report still printed
    done = in_process("report", str(folder.root))
    assert done.exit_code == 0 and "t1" in done.stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("warning: ")
    assert "report.html not written" in done.stderr


# --- end to end: real dbt, the replay agent, a model with a syntax error --------------------

@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """``run`` of two tiny tasks by the replay agent: one model with a syntax error, one fine."""
    root = tmp_path_factory.mktemp("broken")
    (root / "ds" / "examples").mkdir(parents=True)
    for tid, sql in (("broken001", "select 1 as id group by by"), ("good001", "select 1 as id")):
        write_task(root / "ds", tid)
        (root / "replay" / tid / "models").mkdir(parents=True)
        (root / "replay" / tid / "models" / "orders.sql").write_text(sql + "\n")
    proc = cli("run", "--dataset", "ds", "--agent", "replay", "--replay-dir", "replay",
               "--runs-dir", "runs", "--run-id", "r1", "--jobs", "2", cwd=root, timeout=600)
    return root, proc


@pytest.mark.slow
def test_result_json_keeps_the_decisive_dbt_line(
        broken_run: Ran) -> None:
    root, proc = broken_run
    assert proc.returncode == 0, proc.stderr
    result = json.loads((root / "runs" / "r1" / "broken001" / "result.json").read_text())
    assert result["status"] == "failed"
    message = result["error"]["message"]
    assert message.startswith("dbt run failed (exit 1): Runtime Error in model orders")
    assert message.endswith(PARSER_ERROR)


@pytest.mark.slow
def test_the_task_folder_has_the_dbt_log_as_text(
        broken_run: Ran) -> None:
    root, _ = broken_run
    dbt = root / "runs" / "r1" / "broken001" / "dbt"
    raw, text = (dbt / "dbt.log").read_text(), (dbt / "dbt.txt").read_text()
    assert "\x1b[" in raw or "\\u001b[" in raw  # dbt colours its JSON events
    assert "\x1b" not in text and '{"data"' not in text
    assert PARSER_ERROR in text and "[error]" in text
    assert len(text) < len(raw) / 2


@pytest.mark.slow
def test_run_writes_report_html_and_report_task_explains_the_failure(
        broken_run: Ran) -> None:
    root, proc = broken_run
    page = root / "runs" / "r1" / "report.html"
    assert page.is_file() and f"report: {Path('runs') / 'r1' / 'report.html'}" in proc.stdout
    html = page.read_text()
    assert "broken001" in html and "good001" in html
    assert html.count("syntax error at or near &quot;by&quot;</pre>") <= 1
    task = cli("report", "latest", "--runs-dir", "runs", "--task", "broken001", cwd=root)
    assert task.returncode == 0, task.stderr
    out = task.stdout
    assert "broken001: failed, verdict fail, tables 0/1" in out
    assert "error at agent (agent):" in out and PARSER_ERROR in out
    assert "FAIL  orders: missing from the result" in out
    assert "model.broken001.orders: Runtime Error in model orders" in out
    assert "+select 1 as id group by by" in out
    assert str(root / "runs" / "r1" / "broken001" / "dbt" / "dbt.txt") in out or \
        "runs/r1/broken001/dbt/dbt.txt" in out

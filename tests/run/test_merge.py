"""``merge``: shard folders joined into one run, refused across experiments and datasets,
duplicates resolved to the newest result and said; the merged folder is a run others read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spider2local.core.results import Status, TaskResult, save_result
from spider2local.exceptions import UserError
from spider2local.report.summary import load_report
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import manifest_problem
from spider2local.run.merge import merge_runs
from spider2local.run.resume import remembered
from tests.helpers import TINY_SOLVE, by_task, manifest_json

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the run's bookkeeping (tests/conftest.py)."""

MANIFEST: dict[str, Any] = {
    "run_id": "r", "agent": "claude", "model": "m1", "suite": {"path": "/s", "sha256": "s"},
    "prompts_sha256": "p", "skills_sha256": "k", "dataset": "/d", "dataset_sha256": "D",
    "settings": {"timeout": 60.0, "max_turns": 10, "isolation": "not-needed"},
    "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T01:00:00+00:00",
    "sessions": [], "interrupted": False,
    "selection": {"ids": None, "subset": "all", "shard": "1/2", "limit": None}}


def make_run(root: Path, results: dict[str, tuple[bool, str]], **manifest: Any) -> RunFolder:
    """A finished run folder: task -> (passed, finished_at)."""
    folder = RunFolder(root)
    folder.create()
    tasks = [{"id": tid, "fake_date": "2024-01-01", "tables": 1, "skipped": None}
             for tid in sorted(results)]
    folder.write_manifest({**MANIFEST, "tasks": tasks, **manifest})
    for tid, (passed, finished) in results.items():
        folder.task_dir(tid).mkdir()
        (folder.task_dir(tid) / "transcript.jsonl").write_text(f"{root.parent.name}\n")
        save_result(folder.result_path(tid), TaskResult(
            tid, Status.PASSED if passed else Status.FAILED, "noop", "2024-01-01",
            "2026-01-01T00:00:00+00:00", finished, passed=passed, tables_passed=int(passed),
            tables_total=1))
    return folder


def test_shards_join_into_a_run_that_reports_and_resumes(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a" / "r", {"t1": (True, "2026-01-01T00:10:00+00:00")})
    b = make_run(tmp_path / "b" / "r", {"t2": (False, "2026-01-01T00:20:00+00:00")},
                 selection={**MANIFEST["selection"], "shard": "2/2"},
                 finished_at="2026-01-01T02:00:00+00:00")
    merged = merge_runs([a, b], RunFolder(tmp_path / "m" / "r"))
    assert merged.notes == ()
    manifest = manifest_json(merged.into)
    assert manifest is not None and manifest_problem(manifest) is None
    assert [t["id"] for t in manifest["tasks"]] == ["t1", "t2"]
    assert manifest["finished_at"] == "2026-01-01T02:00:00+00:00"
    assert manifest["selection"] == {"ids": None, "subset": "all", "limit": None, "shard": None}
    assert [m["kept"] for m in manifest["merged_from"]] == [["t1"], ["t2"]]
    report = load_report(merged.into)
    assert (report.rates.tasks_passed, report.rates.tasks_total) == (1, 2)
    # run --run-id resumes the whole run
    assert remembered(merged.into.read_manifest())["ids"] == ["t1", "t2"]
    assert not (merged.into.root / ".lock").exists()


def test_a_task_finished_twice_keeps_the_newest_and_says_so(tmp_path: Path) -> None:
    old = make_run(tmp_path / "old" / "r", {"t1": (False, "2026-01-01T00:10:00+00:00")})
    new = make_run(tmp_path / "new" / "r", {"t1": (True, "2026-01-01T00:30:00+00:00")})
    for order in ([new, old], [old, new]):
        into = RunFolder(tmp_path / f"m{len(list(tmp_path.iterdir()))}" / "r")
        merged = merge_runs(order, into)
        assert merged.kept == {("t1", 1): str(new.root)}
        assert len(merged.notes) == 1 and "t1" in merged.notes[0]
        assert f"kept {new.root}" in merged.notes[0] and f"dropped {old.root}" in merged.notes[0]
        assert (into.task_dir("t1") / "transcript.jsonl").read_text() == "new\n"
        result = into.load_result("t1")
        assert result is not None and result.passed


@pytest.mark.parametrize("change", [
    {"suite": {"path": "/s", "sha256": "other"}}, {"prompts_sha256": "q"},
    {"skills_sha256": "j"}, {"model": "m2"}, {"agent": "reference"},
    {"dataset_sha256": "E"}, {"settings": {**MANIFEST["settings"], "isolation": "namespace"}},
])
def test_different_experiments_are_refused_unless_forced(tmp_path: Path,
                                                         change: dict[str, Any]) -> None:
    a = make_run(tmp_path / "a" / "r", {"t1": (True, "2026-01-01T00:10:00+00:00")})
    b = make_run(tmp_path / "b" / "r", {"t2": (True, "2026-01-01T00:10:00+00:00")}, **change)
    with pytest.raises(UserError, match="not one experiment"):
        merge_runs([a, b], RunFolder(tmp_path / "m" / "r"))
    assert not (tmp_path / "m").exists()
    merged = merge_runs([a, b], RunFolder(tmp_path / "m" / "r"), force=True)
    assert merged.notes[0].startswith("forced: ")
    manifest = manifest_json(merged.into)
    assert manifest is not None and manifest["merge_differences"]


@pytest.mark.process
def test_merge_refuses_a_full_target_a_source_in_use_and_itself(tmp_path: Path) -> None:
    a = make_run(tmp_path / "a" / "r", {"t1": (True, "2026-01-01T00:10:00+00:00")})
    full = tmp_path / "full" / "r"
    full.mkdir(parents=True)
    (full / "x").write_text("mine")
    with pytest.raises(UserError, match="exists and is not empty"):
        merge_runs([a], RunFolder(full))
    with pytest.raises(UserError, match="also the --into"):
        merge_runs([a], a)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from spider2local.run.folder import RunFolder; from spider2local.run.lock import "
         "run_lock\nwith run_lock(RunFolder(Path(sys.argv[1]))):\n print('ok', flush=True)\n"
         " sys.stdin.read()", str(a.root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        with pytest.raises(UserError, match=f"still being written .pid {holder.pid}"):
            merge_runs([a], RunFolder(tmp_path / "m" / "r"))
    finally:
        holder.communicate("")
    merge_runs([a], RunFolder(tmp_path / "m" / "r"))


def _verdicts(run_dir: Path) -> tuple[Any, dict[str, tuple[str, str, int, int]]]:
    report = load_report(RunFolder(run_dir))
    return report.rates, {r.task_id: (str(r.status), str(r.verdict), r.tables_passed,
                                      r.tables_total) for r in report.rows}


@pytest.mark.slow
def test_three_shards_merge_into_the_unsharded_report(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """N = 3 here; N = 2 is the workflow's own test (tests/test_workflow.py). Five tiny tasks
    a command agent solves without dbt but for t2, which it leaves undone: the subject is the
    merge, and both verdicts are in the report it must rebuild."""
    dataset = str(tiny_dataset("t1", "t2", "t3", "t4", "t5"))
    agent = ("--agent", "command", "--agent-command",
             f'[ "$SPIDER2_TASK_ID" = t2 ] || {TINY_SOLVE}')
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PATH": str(Path(sys.executable).parent)}

    def run(*args: str) -> None:
        proc = subprocess.run(
            [sys.executable, "-m", "spider2local", "--dataset", dataset, "run", *agent,
             "--jobs", "2", "--keep-db", *args], cwd=tmp_path, capture_output=True, text=True,
            check=False, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr

    run("--runs-dir", "whole", "--run-id", "x")
    sources = []
    for k in (1, 2, 3):
        run("--shard", f"{k}/3", "--runs-dir", f"s{k}", "--run-id", "x")
        sources.append(str(tmp_path / f"s{k}" / "x"))
    proc = subprocess.run([sys.executable, "-m", "spider2local", "merge", *sources, "--into",
                           "merged/x", "--json"], cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["run_id"] == "x"
    merged, whole = _verdicts(tmp_path / "merged" / "x"), _verdicts(tmp_path / "whole" / "x")
    assert merged == whole
    assert {t: v[0] for t, v in merged[1].items()} == {
        "t1": "passed", "t2": "failed", "t3": "passed", "t4": "passed", "t5": "passed"}
    # the merged run.json carries every task's gold fingerprint: score RUN_DIR re-scores all
    rescored = subprocess.run([sys.executable, "-m", "spider2local", "score", "merged/x"],
                              cwd=tmp_path, capture_output=True, text=True, check=False,
                              timeout=300)
    assert rescored.returncode == 0, rescored.stderr
    assert "not re-scorable" not in rescored.stderr


def test_links_and_special_files_in_a_source_are_not_followed(tmp_path: Path) -> None:
    """A source is a downloaded artifact: a link in a task folder to a folder outside (``/``,
    a home) must not copy that folder into the merged run, and a FIFO must not stop the merge."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.txt").write_text("TOP-SECRET")
    a = make_run(tmp_path / "a" / "r", {"t1": (True, "2026-01-01T00:10:00+00:00")})
    task = a.task_dir("t1")
    (task / "home").symlink_to(outside)
    (task / "error.txt").symlink_to(outside / "deep" / "secret.txt")
    os.mkfifo(task / "pipe")
    merged = merge_runs([a], RunFolder(tmp_path / "m" / "r"))
    copied = merged.into.task_dir("t1")
    assert (copied / "transcript.jsonl").is_file() and merged.into.load_result("t1")
    assert not any("TOP-SECRET" in p.read_text() for p in copied.rglob("*")
                   if p.is_file() and not p.is_symlink())
    assert not any(p.is_symlink() for p in copied.rglob("*"))


def test_a_task_folder_that_is_a_link_is_not_a_result_of_the_run(tmp_path: Path) -> None:
    """A task folder replaced by a link to a folder elsewhere: its result is not this run's.
    Merge used to copy the tasks before it, then stop on it with a half-merged --into folder
    (no run.json, and a second merge refused as "not empty"); the report stopped on it too."""
    a = make_run(tmp_path / "a" / "r", {"t1": (True, "2026-01-01T00:10:00+00:00"),
                                        "t2": (True, "2026-01-01T00:10:00+00:00")})
    elsewhere = tmp_path / "elsewhere"
    a.task_dir("t2").rename(elsewhere)
    (a.root / "t2").symlink_to(elsewhere)
    assert sorted(by_task(a.trial_results())) == ["t1"]
    report = load_report(a)
    assert [(r.task_id, str(r.status)) for r in report.rows] == [("t1", "passed"),
                                                                  ("t2", "not run")]
    merged = merge_runs([a], RunFolder(tmp_path / "m" / "r"))
    assert merged.kept == {("t1", 1): str(a.root)} and merged.into.read_manifest() is not None
    assert not (merged.into.root / "t2").exists()


def test_an_unsealed_run_is_refused_next_to_a_sealed_one_unless_forced(tmp_path: Path) -> None:
    sealed = {"settings": {**MANIFEST["settings"], "isolation": "namespace"},
              "isolation": {"requested": "auto", "mode": "namespace", "reason": "works"}}
    unsealed = {"settings": {**MANIFEST["settings"], "isolation": "none"},
                "isolation": {"requested": "none", "mode": "none", "reason": "asked"}}
    a = make_run(tmp_path / "a" / "r", {"t1": (True, "2026-01-01T00:10:00+00:00")}, **sealed)
    b = make_run(tmp_path / "b" / "r", {"t2": (True, "2026-01-01T00:10:00+00:00")}, **unsealed)
    with pytest.raises(UserError, match=r"an unsealed run .* joined to a sealed one"):
        merge_runs([a, b], RunFolder(tmp_path / "m" / "r"))
    merged = merge_runs([a, b], RunFolder(tmp_path / "m" / "r"), force=True)
    assert any("unsealed" in note for note in merged.notes)
    # two unsealed shards are one (unsealed) experiment, and every report format says so
    c = make_run(tmp_path / "c" / "r", {"t3": (True, "2026-01-01T00:10:00+00:00")}, **unsealed)
    joined = merge_runs([b, c], RunFolder(tmp_path / "n" / "r"))
    from spider2local.report.jsonout import report_json
    from spider2local.report.junit import render_junit
    from spider2local.report.markdown import render_markdown
    from spider2local.report.text import run_line
    report = load_report(joined.into)
    assert report.unsealed and "UNSEALED" in run_line(report)
    assert report_json(report)["unsealed"] is True
    assert '<property name="sealed" value="false"' in render_junit(report)
    assert "UNSEALED" in render_markdown(report)
    from spider2local.report.html import render_html
    assert "UNSEALED" in render_html(report)
    assert not load_report(a).unsealed and "UNSEALED" not in run_line(load_report(a))


def test_a_run_that_recorded_no_isolation_is_unsealed_for_merge_as_for_its_report(
        tmp_path: Path) -> None:
    """Isolation is read one way: a run from before it was recorded (settings say
    ``namespace``, run.json has no ``isolation``) is unsealed in its report, so merging it
    with a sealed run is refused as an unsealed one."""
    sealed = {"settings": {**MANIFEST["settings"], "isolation": "namespace"},
              "isolation": {"requested": "auto", "mode": "namespace", "reason": "works"}}
    old = {"settings": {**MANIFEST["settings"], "isolation": "namespace"}}
    a = make_run(tmp_path / "a" / "r", {"t1": (True, "2026-01-01T00:10:00+00:00")}, **sealed)
    b = make_run(tmp_path / "b" / "r", {"t2": (True, "2026-01-01T00:10:00+00:00")}, **old)
    assert load_report(b).unsealed and not load_report(a).unsealed
    with pytest.raises(UserError, match=r"an unsealed run .* joined to a sealed one"):
        merge_runs([a, b], RunFolder(tmp_path / "m" / "r"))


def test_runs_of_two_commands_are_not_merged_unless_forced(tmp_path: Path) -> None:
    t = "2026-01-01T00:10:00+00:00"
    runs = [make_run(tmp_path / name / "r", {tid: (True, t)}, agent="command",
                     settings={**MANIFEST["settings"], "agent": "command",
                               "agent_command": command})
            for name, tid, command in (("a", "t1", "codex exec"), ("b", "t2", "gemini -p"))]
    with pytest.raises(UserError, match="agent_command"):
        merge_runs(runs, RunFolder(tmp_path / "m" / "r"))
    merged = merge_runs(runs, RunFolder(tmp_path / "f" / "r"), force=True)
    assert any("agent_command" in note for note in merged.notes)


def test_runs_of_one_command_served_different_apis_are_not_merged_unless_forced(
        tmp_path: Path) -> None:
    """The APIs a command agent was served are part of the experiment (another vendor's
    model behind the same command); a run from before they were recorded declared none."""
    t = "2026-01-01T00:10:00+00:00"

    def command_run(name: str, tid: str, apis: list[str] | None) -> RunFolder:
        settings = {**MANIFEST["settings"], "agent": "command", "agent_command": "mini -y"}
        if apis is not None:
            settings["agent_apis"] = apis
        return make_run(tmp_path / name / "r", {tid: (True, t)}, agent="command",
                        settings=settings)

    openai, anthropic = command_run("a", "t1", ["openai"]), command_run("b", "t2", ["anthropic"])
    with pytest.raises(UserError, match="agent_apis"):
        merge_runs([openai, anthropic], RunFolder(tmp_path / "m" / "r"))
    merged = merge_runs([openai, anthropic], RunFolder(tmp_path / "f" / "r"), force=True)
    assert any("agent_apis" in note for note in merged.notes)
    old, none = command_run("c", "t3", None), command_run("d", "t4", [])
    assert merge_runs([old, none], RunFolder(tmp_path / "n" / "r")).notes == ()


@pytest.mark.process
def test_a_merge_killed_half_way_is_started_over_by_the_next(tmp_path: Path) -> None:
    """kill -9 while the merged folder is written (its mark there, no run.json, no lock
    holder): the next merge into it starts over and gives the whole run, where it refused a
    folder the user never made."""
    import signal
    import time

    results = {f"t{i:03d}": (i % 2 == 0, "2026-01-01T00:10:00+00:00") for i in range(400)}
    source = make_run(tmp_path / "a" / "r", results)
    for tid in results:  # enough to copy that the kill lands in the middle
        (source.task_dir(tid) / "bulk.bin").write_bytes(b"x" * 200_000)
    into = tmp_path / "m" / "r"
    merging = subprocess.Popen([sys.executable, "-m", "spider2local", "merge",
                                str(source.root), "--into", str(into)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (into / "t005").exists() and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(merging.pid, signal.SIGKILL)
    merging.wait(10)
    assert (into / ".merging").is_file() and not (into / "run.json").exists()
    copied = sum(1 for _ in into.glob("t*/result.json"))
    assert 0 < copied < len(results)  # the kill did land half-way
    merged = merge_runs([source], RunFolder(into))
    assert len(merged.kept) == len(results)
    assert not (into / ".merging").exists()
    assert {r.task_id for r in load_report(RunFolder(into)).rows} == set(results)
    with pytest.raises(UserError, match="exists and is not empty"):  # a finished one stays
        merge_runs([source], RunFolder(into))

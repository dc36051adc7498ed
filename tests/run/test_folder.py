"""The run folder: ids, manifest, results found on disk, resets before a re-run."""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
from pathlib import Path

import pytest

from spider2local.core.layout import WORKSPACE_PREFIX as PREFIX
from spider2local.core.results import Status, TaskResult, save_result
from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder, new_run_id, open_run_dir
from spider2local.run.manifest import RunManifest, SelectedTask, tree_sha256
from spider2local.run.stale import recorded_workspaces
from spider2local.safepath import UnsafePath
from tests.helpers import by_task


def result(task_id: str, status: Status = Status.PASSED) -> TaskResult:
    return TaskResult(task_id=task_id, status=status, agent="noop", fake_date="2024-09-15",
                      started_at="2024-01-01T00:00:00+00:00",
                      finished_at="2024-01-01T00:00:01+00:00", passed=status is Status.PASSED)


def manifest(folder: RunFolder, previous: RunManifest | None = None) -> RunManifest:
    return RunManifest.begin(run_id=folder.run_id, agent="noop", settings={"jobs": 2},
                          suite_path=Path("/x/tasks.toml"), suite_sha256="abc",
                          dataset_root=Path("/data"),
                          tasks=[SelectedTask("a", "2024-09-15", 2),
                                 SelectedTask("b", "", 0, "excluded: broken")],
                          previous=previous, argv=["run"])


def test_run_id_is_a_timestamp_and_ids_are_checked(tmp_path: Path) -> None:
    assert new_run_id(dt.datetime(2026, 11, 30, 14, 25, 1)) == "20261130-142501"
    assert RunFolder.at(tmp_path, "my-run_1.2").root == tmp_path / "my-run_1.2"
    for bad in ("../x", "a/b", "", ".."):
        with pytest.raises(UserError, match="--run-id"):
            RunFolder.at(tmp_path, bad)


def test_manifest_records_versions_hashes_selection_and_sessions(tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path, "r1")
    first = manifest(folder)
    folder.write_manifest(first)
    data = folder.read_manifest()
    assert data is not None
    assert data == first  # what is written reads back as it was
    raw = data.to_json()
    assert raw["versions"]["duckdb"] and raw["versions"]["dbt-core"]
    assert raw["suite"] == {"path": "/x/tasks.toml", "sha256": "abc"}
    assert [t["id"] for t in raw["tasks"]] == ["a", "b"]
    assert raw["tasks"][1]["skipped"] == "excluded: broken"
    done = data.finish(interrupted=True)
    assert done.interrupted is True and done.finished_at
    assert done.sessions[-1].interrupted is True
    # A resume keeps the first start time and adds a session.
    second = manifest(folder, previous=done)
    assert second.started_at == first.started_at
    assert len(second.sessions) == 2 and second.sessions[1].finished_at is None


def test_results_skip_half_written_and_foreign_files(tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path, "r1")
    save_result(folder.result_path("a"), result("a"))
    save_result(folder.result_path("b"), result("b", Status.FAILED))
    folder.task_dir("c").mkdir()
    (folder.task_dir("c") / "result.json").write_text('{"task_id": "c", "sta')
    folder.task_dir("d").mkdir()
    (folder.task_dir("d") / "transcript.jsonl").write_text("{}\n")
    found = by_task(folder.trial_results())
    assert sorted(found) == ["a", "b"]
    assert found["b"].status is Status.FAILED
    assert folder.load_result("c") is None


def test_reset_task_clears_stale_artifacts(tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path, "r1")
    (folder.task_dir("a") / "dbt").mkdir(parents=True)
    (folder.task_dir("a") / "transcript.jsonl").write_text("old\n")
    fresh = folder.reset_trial("a")
    assert fresh.is_dir() and list(fresh.iterdir()) == []


def test_tree_hash_tracks_names_and_contents(tmp_path: Path) -> None:
    (tmp_path / "p" / "sub").mkdir(parents=True)
    (tmp_path / "p" / "sub" / "x.md").write_text("one")
    h1 = tree_sha256(tmp_path / "p")
    (tmp_path / "p" / "sub" / "x.md").write_text("two")
    h2 = tree_sha256(tmp_path / "p")
    (tmp_path / "p" / "sub" / "x.md").rename(tmp_path / "p" / "sub" / "y.md")
    assert len({h1, h2, tree_sha256(tmp_path / "p")}) == 3
    assert tree_sha256(tmp_path / "missing") is None


def test_open_run_dir_needs_a_manifest(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="run folder not found"):
        open_run_dir(tmp_path / "nope")
    (tmp_path / "r").mkdir()
    with pytest.raises(UserError, match=r"no readable run\.json"):
        open_run_dir(tmp_path / "r")
    (tmp_path / "r" / "run.json").write_text(json.dumps({"run_id": "r"}))
    assert open_run_dir(tmp_path / "r").run_id == "r"


def _sleeper(cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "300"], cwd=cwd, start_new_session=True)


@pytest.mark.process
def test_reset_task_reaps_and_removes_a_killed_runs_workspace(tmp_path: Path) -> None:
    """After a SIGKILL only the task folder names the old workspace: its processes are killed
    and the folder deleted; a recorded path that is not a workspace is never touched."""
    folder = RunFolder.at(tmp_path / "runs", "r1")
    stale = tmp_path / f"{PREFIX}a-x1y2"
    (stale / "a" / "models").mkdir(parents=True)
    (stale / "a" / "models" / "ro.sql").write_text("select 1")
    (stale / "a" / "models").chmod(0o500)  # agents can chmod: still removed
    earlier = tmp_path / f"{PREFIX}a-first"  # a retried attempt's, named in the transcript
    earlier.mkdir()
    foreign = tmp_path / "not-a-workspace"
    foreign.mkdir()
    procs = [_sleeper(stale / "a"), _sleeper(foreign)]
    try:
        task_dir = folder.task_dir("a")
        task_dir.mkdir(parents=True)
        (task_dir / "workspace.json").write_text(json.dumps({"task": "a", "root": str(stale)}))
        (task_dir / "transcript.jsonl").write_text("".join(
            json.dumps({"kind": "attempt", "data": {"workspace": str(p)}}) + "\n"
            for p in (earlier, foreign)) + "not json\n")
        assert recorded_workspaces(task_dir) == [stale, earlier, foreign]
        folder.reset_trial("a")
        assert procs[0].wait(5) == -signal.SIGTERM  # the kill policy: SIGTERM first
        assert not stale.exists() and not earlier.exists()
        assert foreign.is_dir() and procs[1].poll() is None
        assert list(folder.task_dir("a").iterdir()) == []
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(("text", "problem"), [
    ('{"settings": {"jobs": 1}, "tasks": 5}', "'tasks' is int, not list"),
    ('{"tasks": [5]}', "tasks entry 1 is not an object with an id"),
    ('{"tasks": [{"id": "a001", "tables": true}]}', "tasks entry 1: 'tables' is bool, not int"),
    ('{"tasks": [{"id": "../a001"}]}', "tasks entry 1: id '../a001' is not a plain folder name"),
    # a task listed twice counted twice: a 4-task run reported 6/6 passed
    ('{"tasks": [{"id": "a001"}, {"id": "b001"}, {"id": "a001"}]}',
     "tasks entry 3: id 'a001' is listed twice"),
    ('{"settings": "x"}', "'settings' is str, not dict"),
    ('{"sessions": 5}', "'sessions' is int, not list"),
    ('{"sessions": [1]}', "sessions must be a list of objects"),
    ("[]", "not a JSON object but list"),
    ('{"tasks": [', "not valid JSON"),
])
def test_a_broken_run_json_is_a_user_error_naming_it(tmp_path: Path, text: str,
                                                     problem: str) -> None:
    folder = RunFolder(tmp_path)
    assert folder.read_manifest() is None  # no run.json: a new run
    folder.manifest_path.write_text(text)
    with pytest.raises(UserError) as info:
        folder.read_manifest()
    assert str(info.value).startswith(f"{folder.manifest_path}: not a usable run.json: {problem}")


def test_task_dir_stays_inside_the_run_folder(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.root.mkdir()
    assert folder.task_dir("a001") == folder.root / "a001"
    (folder.root / "out").symlink_to(tmp_path)
    for bad in ("../x", "..", "a/b"):
        with pytest.raises(UnsafePath):
            folder.reset_trial(bad)
    # A task folder that is a link: the link goes (never what it points to), a real one comes.
    made = folder.reset_trial("out")
    assert made == folder.root / "out" and made.is_dir() and not made.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]

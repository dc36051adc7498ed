"""One invocation per run folder: the flock on <run>/.lock, held across processes."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from spider2local.agents.noop import NoopAgent
from spider2local.dataset.load import load_dataset
from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.lock import run_lock
from spider2local.run.plan import RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite
from tests.helpers import by_task

HOLDER = """
import sys
from pathlib import Path
from typing import Any
from spider2local.run.folder import RunFolder
from spider2local.run.lock import run_lock
with run_lock(RunFolder(Path(sys.argv[1]))):
    print("locked", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Callable[[RunFolder], subprocess.Popen[str]]]:
    """Another spider2local process holding a run's lock until killed."""
    procs: list[subprocess.Popen[str]] = []

    def start(folder: RunFolder) -> subprocess.Popen[str]:
        folder.create()
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder.root)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.process
def test_a_held_lock_names_the_holder_and_dies_with_it(
        tmp_path: Path, holder: Callable[[RunFolder], subprocess.Popen[str]]) -> None:
    folder = RunFolder.at(tmp_path, "r1")
    proc = holder(folder)
    with pytest.raises(UserError) as info, run_lock(folder):
        pass
    assert f"run r1 is in use by another spider2local process (pid {proc.pid})" in str(info.value)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with run_lock(folder):  # the kernel released it: a killed run never blocks its resume
        assert (folder.root / ".lock").read_text().strip().isdigit()
    with run_lock(folder):  # and a finished one released it too
        pass


@pytest.mark.process
def test_execute_run_refuses_a_run_in_use_and_touches_nothing(
        tiny_dataset: Callable[..., Path], tmp_path: Path,
        holder: Callable[[RunFolder], subprocess.Popen[str]]) -> None:
    data = load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1")))
    folder = RunFolder.at(tmp_path / "runs", "r")
    plan = RunPlan(folder, select_tasks(data), RunSettings(agent="noop"), NoopAgent,
                   data.suite.path, "sha", data.root)
    progress = Progress(io.StringIO(), live=False)
    proc = holder(folder)
    (folder.task_dir("t1")).mkdir()
    (folder.task_dir("t1") / "transcript.jsonl").write_text("the other run's\n")
    with pytest.raises(UserError, match=f"in use by another spider2local process .pid {proc.pid}"):
        anyio.run(execute_run, plan, progress)
    assert (folder.task_dir("t1") / "transcript.jsonl").read_text() == "the other run's\n"
    assert folder.read_manifest() is None
    proc.kill()
    proc.wait()
    outcome = anyio.run(execute_run, plan, progress)
    assert list(by_task(outcome.ran)) == ["t1"]


@pytest.mark.process
def test_taking_the_lock_recovers_what_a_killed_invocation_left(tmp_path: Path) -> None:
    """Any command on the run (it takes the lock) reaps and removes the workspaces of the
    unfinished tasks; a finished task's kept workspace and non-workspaces are left alone."""
    folder = RunFolder.at(tmp_path / "runs", "r")
    folder.create()
    stale = tmp_path / "spider2local-a-dead"
    (stale / "a").mkdir(parents=True)
    kept = tmp_path / "spider2local-b-kept"
    kept.mkdir()
    foreign = tmp_path / "not-a-workspace"
    foreign.mkdir()
    for tid, root in (("a", stale), ("b", kept), ("c", foreign)):
        folder.task_dir(tid).mkdir()
        (folder.task_dir(tid) / "workspace.json").write_text(json.dumps({"root": str(root)}))
    (folder.task_dir("b") / "result.json").write_text("{}")
    orphan = subprocess.Popen(["sleep", "300"], cwd=stale / "a", start_new_session=True)
    try:
        with run_lock(folder):
            assert orphan.wait(5) == -signal.SIGTERM
            assert not stale.exists()
            assert kept.is_dir() and foreign.is_dir()
    finally:
        orphan.kill()
        orphan.wait()


def test_the_lock_file_is_removed_when_the_invocation_ends(tmp_path: Path) -> None:
    """A finished run folder holds no .lock (it read as "still running"), also after an
    exception inside the block."""
    folder = RunFolder.at(tmp_path, "r")
    folder.create()
    with run_lock(folder):
        assert (folder.root / ".lock").is_file()
    assert not (folder.root / ".lock").exists()
    with pytest.raises(RuntimeError), run_lock(folder):
        raise RuntimeError("boom")
    assert sorted(p.name for p in folder.root.iterdir()) == []


def test_a_removed_lock_file_is_never_held_twice(tmp_path: Path) -> None:
    """The race a removable lock file opens: B opened the file before A unlinked it and locks
    the old inode once A lets go, while C creates and locks a new file. B must notice that its
    file is no longer the one at the path and lock C's, which C still holds."""
    import fcntl
    import os

    from spider2local.run import lock as lockmod

    folder = RunFolder.at(tmp_path, "r")
    folder.create()
    path = folder.root / ".lock"
    stale_fd = os.open(path, os.O_RDWR | os.O_CREAT)  # B's open of the old inode
    real_open = os.open
    calls = 0

    def open_stale_first(p: Any, flags: int, mode: int = 0o777) -> int:
        nonlocal calls
        calls += 1
        return os.dup(stale_fd) if calls == 1 else real_open(p, flags, mode)

    path.unlink()  # A ended and removed it
    c_fd = os.open(path, os.O_RDWR | os.O_CREAT)  # C made a new one and holds it
    fcntl.flock(c_fd, fcntl.LOCK_EX)
    try:
        mp = pytest.MonkeyPatch()
        mp.setattr(lockmod.os, "open", open_stale_first)
        try:
            with pytest.raises(UserError, match="in use by another"), run_lock(folder):
                pass
        finally:
            mp.undo()
        assert calls == 2  # B locked the stale inode, saw it was gone, tried the real one
    finally:
        os.close(c_fd)
        os.close(stale_fd)


def test_a_run_cannot_start_on_a_folder_while_merge_reads_it(tmp_path: Path) -> None:
    """merge holds a shared lock on each source for the whole copy (it only checked once
    before): an invocation starting on the run meanwhile refuses instead of writing results
    into a half-copied merge; the lock file merge made is gone afterwards."""
    from spider2local.run.lock import reading

    folder = RunFolder.at(tmp_path, "shard1")
    folder.create()
    with reading(folder), reading(folder), pytest.raises(  # readers share
            UserError, match="in use by another spider2local process"), run_lock(folder):
        pass
    assert not (folder.root / ".lock").exists()
    with run_lock(folder), pytest.raises(UserError, match="still being written"), \
            reading(folder):
        pass

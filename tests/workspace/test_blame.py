"""Whose fault is a full disk after the agent ran (:mod:`spider2local.workspace.blame`): the rule on
its figures, then on a real disk filled for real (a tmpfs in a user namespace), through the
runner and a resume."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from spider2local.core.faults import is_disk_full, is_machine_fault
from spider2local.exceptions import ScoringError
from spider2local.sandbox.reply import ReaderDuckDBError
from spider2local.workspace.blame import MIN_BLAMED_GROWTH, Room, agents_doing
from tests.helpers import tiny_disk_prefix

MiB = 2**20
LIMIT = 4096 * MiB


@pytest.mark.parametrize(("free", "grown", "blamed"), [
    (100 * MiB, 50 * MiB, True),  # half of what was free: the agent's
    (100 * MiB, 49 * MiB, False),  # something else took more than the agent did
    (1000 * MiB, 2 * MiB, False),  # the agent stayed small: another process filled it
    (20 * MiB, MIN_BLAMED_GROWTH, True),
    (20 * MiB, MIN_BLAMED_GROWTH - 1, False),  # under the floor: ordinary work
    (10 * MiB, 10 * MiB, False),  # already nearly full: any honest session fills it
])
def test_a_full_disk_is_the_agents_when_its_workspace_took_most_of_what_was_free(
        free: int, grown: int, blamed: bool) -> None:
    room = Room(free=free, used=3 * MiB)
    reason = agents_doing(room, room.used + grown, LIMIT, disk_full=True)
    assert (reason is not None) is blamed
    if reason is not None:
        assert f"grew by {grown / MiB:.0f} MiB" in reason
        assert f"{free / MiB:.0f} MiB was free when it was made" in reason


def test_other_faults_unmeasured_disks_and_the_size_limit() -> None:
    room = Room(free=40 * MiB, used=MiB)
    assert agents_doing(room, 40 * MiB, LIMIT, disk_full=False) is None  # a lock, EMFILE...
    assert agents_doing(None, 40 * MiB, LIMIT, disk_full=True) is None
    over = agents_doing(None, 5 * MiB, 2 * MiB, disk_full=False)  # past --workspace-size
    assert over is not None and "grew past --workspace-size (5 MiB > 2 MiB)" in over


def test_a_full_disk_is_read_through_our_wrappers_and_duckdbs_text() -> None:
    wrapped = ScoringError("x.duckdb: cannot checkpoint")
    wrapped.__cause__ = ReaderDuckDBError('IO Error: Could not write file "x.duckdb": '
                                          "No space left on device")
    assert is_disk_full(wrapped) and is_machine_fault(wrapped)
    quota = ScoringError("cannot write")
    quota.__context__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert is_disk_full(quota)
    assert not is_disk_full(OSError(errno.EMFILE, "Too many open files"))
    assert not is_disk_full(ValueError("No space left on device"))  # the agent's own text


@pytest.mark.process
def test_the_workspace_records_the_room_it_was_made_with(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    from spider2local.dataset.load import load_dataset
    from spider2local.suite.model import Suite
    from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace
    task = load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1"))).tasks[0]
    ws = prepare_workspace(task, artifacts=tmp_path / "a", parent=tmp_path)
    try:
        assert ws.room is not None and 0 < ws.room.used < 10 * MiB
        assert ws.room.free > 0
    finally:
        cleanup_workspace(ws)


BLAME_SCRIPT = r"""
import json, sys
from pathlib import Path
import anyio, duckdb
from spider2local.dataset.load import load_dataset
from spider2local.agents.contract import AgentOutcome
from spider2local.run.folder import RunFolder
from spider2local.run.plan import RunPlan, execute_run
from spider2local.run.selection import select_tasks
from spider2local.suite.model import Suite
from tests.helpers import by_task
from tests.run.test_runner import quiet, settings

root, disk, who = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
first = disk / "first-session"  # only the first session fills the disk
first.touch()
(disk / "ws").mkdir()

class Filler:
    # Does the task right, leaves 4 MB of it in a WAL (the checkpoint must write it), then
    # `dd` fills the disk: into the workspace ("agent"), or beside it ("other", another
    # process filling the disk while the agent stays small).
    name = "filler"
    async def run(self, ctx):
        con = duckdb.connect(str(ctx.workspace.database))
        con.execute("PRAGMA disable_checkpoint_on_shutdown")
        con.execute("SET checkpoint_threshold = '1GB'")
        con.execute("CREATE TABLE orders AS SELECT 1 AS id")
        con.execute("CREATE TABLE junk AS SELECT range AS n, md5(range::VARCHAR) AS s "
                    "FROM range(100000)")
        con.close()
        assert Path(str(ctx.workspace.database) + ".wal").stat().st_size > 2**20
        if first.exists():
            first.unlink()
            where = ctx.workspace.project_dir if who == "agent" else disk
            await anyio.run_process(["dd", "if=/dev/zero", f"of={where}/fill.bin", "bs=65536"],
                                    check=False)
        return AgentOutcome(acted=True)

suite = Suite(root.parent / "tasks.toml", root)
data = load_dataset(suite)
folder = RunFolder.at(root.parent / "runs", "blame")
plan = RunPlan(folder, select_tasks(data, ["t1"]), settings(workspace_parent=disk / "ws"),
               Filler, suite.path, "sha", root)
out = []
for _ in range(2):
    done = anyio.run(execute_run, plan, quiet())
    (disk / "fill.bin").unlink(missing_ok=True)  # the operator frees the disk
    out.append({"ran": {t: [r.status.value, r.error.kind.value if r.error else None,
                            r.error.stage.value if r.error else None,
                            r.error.message if r.error else None]
                        for t, r in by_task(done.ran).items()},
                "already_done": [t for t, _ in done.already_done]})
print(json.dumps(out))
"""


def _run_on_a_real_disk(root: Path, tmp_path: Path, who: str) -> list[dict[str, object]]:
    disk = tmp_path / "disk"
    proc = subprocess.run([*tiny_disk_prefix(disk, "48m"), sys.executable, "-c", BLAME_SCRIPT,
                           str(root), str(disk), who],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    runs: list[dict[str, object]] = json.loads(proc.stdout.splitlines()[-1])
    return runs


@pytest.mark.slow
def test_an_agent_that_fills_the_disk_and_leaves_a_wal_is_scored_not_re_rolled(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    """The workspace stays far under --workspace-size (4 GiB) on a 48 MiB disk it fills: the
    checkpoint of its WAL fails with ENOSPC, and that is the agent's doing, with the figures;
    the resume keeps the verdict instead of paying for another session."""
    first, second = _run_on_a_real_disk(tiny_dataset("t1"), tmp_path, "agent")
    status, kind, stage, message = first["ran"]["t1"]  # type: ignore[index]
    assert (status, kind, stage) == ("failed", "agent", "checkpoint"), message
    assert "No space left on device" in message
    assert "the agent filled the disk: its workspace grew by 4" in message  # 4x MiB of ~47
    assert "MiB was free when it was made" in message
    assert second == {"ran": {}, "already_done": ["t1"]}


@pytest.mark.slow
def test_a_disk_another_process_filled_while_the_agent_stayed_small_is_infrastructure(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    first, second = _run_on_a_real_disk(tiny_dataset("t1"), tmp_path, "other")
    status, kind, stage, message = first["ran"]["t1"]  # type: ignore[index]
    assert (status, kind, stage) == ("error", "infrastructure", "checkpoint"), message
    assert "No space left on device" in message
    # the disk is free again: the resume runs it again and scores it
    assert second == {"ran": {"t1": ["passed", None, None, None]}, "already_done": []}


HOLDER = ("import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
          "time.sleep(600)")


def _hold(db: Path) -> subprocess.Popen[bytes]:
    """A detached process (its own session, working in ``/``) holding ``db`` read-write."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], cwd="/",
                            start_new_session=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
    return proc


@pytest.mark.process
def test_a_lock_left_on_the_task_database_after_the_agent_stage_is_the_agents(
        tiny_dataset: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder the runner could not kill (here: not looked for) leaves the checkpoint a lock:
    the agent's failure, with the reason, never ``infrastructure`` (a free re-roll)."""
    import anyio

    from spider2local.agents.contract import AgentContext, AgentOutcome
    from spider2local.core.results import ErrorKind, Stage, Status
    from spider2local.dataset.load import load_dataset
    from spider2local.run import runner
    from spider2local.run.folder import RunFolder
    from spider2local.suite.model import Suite
    from tests.helpers import by_task
    from tests.run.test_runner import WriterAgent, quiet, settings

    monkeypatch.setattr(runner, "database_ids", lambda root, db: ())
    holders: list[subprocess.Popen[bytes]] = []

    class Holding(WriterAgent):
        # Popen, not anyio's process: the holder must outlive this session's event loop
        async def run(self, ctx: AgentContext) -> AgentOutcome:
            outcome = await super().run(ctx)
            holders.append(await anyio.to_thread.run_sync(_hold, ctx.workspace.database))
            return outcome

    tasks = list(load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1"))).tasks)
    try:
        done = by_task(anyio.run(runner.run_tasks, tasks, RunFolder.at(tmp_path, "r"),
                                 settings(), Holding, quiet()))
    finally:
        for proc in holders:
            proc.kill()
            proc.communicate()
    r = done["t1"]
    assert r.status is Status.FAILED and r.passed is False, r
    assert r.error is not None and r.error.kind is ErrorKind.AGENT
    assert r.error.stage is Stage.CHECKPOINT
    assert "still locked after the agent stage" in r.error.message
    assert "still locked by another process after" in r.error.message


@pytest.mark.process
def test_holders_are_found_by_the_file_they_hold_never_through_a_link(tmp_path: Path) -> None:
    from spider2local.proc.procfs import holding
    from spider2local.workspace.guard import database_ids
    db = tmp_path / "ws" / "t.duckdb"
    db.parent.mkdir()
    duckdb.connect(str(db)).close()
    outside = tmp_path / "outside.duckdb"
    duckdb.connect(str(outside)).close()
    with subprocess.Popen([sys.executable, "-c", HOLDER, str(outside)], cwd="/",
                          stdout=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline().startswith(b"ready")
            assert proc.pid not in holding(database_ids(db.parent, db))
            db.unlink()
            db.symlink_to(outside)  # the agent points its database at a file outside
            assert database_ids(db.parent, db) == ()
            info = outside.stat()
            assert proc.pid in holding([(info.st_dev, info.st_ino)])
        finally:
            proc.kill()

"""An agent must not be able to hang the run or crash it with what it leaves in its workspace.

Through the runner with in-process agents that leave exactly what a hostile agent's Bash would
(the files are what matters here, not how they were made): a FIFO as the database's WAL, graded
tables as views that never finish, a 1,200-level folder tree, FIFOs and sockets among the
project's files. Each task must end within its stage deadline plus a bounded grace, with a
result saying why, nothing left running, and a resume that works.
"""

from __future__ import annotations

import functools
import inspect
import io
import os
import re
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.core.results import ErrorKind, Stage, Status, TaskResult
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.exceptions import DeadlinePassed
from spider2local.integrity.scan import project_baseline
from spider2local.proc.watchdog import GRACE, bounded, watched
from spider2local.run.deadlines import StageCosts
from spider2local.run.folder import RunFolder
from spider2local.run.progress import Progress
from spider2local.run.runner import run_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite
from spider2local.workspace.collect import copy_text_files
from spider2local.workspace.tree import SpecialFile, read_regular, remove_tree, walk_files

DEPTH = 1200


@pytest.fixture
def tasks(tiny_dataset: Callable[..., Path], tmp_path: Path) -> list[TaskSpec]:
    root = tiny_dataset("t1", "t2")
    return list(load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks)


class LeavingAgent:
    """Does the work (the graded table, right), then leaves ``plant`` behind."""

    name = "leaving"

    def __init__(self, plant: Callable[[AgentContext], None], *, right: bool = True) -> None:
        self.plant, self.right = plant, right

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        con = duckdb.connect(str(ctx.workspace.database))
        con.execute(f"CREATE TABLE orders AS SELECT {1 if self.right else 7} AS id")
        con.close()
        self.plant(ctx)
        return AgentOutcome(acted=True)


def run(tasks: list[TaskSpec], folder: RunFolder, agent: Callable[[], LeavingAgent],
        parent: Path, costs: Mapping[str, StageCosts] | None = None,
        **kw: object) -> dict[str, TaskResult]:
    """``costs``: the measured stage costs by task (the run's baseline; none here by default,
    so the stages' deadlines are ``stage_timeout``)."""
    parent.mkdir(exist_ok=True)
    settings = RunSettings(**{"agent": "test", "jobs": 2, "timeout": 30.0, "retries": 0,
                              "workspace_parent": parent, **kw})  # type: ignore[arg-type]
    done = anyio.run(functools.partial(run_tasks, tasks, folder, settings, agent,
                                       Progress(io.StringIO(), live=False), costs=costs))
    return {tid: r for (tid, _), r in done.items()}  # one trial each here


def deep_tree(top: Path, depth: int = DEPTH) -> Path:
    """``top/d/d/.../d/leaf.sql`` ``depth`` folders deep, made by descriptors (``os.makedirs``
    itself recurses per level)."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open("leaf.sql", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"select 1\n")
        os.close(leaf)
    finally:
        os.close(fd)
    return top


@contextmanager
def recursion_headroom(frames: int) -> Iterator[None]:
    """Python's recursion limit set ``frames`` above the current depth: a tree deeper than
    that proves a walk iterative at a fraction of the cost of 1,200 real levels (each level
    costs milliseconds of system calls here)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def test_a_deep_tree_is_walked_copied_and_removed_without_recursion(tmp_path: Path) -> None:
    project = tmp_path / "ws" / "project"
    top = deep_tree(project / "models", depth=300)
    (top / "d" / "link").symlink_to("/")
    os.mkfifo(top / "fifo.sql")
    (top / "d" / "d").chmod(0o000)  # taken away by the agent: given back where needed
    with recursion_headroom(100):
        with pytest.raises(RecursionError):  # what the stdlib walks did
            sum(1 for _ in os.walk(project))
        (top / "d" / "d").chmod(0o755)
        files = list(walk_files(project))
        assert [p.name for p, _ in files] == ["leaf.sql"]  # no FIFO, no walk through /
        assert copy_text_files(project, tmp_path / "kept", root=tmp_path / "ws") == 0  # too deep
        assert list(project_baseline(project)) == [files[0][0].relative_to(project).as_posix()]
        (top / "d" / "d").chmod(0o000)
        remove_tree(tmp_path / "ws")
    assert not (tmp_path / "ws").exists()


def test_special_files_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "s"))
    try:
        for path in (fifo, tmp_path / "s", Path("/dev/zero")):
            with pytest.raises(SpecialFile):  # an OSError: skipped by every reader
                read_regular(path)
    finally:
        sock.close()
    (tmp_path / "ok").write_text("fine")
    assert read_regular(tmp_path / "ok") == b"fine"


def test_a_deadline_interrupts_a_query_that_never_ends(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "x.duckdb"))

    def endless() -> None:
        watched(con).execute("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                             "SELECT count(*) FROM r").fetchall()

    started = time.monotonic()
    with pytest.raises(DeadlinePassed, match=r"score did not finish within .* 0\.5s"):
        anyio.run(bounded, "score", 0.5, endless)
    assert time.monotonic() - started < 0.5 + GRACE
    assert con.execute("SELECT 42").fetchone() == (42,)  # interrupted, not broken
    con.close()


def test_a_stage_that_ignores_its_deadline_is_abandoned_after_the_grace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from spider2local.proc import watchdog
    monkeypatch.setattr(watchdog, "GRACE", 0.3)
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(DeadlinePassed, match="abandoned"):
        anyio.run(bounded, "collect", 0.2, release.wait, 30)
    release.set()
    assert time.monotonic() - started < 3


def fifo_wal(ctx: AgentContext) -> None:
    wal = ctx.workspace.database.with_name(ctx.workspace.database.name + ".wal")
    wal.unlink(missing_ok=True)
    os.mkfifo(wal)


def _orders_as_view(ctx: AgentContext, select: str) -> None:
    con = duckdb.connect(str(ctx.workspace.database))
    con.execute("DROP TABLE orders")
    con.execute(f"CREATE VIEW orders AS {select}")
    con.close()


def endless_view(ctx: AgentContext) -> None:
    _orders_as_view(ctx, "WITH RECURSIVE r(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM r) "
                         "SELECT id FROM r")


def cross_join(ctx: AgentContext) -> None:
    _orders_as_view(ctx, "SELECT a.range AS id FROM range(100000000) a, range(100000000) b")


@pytest.mark.process
@pytest.mark.parametrize(("plant", "stage"), [(fifo_wal, Stage.CHECKPOINT),
                                              (endless_view, Stage.SCORE),
                                              (cross_join, Stage.SCORE)])
def test_what_hangs_a_stage_fails_the_task_within_its_deadline(
        tasks: list[TaskSpec], tmp_path: Path, plant: Callable[[AgentContext], None],
        stage: Stage) -> None:
    folder = RunFolder.at(tmp_path / "runs", "hang")
    started = time.monotonic()
    # 6 s: the honest stages before the hang (a checkpoint child: 0.4 s idle, 2 s and more
    # on 2 cores under CI's load) must fit in it; the hanging one must still be cut there
    results = run(tasks[:1], folder, lambda: LeavingAgent(plant), tmp_path / "ws",
                  stage_timeout=6.0)
    assert time.monotonic() - started < 40
    r = results["t1"]
    assert r.status is Status.FAILED and r.passed is False, r
    assert r.error is not None and r.error.stage is stage and r.error.kind is ErrorKind.AGENT
    assert folder.load_result("t1") == r
    assert list((tmp_path / "ws").iterdir()) == []  # removed, nothing left behind
    if stage is Stage.SCORE:
        assert "did not finish within its deadline of 6s" in r.error.message
    else:
        assert "not a regular file" in r.error.message


@pytest.mark.slow
def test_a_deep_tree_and_special_files_neither_crash_nor_hang_the_run(
        tasks: list[TaskSpec], tmp_path: Path) -> None:
    def plant(ctx: AgentContext) -> None:
        project = ctx.workspace.project_dir
        deep_tree(project / "models" / "deep")
        os.mkfifo(project / "models" / "fifo.sql")
        os.mkfifo(project / "logs.sql")
        os.mknod(project / "models" / "sock.sql", 0o600 | stat.S_IFSOCK)

    folder = RunFolder.at(tmp_path / "runs", "deep")
    r = run(tasks[:1], folder, lambda: LeavingAgent(plant), tmp_path / "ws")["t1"]
    assert r.status is Status.PASSED and r.error is None, r
    assert list((tmp_path / "ws").iterdir()) == []
    kept = folder.task_dir("t1") / "project" / "models"
    assert (kept / "schema.yml").is_file() and not (kept / "fifo.sql").exists()
    assert max(len(p.relative_to(kept).parts) for p in kept.rglob("*")) <= 33
    # a resume of the same task (its run folder reset over the old artifacts) works too
    again = run(tasks[:1], folder, lambda: LeavingAgent(plant), tmp_path / "ws")["t1"]
    assert again.status is Status.PASSED


@pytest.mark.process
def test_a_workspace_grown_past_its_size_stops_the_agent_and_is_scored(
        tasks: list[TaskSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spider2local.run import runner
    monkeypatch.setattr(runner, "SIZE_POLL", 0.2)

    class Grower(LeavingAgent):
        async def run(self, ctx: AgentContext) -> AgentOutcome:
            await super().run(ctx)
            (ctx.workspace.project_dir / "junk.bin").write_bytes(os.urandom(3 * 2**20))
            await anyio.sleep(60)  # would hold the task for a minute
            return AgentOutcome(acted=True)

    started = time.monotonic()
    r = run(tasks[:1], RunFolder.at(tmp_path / "runs", "big"), lambda: Grower(lambda c: None),
            tmp_path / "ws", workspace_size=2**20, retries=2,
            keep_graded=False)["t1"]  # timed: no graded copy's child (one more interpreter)
    assert time.monotonic() - started < 30
    assert r.status is Status.PASSED and r.attempts == 1, r  # scored as it stands, once
    assert r.error is not None and r.error.kind is ErrorKind.AGENT
    assert re.search(r"grew past --workspace-size \([34] MiB > 1 MiB\)", r.error.message)


FILL_SCRIPT = r"""
import errno, sys, anyio, duckdb
from pathlib import Path
from tests.run.test_hangs import LeavingAgent, run
from spider2local.dataset.load import load_dataset
from spider2local.run.deadlines import StageCosts
from spider2local.agents.contract import AgentOutcome
from spider2local.run.folder import RunFolder
from spider2local.suite.model import Suite

root, disk, mine = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "agent"

class Filler(LeavingAgent):
    async def run(self, ctx):
        await super().run(ctx)
        where = ctx.workspace.project_dir if mine else disk
        try:
            with open(where / "fill.bin", "wb") as fh:
                while True:
                    fh.write(b"x" * 65536)
                    fh.flush()
        except OSError as exc:  # the CLI dies of ENOSPC: what the runner saw as a machine fault
            raise OSError(errno.ENOSPC, "No space left on device", str(where)) from exc

tasks = list(load_dataset(Suite(root.parent / "tasks.toml", root)).tasks)[:1]
r = run(tasks, RunFolder.at(root.parent / "runs", "fill"), lambda: Filler(lambda c: None),
        disk / "ws", workspace_size=2 * 2**20, retries=1, retry_backoff=0.01)["t1"]
print(r.status.value, r.error.kind.value if r.error else None, r.attempts)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("who", "expected"), [("agent", "passed agent 1"),
                                               ("ours", "error infrastructure 2")])
def test_a_disk_the_agent_filled_is_scored_and_one_we_filled_is_infrastructure(
        tiny_dataset: Callable[..., Path], tmp_path: Path, who: str, expected: str) -> None:
    """The workspace on a real 16 MiB disk (tmpfs in a user namespace) and --workspace-size
    2 MiB: filled from inside the workspace, the agent's doing (no free re-roll); filled
    beside it, the machine's (retried, and re-run by a resume)."""
    import subprocess

    from tests.helpers import tiny_disk_prefix
    root = tiny_dataset("t1")
    disk = tmp_path / "disk"
    proc = subprocess.run([*tiny_disk_prefix(disk, "16m"), sys.executable, "-c", FILL_SCRIPT,
                           str(root), str(disk), who],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[-2] == expected, proc.stdout + proc.stderr

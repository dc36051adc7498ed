"""proc.kill: one kill policy, whichever way the processes to kill are found.

The three cleanups (a run_process group, a workspace's stragglers, a Claude session) are driven
through their public callers, so a caller that kills its own way fails here.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import anyio
import pytest

from spider2local.proc import kill, procfs
from spider2local.proc import reap as reap_mod
from spider2local.proc.run import kill_process_group
from spider2local.seal import processes as support

pytestmark = pytest.mark.process

PY = sys.executable
GRACE = 0.5

CHILD = """
import os, pathlib, signal, sys, time
mode, ready, termed = sys.argv[1:4]
def on_term(*_):
    pathlib.Path(termed).write_text("TERM")
    if mode == "trap":
        sys.exit(0)  # a clean shutdown: what SIGTERM first is for
signal.signal(signal.SIGTERM, on_term if mode != "plain" else signal.SIG_DFL)
pathlib.Path(ready).write_text(str(os.getpid()))
time.sleep(120)
"""
"""``trap``: writes ``termed`` on SIGTERM and exits 0. ``ignore``: writes ``termed`` on SIGTERM
and keeps running (only SIGKILL stops it). ``plain``: default SIGTERM action. Each writes
``ready`` once its handler is installed."""


def _spawn(mode: str, folder: Path, *, cwd: Path, env: dict[str, str],
           process_group: int) -> subprocess.Popen[bytes]:
    ready, termed = folder / f"{mode}.ready", folder / f"{mode}.termed"
    child = subprocess.Popen([PY, "-c", CHILD, mode, str(ready), str(termed)], cwd=cwd, env=env,
                             process_group=process_group)
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert time.monotonic() < deadline and child.poll() is None, f"{mode} child never ready"
        time.sleep(0.02)
    return child


def _shm(pid: int) -> tuple[Path, Path]:
    return Path(f"/dev/shm/faketime_shm_{pid}"), Path(f"/dev/shm/sem.faketime_sem_{pid}")


@dataclass(frozen=True)
class Targets:
    """Two children findable all three ways (same process group, working folder and
    environment marker), and a bystander findable by none."""

    root: Path
    notes: Path
    marker: str
    trapper: subprocess.Popen[bytes]
    ignorer: subprocess.Popen[bytes]
    bystander: subprocess.Popen[bytes]

    @property
    def pgid(self) -> int:
        return self.ignorer.pid

    def termed(self, mode: str) -> bool:
        """Whether the ``mode`` child's SIGTERM handler ran."""
        return (self.notes / f"{mode}.termed").exists()


@pytest.fixture
def targets(tmp_path: Path) -> Iterator[Targets]:
    root, elsewhere, notes = tmp_path / "ws", tmp_path / "elsewhere", tmp_path / "notes"
    for folder in (root, elsewhere, notes):
        folder.mkdir()
    marker = f"test-{os.getpid()}-{time.monotonic_ns()}"
    plain_env = {k: v for k, v in os.environ.items() if k != support.MARKER_ENV}
    marked_env = {**plain_env, support.MARKER_ENV: marker}
    ignorer = _spawn("ignore", notes, cwd=root, env=marked_env, process_group=0)
    children = [ignorer]
    try:
        children.append(_spawn("trap", notes, cwd=root, env=marked_env,
                               process_group=ignorer.pid))
        children.append(_spawn("plain", notes, cwd=elsewhere, env=plain_env, process_group=0))
        yield Targets(root, notes, marker, children[1], ignorer, children[2])
    finally:
        for child in children:
            child.kill()
            child.wait()
            for path in _shm(child.pid):
                path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Caller:
    """One of the three cleanups as its callers use it: kills ``targets``, returns what the
    caller returns, and what that should be."""

    kill: Callable[[Targets], object]
    expected: Callable[[Targets], object]


def _pids(t: Targets) -> list[int]:
    return sorted([t.trapper.pid, t.ignorer.pid])


def _async(fn: Callable[[Targets], Awaitable[object]]) -> Callable[[Targets], object]:
    return lambda t: anyio.run(fn, t)


def _sorted(result: object) -> object:
    return sorted(result) if isinstance(result, list) else result


CALLERS = {
    "process group (run_process)": Caller(
        _async(lambda t: kill_process_group(t.pgid, grace=GRACE)), lambda t: True),
    "working folder (reap, sync)": Caller(
        lambda t: reap_mod.reap(t.root), _pids),
    "working folder (areap, async)": Caller(
        _async(lambda t: reap_mod.areap(t.root)), _pids),
    "environment marker (Claude sweep)": Caller(
        _async(lambda t: support.sweep(t.marker, grace=GRACE)), _pids),
}


@pytest.mark.parametrize("caller", list(CALLERS.values()), ids=list(CALLERS))
def test_every_finder_gets_the_same_kill_policy(
        caller: Caller, targets: Targets, monkeypatch: pytest.MonkeyPatch) -> None:
    shm = [*_shm(targets.trapper.pid), *_shm(targets.ignorer.pid)]
    bystander_shm = _shm(targets.bystander.pid)[0]
    for path in [*shm, bystander_shm]:
        path.write_bytes(b"leftover")
    # Our own process works inside the folder too: the cwd finder must still spare it.
    monkeypatch.chdir(targets.root)
    terms_to_us: list[int] = []

    def record(signum: int, frame: FrameType | None) -> None:
        terms_to_us.append(signum)

    previous = signal.signal(signal.SIGTERM, record)
    try:
        returned = caller.kill(targets)
    finally:
        signal.signal(signal.SIGTERM, previous)

    assert targets.termed("trap"), "SIGTERM was not sent first"
    assert targets.trapper.wait(timeout=10) == 0  # it shut down cleanly on SIGTERM
    assert targets.termed("ignore")  # it got SIGTERM too, ignored it...
    assert targets.ignorer.wait(timeout=10) == -signal.SIGKILL  # ...and died by SIGKILL
    assert [p for p in shm if p.exists()] == [], "libfaketime leftovers not removed"
    assert _sorted(returned) == caller.expected(targets)
    assert terms_to_us == []
    assert targets.bystander.poll() is None and not targets.termed("plain")
    assert bystander_shm.exists()  # only the signalled pids' leftovers go


# The policy itself, through proc.kill and the finders of proc.procfs.


def test_our_own_pid_is_never_signalled_whatever_the_finder_says(tmp_path: Path) -> None:
    # In a child interpreter: if the policy broke, it would kill that child, not the tests.
    script = ("import os\n"
              "from spider2local.proc.kill import kill_processes\n"
              "print(kill_processes(lambda: [os.getpid()], grace=0.1, kill_wait=0.1))\n")
    done = subprocess.run([PY, "-c", script], capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout.strip()) == (
        0, "KillResult(signalled=(), gone=True)"), done.stderr


def test_a_zombie_does_not_count_and_is_not_signalled() -> None:
    child = subprocess.Popen(["true"], process_group=0)
    try:
        deadline = time.monotonic() + 10
        while (procfs.stat_fields(child.pid) or ["?"])[0] != "Z":
            assert time.monotonic() < deadline, "child never became a zombie"
            time.sleep(0.02)
        result = kill.kill_processes(functools.partial(procfs.group_members, child.pid),
                                     grace=0.1)
        assert result == kill.KillResult(signalled=(), gone=True)
    finally:
        assert child.wait(timeout=10) == 0  # exited by itself: nobody signalled it


def test_a_process_that_forks_when_terminated_is_killed_with_its_offspring(
        tmp_path: Path) -> None:
    # Adversarial: each SIGTERM makes it start a new TERM-immune child in the same folder.
    pidfile = tmp_path / "spawned"
    script = (f"trap '(trap \"\" TERM; exec sleep 120) & echo $! >> {pidfile}' TERM; "
              f"echo ready > {tmp_path}/ready; while :; do sleep 0.05; done")
    shell = subprocess.Popen(["sh", "-c", script], cwd=tmp_path, process_group=0)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "ready").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        result = kill.kill_processes(functools.partial(procfs.working_in, tmp_path), grace=0.5)
        spawned = [int(line) for line in pidfile.read_text().split()]
        assert spawned, "the shell never saw SIGTERM"
        assert result.gone and procfs.working_in(tmp_path) == []
        assert {shell.pid, *spawned} <= set(result.signalled)
        assert shell.wait(timeout=10) == -signal.SIGKILL
    finally:
        shell.kill()
        shell.wait()


def test_async_kill_lets_the_event_loop_run_and_survives_cancellation(
        targets: Targets) -> None:
    """A task runs while the policy waits out its grace (the loop is not blocked), and
    cancelling the caller mid-grace does not leave the TERM-immune child alive."""
    seen_during_grace: list[bool] = []
    results: list[kill.KillResult] = []
    find = functools.partial(procfs.carrying_env, support.MARKER_ENV, targets.marker)

    async def killer() -> None:
        results.append(await kill.akill_processes(find, grace=2.0))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(killer)
            with anyio.fail_after(10):
                while not targets.termed("ignore"):  # noqa: ASYNC110 (a file, no event)
                    await anyio.sleep(0.01)
            seen_during_grace.append(targets.ignorer.poll() is None and not results)
            tg.cancel_scope.cancel()

    anyio.run(main)
    assert seen_during_grace == [True]
    assert targets.ignorer.wait(timeout=10) == -signal.SIGKILL
    assert targets.trapper.wait(timeout=10) == 0
    assert results and results[0].gone
    assert sorted(results[0].signalled) == _pids(targets)


def test_finders_find_exactly_their_processes(targets: Targets) -> None:
    pair = _pids(targets)
    assert sorted(procfs.group_members(targets.pgid)) == pair
    assert sorted(procfs.working_in(targets.root)) == pair
    assert sorted(procfs.carrying_env(support.MARKER_ENV, targets.marker)) == pair
    # A sibling folder sharing the prefix is not "inside".
    assert procfs.working_in(Path(str(targets.root) + "x")) == []
    assert procfs.carrying_env(support.MARKER_ENV, targets.marker + "x") == []


def test_a_hurried_kill_skips_the_grace_until_the_next_run_starts() -> None:
    """A second Ctrl-C hurries every kill of that shutdown; the next run in the same process
    (``until_signal`` calls :func:`kill.unhurry`) gives processes their grace again."""
    def stubborn() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", "import signal, time; "
                                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                 "print('ready', flush=True); time.sleep(60)"],
                                stdout=subprocess.PIPE)

    def kill_one(proc: subprocess.Popen[bytes]) -> float:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        started = time.monotonic()
        result = kill.kill_processes(lambda: [proc.pid] if proc.poll() is None else [],
                                     grace=1.5)
        assert result.gone
        return time.monotonic() - started

    try:
        kill.hurry()
        hurried = kill_one(stubborn())
        kill.unhurry()
        calm = kill_one(stubborn())
    finally:
        kill.unhurry()
    assert hurried < 1.0 <= calm

"""Out of memory is the machine's fault: never a verdict, never a hang, never a traceback.

Issue 33, item 6: under ``ulimit -v 450000`` a reference run scored a task ``failed`` (kind
agent) because dbt's thread pool could not start a thread, and under ``ulimit -v 330000`` the
run, every task recorded, spun forever importing scipy's OpenBLAS for the summary.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spider2local.cli.exits import NO_MEMORY
from spider2local.core.faults import (
    died_of_memory,
    is_machine_failure,
    is_machine_fault,
    is_out_of_memory,
)


def test_dbt_that_could_not_start_a_thread_or_was_killed_is_the_machines_fault() -> None:
    """The text dbt printed under ``ulimit -v 450000``, and the exits of a SIGKILL we did
    not send (the dbt shim's shell reports 137, a direct child -9)."""
    assert is_machine_failure(2, "dbt run failed (exit 2): can't start new thread")
    assert is_machine_failure(2, "Traceback (most recent call last):\n...\nMemoryError")
    # glibc's loader, when a thread's thread-local block cannot be had (dbt, ulimit -v 330000)
    assert is_machine_failure(
        127, "dbt run failed (exit 127): cannot allocate memory for thread-local data: ABORT")
    # the same words from a model (select error('...'), written by the agent) exit 1: a verdict;
    # and a library too big for glibc's static TLS block fails alike on every run
    assert not is_machine_failure(
        1, "Runtime Error in model m: cannot allocate memory for thread-local data: ABORT")
    assert not is_machine_failure(1, "Runtime Error in model m: cannot allocate memory")
    assert not is_machine_failure(
        127, "libx.so: cannot allocate memory in static TLS block")
    assert is_machine_failure(137, "")
    assert is_machine_failure(-signal.SIGKILL, "")
    assert not is_machine_failure(1, "Compilation Error in model orders")
    assert not is_machine_failure(2, "Database Error: column MemoryErrorCount not found")


def test_a_readers_death_of_memory_is_told_from_a_full_disk() -> None:
    assert died_of_memory(137, "")
    assert died_of_memory(1, "duckdb.OutOfMemoryException: Out of Memory Error: failed")
    assert died_of_memory(127, "cannot allocate memory for thread-local data: ABORT")
    assert not died_of_memory(1, "cannot allocate memory for thread-local data: ABORT")
    assert not died_of_memory(1, "OSError: [Errno 28] No space left on device")
    assert not died_of_memory(1, "ValueError: bad request")


def test_running_out_of_memory_is_found_inside_exception_groups() -> None:
    group = BaseExceptionGroup("task group", [ValueError("x"), MemoryError()])
    assert is_out_of_memory(group) and is_machine_fault(group)
    thread = RuntimeError("can't start new thread")
    assert is_out_of_memory(thread)
    assert not is_out_of_memory(RuntimeError("something else"))


@pytest.mark.parametrize(("returncode", "stderr", "machine"), [
    (137, "", True),  # SIGKILL through the launcher's shell: the OOM killer
    (-signal.SIGKILL, "", True),
    (1, "Traceback (most recent call last):\n  ...\nMemoryError", True),
    (1, "_duckdb.OutOfMemoryException: Out of Memory Error: could not allocate", True),
    (1, "ValueError: bad request", False),
    (1, "OSError: [Errno 28] No space left on device", False),  # left to blame
])
def test_a_reader_child_that_dies_of_memory_is_infrastructure(
        monkeypatch: pytest.MonkeyPatch, returncode: int, stderr: str, machine: bool) -> None:
    """A reader child that died without its answer raises :class:`ReaderFailed`; when it
    died of memory the one classifier must record that as the machine's fault."""
    import anyio

    from spider2local.proc.run import ProcessResult
    from spider2local.sandbox import readers

    async def fake_run_reader(argv: object, files: object, **_: object) -> ProcessResult:
        return ProcessResult(args=("python",), pid=1, returncode=returncode, stdout="",
                             stderr=stderr, duration=0.1, timed_out=False)

    monkeypatch.setattr(readers, "run_reader", fake_run_reader)
    with pytest.raises(readers.ReaderFailed) as caught:
        anyio.run(lambda: readers.ask_reader("some.module", {}, None,  # type: ignore[arg-type]
                                             timeout=10))
    assert is_machine_fault(caught.value) is machine


def test_the_cli_ends_with_one_line_when_the_runner_runs_out_of_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from spider2local.cli import app
    from spider2local.cli.exits import NO_MEMORY

    @app.cli.command("oom-probe")
    def _probe() -> None:
        raise BaseExceptionGroup("task group", [MemoryError()])  # type: ignore[misc]

    try:
        out = CliRunner().invoke(app.cli, ["oom-probe"])
    finally:
        app.cli.commands.pop("oom-probe")
    assert out.exit_code == NO_MEMORY, out.output
    assert "Traceback" not in out.output
    assert out.stderr.strip().splitlines() == [
        line for line in out.stderr.strip().splitlines() if "not enough memory" in line]


MEMORY_WORDS = re.compile(r"memory|start new thread|killed|exit 137", re.IGNORECASE)


@pytest.mark.slow
@pytest.mark.parametrize("kib", [450_000, 330_000])
def test_a_reference_run_under_a_memory_limit_records_no_verdict_and_ends(
        tmp_path: Path, kib: int) -> None:
    """The issue's two runs, end to end, under ``ulimit -v`` (DuckDB and dbt run out of
    memory). Before: at 450000 a task scored ``failed``, kind agent ("can't start new
    thread"); at 330000 the run, every task recorded, spun forever importing scipy for its
    summary. Now every task is ``passed`` or ``error``/infrastructure and the run returns:
    with its summary (exit 0) or, when the runner itself cannot go on, one line (exit 3)."""
    command = (f"ulimit -v {kib}; exec {shlex.quote(sys.executable)} -m spider2local "
               "--dataset sample run fleet001 library001 --agent reference --jobs 2 "
               "--retries 0 --no-color")
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    elapsed = time.monotonic() - started
    assert elapsed < 300
    assert done.returncode in (0, NO_MEMORY), done.stderr[-3000:]
    assert not [line for line in done.stderr.splitlines() if line.startswith("Traceback")]
    if done.returncode == NO_MEMORY:
        assert done.stderr.strip().splitlines()[-1].startswith(
            "spider2local: error: not enough memory")
    results = [json.loads(p.read_text()) for p in tmp_path.glob("runs/*/*/result.json")]
    for result in results:
        error = result.get("error") or {}
        verdict = (result["status"], error.get("kind"), error.get("message", ""))
        assert result["status"] in ("passed", "failed", "error"), verdict
        if result["status"] == "failed":  # a verdict, then never one the machine caused
            tables = (result.get("score") or {}).get("tables", [])
            said = " ".join([verdict[2], *(str(t.get("error") or "") for t in tables)])
            assert not MEMORY_WORDS.search(said), verdict
        if result["status"] == "error":
            assert error.get("kind") == "infrastructure", verdict
    if done.returncode == 0:
        assert len(results) == 2, done.stdout


@pytest.mark.parametrize(("returncode", "timed_out", "machine"), [
    (137, False, True),  # the kernel killed dbt (through the shim's shell)
    (-signal.SIGKILL, False, True),
    (-signal.SIGKILL, True, False),  # our own timeout's kill: the agent's verdict
    (1, False, False),
])
def test_a_dbt_build_killed_by_the_kernel_is_infrastructure_but_a_timeout_is_not(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, returncode: int, timed_out: bool,
        machine: bool) -> None:
    import types

    import anyio

    from spider2local.agents import applying
    from spider2local.clock.dbt import DbtResult

    async def fake_run_dbt(project: Path, args: list[str], **_: object) -> DbtResult:
        return DbtResult(args=tuple(args), returncode=returncode, models=(), duration=1.0,
                         timed_out=timed_out, stdout_tail="", stderr_tail="",
                         run_results_path=None)

    monkeypatch.setattr(applying, "run_dbt", fake_run_dbt)
    ctx = types.SimpleNamespace(
        workspace=types.SimpleNamespace(project_dir=tmp_path, env={}, artifacts=tmp_path),
        transcript=types.SimpleNamespace(append=lambda *_: None),
        limits=types.SimpleNamespace(timeout=10.0))
    outcome = anyio.run(applying.build, ctx)
    assert outcome.error is not None
    assert outcome.infrastructure is machine, outcome.error

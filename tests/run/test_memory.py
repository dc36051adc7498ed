"""Out of memory is the machine's fault: never a verdict, never a hang, never a traceback.

Issue 33, item 6: under ``ulimit -v 450000`` a reference run scored a task ``failed`` (kind
agent) because dbt's thread pool could not start a thread, and under ``ulimit -v 330000`` the
run, every task recorded, spun forever importing scipy's OpenBLAS for the summary.
"""

from __future__ import annotations

import signal

import pytest

from spider2local.run.faults import (
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
    assert is_machine_failure(137, "")
    assert is_machine_failure(-signal.SIGKILL, "")
    assert not is_machine_failure(1, "Compilation Error in model orders")
    assert not is_machine_failure(2, "Database Error: column MemoryErrorCount not found")


def test_a_readers_death_of_memory_is_told_from_a_full_disk() -> None:
    assert died_of_memory(137, "")
    assert died_of_memory(1, "duckdb.OutOfMemoryException: Out of Memory Error: failed")
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

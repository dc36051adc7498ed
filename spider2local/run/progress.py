"""What a run prints while it works: a live block of lines on a terminal, plain lines in CI.

On a TTY every running task has one line (stage, elapsed seconds, turns so far) redrawn in place
twice a second, and finished tasks scroll above it. Anywhere else (CI logs, pipes, files) each
event is one timestamped line and nothing is redrawn, because escape codes make logs unreadable.
Everything goes to stderr: stdout is kept for the final table and machine-readable output.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import anyio

from spider2local.run.contract import UsageMeter
from spider2local.run.results import Stage, TaskResult
from spider2local.run.resume import is_finished

REFRESH = 0.5


@dataclass
class _Running:
    stage: str
    started: float
    meter: UsageMeter | None = None


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes \
        else f"{secs}s"


class Progress:
    """Receives the runner's events; ``live`` (default: the stream is a TTY) redraws in place."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None,
                 quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.quiet = quiet
        self.running: dict[str, _Running] = {}
        self._drawn = 0
        self._t0 = time.monotonic()
        self.broken = False
        self._todo = 0
        self._done = 0
        self._cost = 0.0
        self._costed = 0
        self._spent_before = 0.0

    # -- events ---------------------------------------------------------------------------
    def run_started(self, run_id: str, *, todo: int, already_done: Sequence[object],
                    skipped: Sequence[tuple[str, str]], trials: int = 1,
                    spent_usd: float = 0.0) -> None:
        """``todo`` trials to run (of ``trials`` per task), ``already_done`` finished by an
        earlier invocation, ``spent_usd`` what those cost (for the projection)."""
        resumed = f", {len(already_done)} already finished" if already_done else ""
        unit = "task(s)" if trials <= 1 else f"trial(s) ({trials} per task)"
        self._todo, self._done, self._cost, self._costed = todo, 0, 0.0, 0
        self._spent_before = spent_usd
        self._log(f"run {run_id}: {todo} {unit} to run{resumed}")
        for task_id, reason in skipped:
            self._log(f"{task_id}: skipped ({reason})")

    def task_started(self, task_id: str) -> None:
        self.running[task_id] = _Running("start", time.monotonic())
        self._event(task_id, "started")

    def stage(self, task_id: str, stage: Stage, meter: UsageMeter | None = None) -> None:
        state = self.running.setdefault(task_id, _Running(stage.value, time.monotonic()))
        state.stage = stage.value
        if meter is not None and state.meter is not meter:
            state.meter = meter
            meter.listen(lambda notice: self._event(task_id, notice))
        self._event(task_id, stage.value)

    def note(self, task_id: str, message: str) -> None:
        self._log(f"{task_id}: {message}", force=True)

    def task_finished(self, result: TaskResult, label: str | None = None) -> None:
        label = label or result.task_id
        self.running.pop(label, None)
        tables = f" {result.tables_passed}/{result.tables_total} tables" \
            if result.tables_total else ""
        error = f" [{result.error.stage.value}: {result.error.message}]" if result.error else ""
        if not is_finished(result):
            error += " (a fault of the machine: not scored; a resume re-runs it)"
        took = result.durations.get("total", 0.0)
        self._log(f"{label}: {result.status.value}{tables} in {took:.1f}s{error}",
                  force=True)
        self._done += 1
        if result.usage.cost_usd is not None:
            self._cost += result.usage.cost_usd
            self._costed += 1
        projection = self.projection()
        if projection is not None:
            self._log(projection, force=True)

    def projection(self) -> str | None:
        """After the first trials finished: what the whole run will cost and how long it will
        still take, extrapolated from the trials of this invocation so far (``None`` before
        any finished, or once all did). Wall time, so the ``--jobs`` overlap is counted."""
        if not self._done or self._done >= self._todo:
            return None
        left = self._todo - self._done
        elapsed = time.monotonic() - self._t0
        eta = elapsed / self._done * left
        parts = [f"{self._done}/{self._todo} trial(s) done"]
        if self._costed:
            total = self._spent_before + self._cost + self._cost / self._costed * left
            parts.append(f"projected cost of the run ${total:.2f}")
        parts.append(f"about {_duration(eta)} left")
        return "; ".join(parts)

    # -- drawing --------------------------------------------------------------------------
    def line_for(self, task_id: str) -> str:
        state = self.running[task_id]
        turns = state.meter.usage.turns if state.meter is not None else 0
        notice = state.meter.notice if state.meter is not None else None
        elapsed = time.monotonic() - state.started
        line = f"  {task_id:<28} {state.stage:<10} {elapsed:6.0f}s  {turns:3d} turns"
        return f"{line}  [{notice}]" if notice else line

    async def refresh_loop(self) -> None:
        """Redraw the live block until cancelled (a no-op when not live)."""
        if not self.live:
            return
        try:
            while True:
                self._write(self._redraw)
                await anyio.sleep(REFRESH)
        finally:
            self._write(self._clear)

    def _event(self, task_id: str, what: str) -> None:
        if not self.live:
            self._log(f"{task_id}: {what}")

    def _log(self, text: str, *, force: bool = False) -> None:
        if self.quiet and not force:
            return
        stamp = time.monotonic() - self._t0
        self._write(lambda: self._print(f"[{stamp:7.1f}s] {text}\n"))

    def _print(self, line: str) -> None:
        self._clear()
        self.stream.write(line)
        if self.live:
            self._redraw()
        self.stream.flush()

    def _write(self, action: Callable[[], None]) -> None:
        """Run a write to the stream; a stream that is gone (the terminal closed, SIGHUP: EIO)
        is dropped for good instead of raising into the runner, which must still stop its
        tasks and write run.json."""
        if self.broken:
            return
        try:
            action()
        except (OSError, ValueError):  # ValueError: write to a closed file
            self.broken = True

    def _redraw(self) -> None:
        self._clear()
        lines = [self.line_for(tid) for tid in sorted(self.running)]
        for line in lines:
            self.stream.write(line + "\n")
        self._drawn = len(lines)
        self.stream.flush()

    def _clear(self) -> None:
        if self._drawn:
            # Cursor up over the block, then clear to the end of the screen.
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

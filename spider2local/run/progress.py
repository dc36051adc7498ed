"""What a run prints while it works: one live display on a terminal, plain lines anywhere else.

On a TTY (rich's ``Live``) the bottom of the screen is redrawn twice a second: an overall line
(a bar of trials done out of those to run, passes so far, elapsed time, an ETA from the finished
trials' times, tokens and cost so far and the projected cost of the run), then one row per
running trial (its stage, elapsed time, turns, cost once known, what its agent is stuck on).
Each finished trial prints one permanent line above it: its verdict, and the first failing table
or the error, cut at a word to fit the terminal. Anywhere else (CI logs, pipes, files) each
event is one timestamped line and nothing is redrawn, with no control code at all, because
escape codes make logs unreadable; text that came from an agent or a database goes through
:func:`~spider2local.core.printable.printable` on both paths.

``quiet``: the verdict lines (and warnings about the machine) only; ``verbose``: on a TTY every
stage change is a permanent line too. Everything goes to stderr: stdout is kept for the final
table and machine-readable output.
"""

from __future__ import annotations

import heapq
import logging
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

import anyio

from spider2local.agents.contract import UsageMeter
from spider2local.core.printable import printable
from spider2local.core.results import Stage, Status, TaskResult
from spider2local.evaluation.serialize import failing_tables
from spider2local.run.resume import is_finished

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

REFRESH = 0.5
BAR_FROM = 120
"""Columns from which the overall line starts with a bar (below, the numbers alone, which
wrap at a word when they must)."""
PLAIN_DETAIL = 400
"""Characters of a failure's detail on a plain verdict line (a CI log has no width; a dbt error
can be pages long, and the whole of it is in the task's result.json and the report)."""

STATUS_STYLE = {Status.PASSED: "bold green", Status.FAILED: "bold red", Status.ERROR: "bold red",
                Status.TIMEOUT: "bold yellow", Status.UNSCORED: "dim"}
"""The colour of each status, on the live display and in the final table alike."""


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


def _tokens(count: int) -> str:
    """``812``, ``45.2k``, ``1.31M``: a count that fits the overall line."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.2f}M"


def _usage_tokens(meter_or_usage: object) -> int:
    usage = getattr(meter_or_usage, "usage", meter_or_usage)
    return sum(int(getattr(usage, key, 0) or 0) for key in
               ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"))


def shorten(text: str, limit: int) -> str:
    """``text`` on one line in at most ``limit`` characters, cut at a word (``…`` says it was
    cut); a single word longer than the limit is cut where it must be."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = textwrap.shorten(flat, width=limit, placeholder=" …")
    if cut == "…" or len(cut) < limit // 2:  # one long word (a path, a hash): cut inside it
        return flat[: max(limit - 1, 0)] + "…"
    return cut


def eta(durations: Sequence[float], running: Sequence[float], queued: int,
        jobs: int) -> float | None:
    """Seconds until the run ends, from the finished trials' mean duration: each running trial
    takes that mean in all (at least a moment more), each queued one the mean, on ``jobs``
    workers that take the next trial as they free up (list scheduling, as
    :func:`~spider2local.run.runner.run_tasks` does). ``None`` before any trial finished."""
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    slots = [max(mean - elapsed, 0.0) for elapsed in running]
    slots += [0.0] * max(jobs - len(slots), 0)
    if not slots:
        slots = [0.0]
    heapq.heapify(slots)
    for _ in range(queued):
        heapq.heappush(slots, heapq.heappop(slots) + mean)
    return max(slots)


class Progress:
    """Receives the runner's events; ``live`` (default: the stream is a TTY, and not ``quiet``)
    draws the live display, ``color`` (default: a live display and no ``NO_COLOR``) colours
    it."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None,
                 quiet: bool = False, verbose: bool = False,
                 color: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.rich = self._isatty(self.stream) if live is None else live
        """A terminal: permanent lines through rich (coloured, sized to it), and the live
        display unless ``quiet``."""
        self.live = self.rich and not quiet
        self.quiet = quiet
        self.verbose = verbose
        self.color = color
        self.running: dict[str, _Running] = {}
        self._t0 = time.monotonic()
        self.broken = False
        self._todo = 0
        self._done = 0
        self._passed = 0
        self._jobs = 1
        self._unit = "task"
        self._cost = 0.0
        self._costed = 0
        self._tokens = 0
        self._durations: list[float] = []
        self._spent_before = 0.0
        self._console: Console | None = None
        self._live: Live | None = None

    @staticmethod
    def _isatty(stream: TextIO) -> bool:
        try:
            return stream.isatty()
        except (OSError, ValueError):
            return False

    # -- events ---------------------------------------------------------------------------
    def run_started(self, run_id: str, *, todo: int, already_done: Sequence[object],
                    skipped: Sequence[tuple[str, str]], trials: int = 1,
                    spent_usd: float = 0.0, jobs: int = 1) -> None:
        """``todo`` trials to run (of ``trials`` per task), ``already_done`` finished by an
        earlier invocation, ``spent_usd`` what those cost (for the projection), ``jobs`` how
        many run at once (for the ETA)."""
        resumed = f", {len(already_done)} already finished" if already_done else ""
        unit = "task(s)" if trials <= 1 else f"trial(s) ({trials} per task)"
        self._unit = "task" if trials <= 1 else "trial"
        self._todo, self._done, self._passed, self._cost, self._costed = todo, 0, 0, 0.0, 0
        self._tokens, self._durations, self._jobs = 0, [], max(1, jobs)
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
        """A warning about one trial or the run (a kept workspace, a result not saved): shown
        whatever the verbosity."""
        self._log(f"{task_id}: {message}", force=True, style="yellow")

    def task_not_started(self, label: str, why: str) -> None:
        """A trial begun but given up before its agent started (:meth:`task_started` was
        called): it leaves the running ones, and the reason is shown as a note."""
        self.running.pop(label, None)
        self.note(label, why)

    def task_finished(self, result: TaskResult, label: str | None = None) -> None:
        label = label or result.task_id
        self.running.pop(label, None)
        took = result.durations.get("total", 0.0)
        self._done += 1
        self._passed += result.passed is True
        self._durations.append(took)
        self._tokens += _usage_tokens(result.usage)
        cost = result.usage.cost_usd
        if cost is not None:
            self._cost += cost
            self._costed += 1
        self._verdict_line(result, label, took)
        if not self.quiet and not self.live:
            projection = self.projection()
            if projection is not None:
                self._log(projection)

    def projection(self) -> str | None:
        """After the first trials finished: how far the run is, what the whole run will cost
        and how long it will still take, extrapolated from the trials of this invocation so far
        (``None`` before any finished, or once all did)."""
        if not self._done or self._done >= self._todo:
            return None
        parts = [f"{self._done}/{self._todo} {self._unit}(s) done ({self._passed} passed)"]
        tokens, cost = self.so_far()
        if tokens:
            parts.append(f"tokens so far {tokens:,}")
        projected = self.projected_cost()
        if projected is not None:
            parts.append(f"cost so far ${cost:.2f}, projected cost of the run ${projected:.2f}")
        left = self.eta()
        if left is not None:
            parts.append(f"about {_duration(left)} left")
        return "; ".join(parts)

    def so_far(self) -> tuple[int, float]:
        """Tokens and dollars of this invocation so far: finished trials and the meters of the
        running ones (a long agent's spending shows while it works)."""
        tokens, cost = self._tokens, self._cost
        for state in self.running.values():
            if state.meter is not None:
                tokens += _usage_tokens(state.meter)
                cost += state.meter.usage.cost_usd or 0.0
        return tokens, cost

    def projected_cost(self) -> float | None:
        """The whole run's cost: earlier invocations, this one's finished trials, and the mean
        of those for every trial still to finish (``None`` until a cost is known)."""
        if not self._costed:
            return None
        left = max(self._todo - self._done, 0)
        return self._spent_before + self._cost + self._cost / self._costed * left

    def eta(self) -> float | None:
        now = time.monotonic()
        running = [now - s.started for s in self.running.values()]
        queued = max(self._todo - self._done - len(running), 0)
        return eta(self._durations, running, queued, self._jobs)

    # -- the verdict line -----------------------------------------------------------------
    def _verdict_line(self, result: TaskResult, label: str, took: float) -> None:
        status = result.status.value
        tables = f" {result.tables_passed}/{result.tables_total} tables" \
            if result.tables_total else ""
        cost = result.usage.cost_usd
        rest = f"{tables} in {took:.1f}s" + (f", ${cost:.2f}" if cost is not None else "")
        name = f"{printable(label)}: "
        detail = self._detail(result)
        tail = "" if is_finished(result) else \
            " (a fault of the machine: not scored; a resume re-runs it)"
        if not self.rich:
            text = f" [{shorten(detail, PLAIN_DETAIL)}]" if detail else ""
            self._log(name + status + rest + text + tail, force=True)
            return
        from rich.text import Text

        line = Text(name)
        line.append(status, style=STATUS_STYLE.get(result.status, ""))
        line.append(rest)
        room = self.console().width - len(line) - len(tail) - 2
        if detail and room > 10:
            line.append(f"  {shorten(detail, room)}")
        if tail:
            line.append(tail, style="yellow")
        self._print(line)

    @staticmethod
    def _detail(result: TaskResult) -> str:
        """The error, else the first failing table and its first diagnostic (one line, made
        printable)."""
        if result.error is not None:
            return printable(" ".join(f"{result.error.stage.value}: {result.error.message}"
                                      .split()))
        if result.passed is False:
            failing, first, _ = failing_tables(result.score)
            what = f"failed {', '.join(failing)}: {first}" if failing else first
            return printable(" ".join(what.split()))
        return ""

    # -- the live display -----------------------------------------------------------------
    def line_for(self, task_id: str) -> str:
        """One running trial's row, as plain text (the live display's row holds the same)."""
        return "  " + "  ".join(cell for cell, _ in self._row(task_id) if cell)

    def _row(self, task_id: str) -> list[tuple[str, str]]:
        state = self.running[task_id]
        meter = state.meter
        turns = meter.usage.turns if meter is not None else 0
        cost = meter.usage.cost_usd if meter is not None else None
        notice = meter.notice if meter is not None else None
        tool = meter.last_tool if meter is not None else None
        elapsed = time.monotonic() - state.started
        return [(printable(task_id), "bold"), (f"{state.stage:<10}", "cyan"),
                (f"{_duration(elapsed):>6}", ""), (f"{turns:3d} turns", ""),
                (f"${cost:.2f}" if cost is not None else "", ""),
                (f"[{printable(notice)}]" if notice else "", "yellow"),
                (printable(tool) if tool and not notice else "", "dim")]

    def overall(self) -> str:
        """The overall line's text: trials done of those to run, passes, elapsed, ETA, tokens
        and cost so far (and projected)."""
        todo = max(self._todo, self._done + len(self.running))
        parts = [f"{self._done}/{todo} done", f"{self._passed} passed",
                 f"{_duration(time.monotonic() - self._t0)} elapsed"]
        left = self.eta()
        parts.append(f"ETA {_duration(left)}" if left is not None else "ETA -")
        tokens, cost = self.so_far()
        parts.append(f"{_tokens(tokens)} tokens")
        projected = self.projected_cost()
        known = self._costed or any(s.meter is not None and s.meter.usage.cost_usd is not None
                                    for s in self.running.values())
        parts.append((f"cost ${cost:.2f}" if known else "cost -")
                     + (f" (projected ${projected:.2f})" if projected is not None else ""))
        return " · ".join(parts)

    def _render(self) -> RenderableType:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        todo = max(self._todo, self._done + len(self.running), 1)
        text = Text(self.overall(), style="bold")
        head: RenderableType = text
        if self.console().width >= BAR_FROM:  # a narrow terminal keeps the numbers, not the bar
            grid = Table.grid(padding=(0, 1))
            grid.add_row(ProgressBar(total=todo, completed=self._done, width=20), text)
            head = grid
        rows = Table.grid(padding=(0, 2))
        for task_id in sorted(self.running):
            rows.add_row(*(Text(cell, style=style, no_wrap=True, overflow="ellipsis")
                           for cell, style in self._row(task_id)))
        return Group(head, rows) if self.running else head

    async def refresh_loop(self) -> None:
        """Draw the live display until cancelled (a no-op when not live)."""
        if not self.live:
            return
        self._write(self._start_live)
        try:
            while True:
                self._write(self._refresh)
                await anyio.sleep(REFRESH)
        finally:
            self._write(self._stop_live)

    def console(self) -> Console:
        """The rich console of the live display (made on first use)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, force_terminal=True, highlight=False,
                                    emoji=False, markup=False,
                                    no_color=None if self.color is None else not self.color)
        return self._console

    def _start_live(self) -> None:
        from rich.live import Live

        self._live = Live(get_renderable=self._render, console=self.console(),
                          auto_refresh=False, transient=True, redirect_stdout=False,
                          redirect_stderr=False)
        self._live.start()
        self._adopt_logging(True)

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()

    def _stop_live(self) -> None:
        live, self._live = self._live, None
        self._adopt_logging(False)
        if live is not None:
            live.stop()

    _adopted: list[tuple[logging.StreamHandler[TextIO], TextIO]]

    def _adopt_logging(self, on: bool) -> None:
        """While the display is live, log records written to our stream (the CLI's handler on
        stderr) are printed above it instead of tearing it; given back when it stops."""
        if on:
            from rich.file_proxy import FileProxy

            proxy = FileProxy(self.console(), self.stream)
            self._adopted = [(h, h.stream) for h in logging.getLogger().handlers
                             if type(h) is logging.StreamHandler and h.stream is self.stream]
            for handler, _ in self._adopted:
                handler.setStream(proxy)  # type: ignore[arg-type]
        else:
            for handler, stream in getattr(self, "_adopted", []):
                handler.setStream(stream)
            self._adopted = []

    # -- writing --------------------------------------------------------------------------
    def _event(self, task_id: str, what: str) -> None:
        if not self.live or self.verbose:  # live: the display shows it (-v: a line too)
            self._log(f"{task_id}: {what}", style="dim" if self.rich else "")

    def _log(self, text: str, *, force: bool = False, style: str = "") -> None:
        if self.quiet and not force:
            return
        text = printable(text)
        if self.rich:
            from rich.text import Text

            self._print(Text(text, style=style))
            return
        stamp = time.monotonic() - self._t0
        self._write(lambda: self._plain(f"[{stamp:7.1f}s] {text}\n"))

    def _plain(self, line: str) -> None:
        self.stream.write(line)
        self.stream.flush()

    def _print(self, text: object) -> None:
        """A permanent line: above the live display while it is drawn."""
        self._write(lambda: self.console().print(text, soft_wrap=False))

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

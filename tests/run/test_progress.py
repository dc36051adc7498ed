"""The run's progress output: plain lines off a terminal, the live display on one."""

from __future__ import annotations

import io
import re
import time

import anyio
import pytest

from spider2local.agents.contract import UsageMeter
from spider2local.core.results import ErrorKind, Stage, Status, TaskError, TaskResult, Usage
from spider2local.core.verdicts import TableScore, TaskScore
from spider2local.run.progress import Progress, eta, shorten

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-7]|9[0-7]|38;[0-9;]+)m")


def result(task_id: str, status: Status, *, seconds: float = 10.0, cost: float | None = None,
           error: str | None = None, tokens: int = 0, passed: bool | None = None,
           score: TaskScore | None = None) -> TaskResult:
    return TaskResult(
        task_id=task_id, status=status, agent="noop", fake_date="2024-01-01",
        started_at="", finished_at="", durations={"total": seconds},
        usage=Usage(turns=3, input_tokens=tokens, cost_usd_reported=cost),
        passed=passed if passed is not None else status is Status.PASSED,
        tables_passed=1 if status is Status.PASSED else 0, tables_total=1, score=score,
        error=None if error is None else TaskError(Stage.AGENT, ErrorKind.AGENT, error))


def test_plain_lines_keep_their_format_and_carry_no_control_code() -> None:
    out = io.StringIO()
    progress = Progress(out, live=False)
    progress.run_started("r", todo=2, already_done=(), skipped=[("t9", "no gold")])
    progress.task_started("t1")
    progress.stage("t1", Stage.AGENT)
    hostile = "dbt said \x1b[31mred\x1b]0;title\x07 and\nanother line \u202eevil"
    progress.task_finished(result("t1", Status.ERROR, error=hostile, cost=0.5, tokens=1200))
    text = out.getvalue()
    lines = text.splitlines()
    assert "\x1b" not in text and not CONTROL.search(text.replace("\n", ""))
    assert re.fullmatch(r"\[ *\d+\.\ds\] run r: 2 task\(s\) to run", lines[0])
    assert lines[1].endswith("t9: skipped (no gold)")
    assert lines[2].endswith("t1: started") and lines[3].endswith("t1: agent")
    verdict = lines[4]
    assert "t1: error 0/1 tables in 10.0s, $0.50 [agent: dbt said \\x1b[31mred" in verdict
    assert "and another line \\u202eevil]" in verdict  # one line, the escapes shown
    # after a trial, a projection: done, passes, tokens, cost so far and projected, time left
    assert lines[5].endswith("1/2 task(s) done (0 passed); tokens so far 1,200; cost so far "
                             "$0.50, projected cost of the run $1.00; about 10s left")
    assert len(lines) == 6


def test_a_failed_verdict_names_the_first_failing_table() -> None:
    score = TaskScore(False, (TableScore("orders", True, 1, 1),
                              TableScore("daily", False, 1, None, missing=True)))
    out = io.StringIO()
    Progress(out, live=False).task_finished(result("t1", Status.FAILED, score=score))
    assert "t1: failed 0/1 tables in 10.0s [failed daily: daily: missing" in out.getvalue()


def test_quiet_prints_the_verdicts_and_the_notes_only() -> None:
    out = io.StringIO()
    progress = Progress(out, live=False, quiet=True)
    progress.run_started("r", todo=2, already_done=(), skipped=[("t9", "no gold")])
    progress.task_started("t1")
    progress.stage("t1", Stage.AGENT)
    progress.note("t1", "workspace kept: /tmp/x")
    progress.task_finished(result("t1", Status.PASSED))
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == ["t1: workspace kept: /tmp/x", "t1: passed 1/1 tables in 10.0s"]


def test_a_quiet_terminal_has_no_live_display_but_coloured_verdicts() -> None:
    out = io.StringIO()
    progress = Progress(out, live=True, quiet=True, color=True)
    assert not progress.live

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(progress.refresh_loop)
            progress.task_started("t1")
            await anyio.sleep(0.05)
            progress.task_finished(result("t1", Status.PASSED))
            tg.cancel_scope.cancel()

    anyio.run(main)
    text = out.getvalue()
    assert COLOUR.search(text) and "done ·" not in text  # a verdict in green, no overall line
    assert re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text) == "t1: passed 1/1 tables in 10.0s\n"


def _live(out: io.StringIO, **kwargs: object) -> Progress:
    """A live display drawn once with two trials running, one finished."""
    progress = Progress(out, live=True, **kwargs)  # type: ignore[arg-type]
    meter = UsageMeter()
    meter.set(Usage(turns=7, input_tokens=50_000, cost_usd_reported=0.25))
    meter.note("API 529, retry 1/2")

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            progress.run_started("r", todo=4, already_done=(), skipped=(), jobs=2)
            tg.start_soon(progress.refresh_loop)
            progress.task_started("t1")
            progress.task_started("t2")
            progress.stage("t2", Stage.AGENT, meter)
            progress.stage("t1", Stage.SCORE)
            progress.task_finished(result("t1", Status.FAILED, cost=1.0, tokens=100_000,
                                          error="Runtime Error in model daily_revenue " * 20))
            await anyio.sleep(0.05)  # one redraw with t2 running
            tg.cancel_scope.cancel()

    anyio.run(main)
    return progress


def screen(raw: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw).replace("\r", "\n")


def test_the_live_display_shows_the_run_and_each_running_trial(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")  # rich's width for a stream that is no terminal
    out = io.StringIO()
    progress = _live(out, color=True)
    raw = out.getvalue()
    text = screen(raw)
    overall = [x for x in text.splitlines() if "done ·" in x]
    assert overall, text
    line = overall[-1]
    assert "1/4 done · 0 passed · " in line and "ETA " in line and "ETA -" not in line
    # tokens and cost so far count the running trial's meter; projected from the finished one
    assert "150.0k tokens" in line and "cost $1.25 (projected $4.00)" in line
    row = next(x for x in text.splitlines() if x.lstrip().startswith("t2"))
    assert "agent" in row and "7 turns" in row and "$0.25" in row
    assert "[API 529, retry 1/2]" in row
    assert "━" in line  # the bar, on a terminal this wide
    # the verdict: one permanent line, its error cut at a word to fit the 160 columns
    verdict = next(x for x in text.splitlines() if x.startswith("t1: failed"))
    assert 120 < len(verdict) <= 160 and verdict.endswith("…") and "daily_revenue" in verdict
    assert re.search(r"(model|daily_revenue|Runtime|Error|in) …$", verdict), verdict
    assert COLOUR.search(raw)  # red for the failure
    assert progress.broken is False


def test_a_running_row_names_the_last_tool_and_a_retry_notice_replaces_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    progress = Progress(io.StringIO(), live=True)
    meter = UsageMeter()
    meter.last_tool = "Bash: dbt run \x1b[2J--select orders"  # the agent's text, escaped
    progress.task_started("t1")
    progress.stage("t1", Stage.AGENT, meter)
    row = progress.line_for("t1")
    assert "Bash: dbt run " in row and "\x1b" not in row and "--select orders" in row
    meter.note("API 529, retry 1/2")
    row = progress.line_for("t1")
    assert "[API 529, retry 1/2]" in row and "Bash" not in row


def test_no_color_and_no_color_env_leave_the_live_display_uncoloured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    flag = io.StringIO()
    _live(flag, color=False)
    monkeypatch.setenv("NO_COLOR", "1")
    env = io.StringIO()
    _live(env)
    for out in (flag, env):
        raw = out.getvalue()
        assert "\x1b[" in raw and "done ·" in raw  # still redrawn in place
        assert not COLOUR.search(raw), raw


def test_verbose_prints_the_stages_above_the_live_display() -> None:
    quiet, verbose = io.StringIO(), io.StringIO()
    _live(quiet)
    _live(verbose, verbose=True)
    assert "t2: agent" not in screen(quiet.getvalue())
    assert "t2: agent" in screen(verbose.getvalue())
    assert "t1: score" in screen(verbose.getvalue())


def test_a_stream_that_goes_away_is_dropped_not_raised() -> None:
    out = io.StringIO()
    progress = Progress(out, live=True)
    out.close()
    _drive = progress.task_finished
    _drive(result("t1", Status.PASSED))
    assert progress.broken


def test_eta_schedules_the_trials_left_on_the_workers() -> None:
    assert eta([], [1.0], 3, 2) is None
    # mean 10 s; 2 workers: one busy 4 s more, one free; 3 queued: 0+10, 6+10, 10+10 -> 20 s
    assert eta([10.0], [6.0], 3, 2) == pytest.approx(20.0)
    assert eta([10.0, 20.0], [], 0, 3) == 0.0
    assert eta([10.0], [30.0], 0, 1) == 0.0  # running past the mean: a moment more, not less
    # 1 worker, 2 queued after the running one: 5 + 15 + 15
    assert eta([15.0], [10.0], 2, 1) == pytest.approx(35.0)


def test_shorten_cuts_at_a_word_and_says_so() -> None:
    text = "Parser Error: syntax error at or near by in model daily_revenue"
    assert shorten(text, 100) == text
    cut = shorten(text, 30)
    assert len(cut) <= 30 and cut.endswith(" …") and text.startswith(cut[:-2])
    assert text.split()[len(cut[:-2].split()) - 1] == cut[:-2].split()[-1]  # a whole word
    long_word = "x" * 50
    assert shorten(long_word, 10) == "x" * 9 + "…"
    assert shorten("a\n  b\tc", 10) == "a b c"


def test_the_projection_waits_for_a_finished_trial_and_stops_at_the_last() -> None:
    progress = Progress(io.StringIO(), live=False)
    progress.run_started("r", todo=1, already_done=(), skipped=())
    assert progress.projection() is None
    progress.task_started("t1")
    time.sleep(0.01)
    progress.task_finished(result("t1", Status.PASSED))
    assert progress.projection() is None

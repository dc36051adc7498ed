"""What ``spider2local run`` prints, read as a person sees it: piped (CI, a log file) and in a
real terminal (tmux), with -q, -v, --no-color and NO_COLOR."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spider2local.testing import FakeAnthropic, reply
from tests.cli.test_run_command import cli
from tests.cli.test_trials_cli import fleet

VERDICT = re.compile(r"^\[ *\d+\.\ds\] \w+: (passed|failed|error|timeout|unscored) ")
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-7]|9[0-7]|38;[0-9;]+)m")
WIDTH = 160


def noop(*args: str) -> tuple[str, ...]:
    return ("run", *args, "--agent", "noop", "--runs-dir", "runs")


@pytest.mark.slow
def test_piped_output_has_no_control_code_and_quiet_keeps_verdicts_and_summary(
        tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "COLUMNS": str(WIDTH)}
    full = cli(*noop("bakery001"), cwd=tmp_path, env=env)
    assert full.returncode == 0, full.stderr
    for text in (full.stdout, full.stderr):
        assert "\x1b" not in text and "\r" not in text
    lines = full.stderr.splitlines()
    assert any(x.endswith("bakery001: started") for x in lines)
    assert any(x.endswith("bakery001: score") for x in lines)  # one line per task event
    verdicts = [x for x in lines if VERDICT.match(x)]
    assert len(verdicts) == 1 and "bakery001: failed 0/2 tables in " in verdicts[0]
    assert "[failed product_sales, daily_revenue: product_sales: missing" in verdicts[0]
    # the final table takes $COLUMNS: wider than 80, not wrapped, not past the width
    row = next(x for x in full.stdout.splitlines() if x.startswith("bakery001"))
    assert 80 < len(row) <= WIDTH and row.endswith("product_sales: missing from the result")

    quiet = cli(*noop("bakery001", "-q"), cwd=tmp_path, env=env)
    assert quiet.returncode == 0, quiet.stderr
    assert [VERDICT.match(x) is not None for x in quiet.stderr.splitlines()] == [True]
    out = quiet.stdout.splitlines()
    assert out[0].split()[:3] == ["task", "status", "verdict"]
    assert any(x.startswith("passed 0/") for x in out)
    assert out[-2].startswith("run folder: ") and out[-1].startswith("report: ")

    narrow = cli(*noop("bakery001", "-q"), cwd=tmp_path, env={**env, "COLUMNS": "70"})
    assert max(len(x) for x in narrow.stdout.split("\n\n")[0].splitlines()) <= 70


@pytest.mark.process
def test_quiet_and_verbose_together_are_a_usage_error(tmp_path: Path) -> None:
    proc = cli(*noop("bakery001", "-q", "-v"), cwd=tmp_path)
    assert proc.returncode == 2 and not (tmp_path / "runs").exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "-q/--quiet and -v/--verbose exclude each other" in lines[0]


class Terminal:
    """A real terminal: a private tmux server, one window of WIDTH x 40."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.socket = f"s2l-{uuid.uuid4().hex[:8]}"
        self.cwd, self.env = cwd, env

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              env=self.env, capture_output=True, text=True, check=True,
                              timeout=30).stdout

    def run(self, *args: str, timeout: float = 240, width: int = WIDTH) -> list[str]:
        """Run ``spider2local *args`` in the terminal; every screen seen (with escape codes),
        polled until the command ended."""
        command = shlex.join([sys.executable, "-m", "spider2local", *args])
        self.tmux("new-session", "-d", "-s", "main", "-x", str(width), "-y", "40",
                  "-c", str(self.cwd), f"{command}; echo __EXIT=$?; sleep 600")
        screens: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screens.append(self.tmux("capture-pane", "-p", "-e", "-t", "main"))
            if "__EXIT=" in screens[-1]:
                return screens
            time.sleep(0.1)
        raise AssertionError("the run did not end:\n" + screens[-1])

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       check=False, timeout=30)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux; .ci/run does it as root)")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    term = Terminal(tmp_path, {**env, "PYTHONWARNINGS": "ignore", "TERM": "xterm"})
    yield term
    term.close()


def plain(screen: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen)


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_in_a_terminal_the_live_display_shows_the_run_and_the_table_fits_the_width(
        terminal: Terminal) -> None:
    screens = terminal.run(*noop("--jobs", "2"))
    texts = [plain(s) for s in screens]
    last = texts[-1]
    assert "__EXIT=0" in last
    overall = [x for t in texts for x in t.splitlines() if " done · " in x]
    assert overall, texts[len(texts) // 2]
    assert any(re.search(r"━+.* \d/4 done · \d passed · \S+ elapsed · ETA ", x)
               for x in overall), overall[::10]
    assert any("ETA " in x and "ETA -" not in x for x in overall)  # once a task finished
    rows = [x for t in texts for x in t.splitlines()
            if re.match(r"^(bakery|fleet|gym|library)001 +(prepare|agent|checkpoint|score)"
                        r" .* turns", x)]
    assert rows  # one row per running task, while it runs
    # the end: the display is gone, each task left one verdict line, the table fits
    assert " done · " not in last
    verdicts = [x for x in last.splitlines() if re.match(r"^\w+001: (passed|failed) ", x)]
    assert len(verdicts) == 4
    table = last.split("\n\n")[0].splitlines()[-6:]
    assert table[0].split()[:2] == ["task", "status"] and 80 < len(table[1]) <= WIDTH
    assert [x.split()[0] for x in table[2:]] == ["bakery001", "fleet001", "gym001",
                                                 "library001"]  # one line each: no wrap
    assert table[3].rstrip().endswith("vehicle_performance: missing from the result")
    # verdicts are coloured on a terminal, in the lines and the final table
    coloured = [x for x in screens[-1].splitlines() if COLOUR.search(x)]
    assert any("library001" in x and "failed" in plain(x) for x in coloured)


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_report_in_a_terminal_is_fitted_and_coloured_as_run_ends(terminal: Terminal) -> None:
    """``report RUN`` on an 80-column terminal: every row of the table on one line (it printed
    notes cut at 100 characters, wrapped by the terminal), verdicts coloured; --no-color and a
    pipe give none."""
    made = cli(*noop("bakery001", "-q"), cwd=terminal.cwd)
    assert made.returncode == 0, made.stderr
    screen = terminal.run("report", "latest", "--runs-dir", "runs", width=80)[-1]
    lines = plain(screen).splitlines()
    header = next(i for i, x in enumerate(lines) if x.split()[:2] == ["task", "status"])
    assert lines[header + 2].startswith("bakery001") and lines[header + 3].strip() == "", \
        lines[header:header + 5]
    assert any("bakery001" in x and COLOUR.search(x) for x in screen.splitlines())
    terminal.close()
    terminal.socket += "b"
    screen = terminal.run("report", "latest", "--runs-dir", "runs", "--no-color", width=80)[-1]
    assert "__EXIT=0" in plain(screen) and not COLOUR.search(screen)
    piped = cli("report", "latest", "--runs-dir", "runs", cwd=terminal.cwd)
    assert piped.returncode == 0 and "\x1b" not in piped.stdout


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_no_color_in_a_terminal(terminal: Terminal) -> None:
    terminal.env["NO_COLOR"] = "1"
    screens = terminal.run(*noop("bakery001"))
    assert "__EXIT=0" in plain(screens[-1])
    assert not any(COLOUR.search(s) for s in screens), screens[-1]
    assert any("bakery001  failed" in plain(s) for s in screens)


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_a_scripted_claude_run_shows_its_cost_so_far_and_projected(
        terminal: Terminal) -> None:
    """Three trials of fleet001 through the real SDK and CLI, each $3 (1M input tokens): the
    overall line shows the cost so far, the projection of the whole run and an ETA, and the
    running trial's row, and each trial's verdict line has its cost."""
    script = [reply("Nothing to do.", input_tokens=1_000_000)] * 3
    args = ("--dataset", "sample", "run", "fleet001", "--agent", "claude", "--trials", "3",
            "--jobs", "1", "--verify-rounds", "0", "--retries", "0", "--isolation", "none",
            "--runs-dir", "runs")
    with FakeAnthropic({"fleet001": script}, route=fleet) as fake:
        terminal.env.update(fake.env())
        screens = terminal.run(*args)
    texts = [plain(s) for s in screens]
    assert "__EXIT=0" in texts[-1], texts[-1]
    overall = [x for t in texts for x in t.splitlines() if " done · " in x]
    assert any("1/3 done · 0 passed" in x and "1.00M tokens" in x
               and "cost $3.00 (projected $9.00)" in x and "ETA -" not in x
               for x in overall), overall[-5:]
    assert any(re.match(r"^fleet001#[23] +(prepare|agent|checkpoint|score) ", x)
               for t in texts for x in t.splitlines())
    # a verdict line, not a note about the trial (under --isolation none the witness may note
    # another test of this session reading the shared sample's gold: "fleet001#3: suspect ...")
    verdicts = [x for x in texts[-1].splitlines()
                if re.match(r"^fleet001#\d: (passed|failed|error|timeout|unscored) ", x)]
    assert [x.split(":")[0] for x in verdicts] == ["fleet001#1", "fleet001#2", "fleet001#3"], \
        texts[-1]
    assert all(", $3.00" in x for x in verdicts)


@pytest.mark.parametrize(("flags", "quiet", "verbose", "color"),
                         [((), False, False, None), (("-q",), True, False, None),
                          (("-v", "--no-color"), False, True, False)])
def test_the_flags_reach_the_progress_and_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], quiet: bool,
        verbose: bool, color: bool | None) -> None:
    """-q, -v and --no-color as the run command hands them over (the run itself replaced):
    -v also turns spider2local's debug logging on, and nothing else's."""
    import logging

    from click.testing import CliRunner

    from spider2local.cli import commands
    from spider2local.cli.app import cli as app
    from spider2local.run.progress import Progress

    seen: list[tuple[Progress | None, bool | None]] = []

    def fake(plan: object, as_json: bool, progress: Progress | None = None,
             color: bool | None = None) -> int:
        seen.append((progress, color))
        return 0

    monkeypatch.setattr(commands, "run_command", fake)
    ours = logging.getLogger("spider2local")
    monkeypatch.setattr(ours, "level", ours.level)  # restored after the test
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["run", "bakery001", "--agent", "noop", *flags])
    assert out.exit_code == 0, out.output
    [(progress, given)] = seen
    assert progress is not None and given == color
    assert (progress.quiet, progress.verbose, progress.color) == (quiet, verbose, color)
    assert (ours.getEffectiveLevel() == logging.DEBUG) is verbose
    assert logging.getLogger("httpx").getEffectiveLevel() > logging.DEBUG

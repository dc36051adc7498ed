"""The HTML report: self-contained, escaped, and working in a real headless browser.

The browser test drives Debian's Chromium (``/usr/bin/chromium``; ``.ci/run`` installs it where
it can) through the ``playwright`` package with ``executable_path``: Playwright's own browser
download is never used. It skips, saying why, when either is missing.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from spider2local.report.details import load_details
from spider2local.report.html import render_html
from spider2local.report.summary import load_report
from spider2local.run.folder import RunFolder
from tests.helpers import ReferenceRun
from tests.report.test_summary import _score, _table

PWNED = "</script><script>window.__pwned = 1</script>"
IMG = '<img src="http://127.0.0.1:9/x.png" onerror="window.__pwned = 2">'
JS_LINK = '<a href="javascript:window.__pwned = 3">open</a>'
BREAKERS = "</pre></details></summary></div>"
"""Closing tags in agent text: escaped, they close nothing."""
DBT_ERROR = 'Runtime Error in model stg_trips\n  Parser Error: syntax error at or near "by"'
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class Tags(HTMLParser):
    """Every element the page really has, as a browser's tokenizer sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()
        self.closed: Counter[str] = Counter()
        self.handlers: list[str] = []
        self.sources: list[str] = []

    def handle_endtag(self, tag: str) -> None:
        self.closed[tag] += 1

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen[tag] += 1
        self.handlers += [k for k, _ in attrs if k.startswith("on")]
        self.sources += [f"{k}={v}" for k, v in attrs
                         if k in ("src", "srcset", "poster", "data") or
                         (k == "href" and not (v or "").startswith("#"))]


def _line(kind: str, data: Any) -> str:
    return json.dumps({"t": 1.0, "kind": kind, "data": data}) + "\n"


def hostile_copy(reference: ReferenceRun, root: Path) -> RunFolder:
    """A copy of the sample's reference run where one task failed and its agent wrote hostile
    text everywhere the report shows agent text."""
    run = root / "runs" / "hostile"
    shutil.copytree(reference.run_dir, run)
    task = run / "fleet001"
    result = json.loads((task / "result.json").read_text())
    column = {"gold_column": "total", "gold_index": 0, "reason": f"differs {PWNED}",
              "nearest": None, "position": 0, "gold_value": IMG, "result_value": "2"}
    result.update(status="failed", passed=False, tables_passed=0,
                  score=_score(_table("fleet_summary", False, columns=[column])),
                  integrity="suspect", integrity_evidence=[
                      {"source": "transcript.jsonl", "line": 3, "rule": "gold path",
                       "excerpt": IMG}])
    (task / "result.json").write_text(json.dumps(result))
    with (task / "transcript.jsonl").open("a") as fh:
        fh.write(_line("AssistantMessage", {"content": [
            {"text": f"I will now write {PWNED}"},
            {"id": "tu1", "name": "Agent", "input": {"subagent_type": "verifier",
                                                      "prompt": IMG}}]}))
        fh.write(_line("UserMessage", {"content": [
            {"tool_use_id": "tu1", "content": [{"type": "text",
                                                "text": f"VERDICT: FAIL {PWNED}"}],
             "is_error": False}]}))
        fh.write(transcript_tail())
    (task / "queries.jsonl").write_text(json.dumps(
        {"t": 1, "tool": "query", "sql": f"select '{PWNED}'", "rows": 1, "duration": 0.01,
         "error": None}) + "\n")
    (task / "project" / "models" / "hostile.sql").write_text(f"-- {IMG}\nselect 1\n")
    model = task / "project" / "models" / "stg_trips.sql"  # a changed file: lines removed
    model.write_text("-- rewritten by the agent\n" + model.read_text().split("\n", 1)[1])
    _dbt_failure(task, DBT_ERROR)
    return RunFolder(run)


def transcript_tail() -> str:
    """What a Claude agent's session writes (agents/claude/session.py), hostile: text that
    closes the page's elements, a Bash call with dbt's coloured output, a Write, a query, and
    script tags, handlers and javascript: links in every input and output."""
    ansi = ("\x1b[0m12:00:00  Running with dbt=1.11.16\n\x1b[0m12:00:01  1 of 1 "
            "\x1b[31mERROR\x1b[0m creating sql table model main.stg_trips\n")
    return "".join([
        _line("AssistantMessage", {"content": [
            {"text": f"Closing your page: {BREAKERS} {JS_LINK} {IMG}"}]}),
        _line("AssistantMessage", {"content": [{"id": "b1", "name": "Bash", "input": {
            "command": f"dbt run --select stg_trips # {BREAKERS}{PWNED}",
            "description": JS_LINK}}]}),
        _line("UserMessage", {"content": [{"tool_use_id": "b1", "content": ansi + BREAKERS
                                           + JS_LINK + IMG, "is_error": False}]}),
        _line("AssistantMessage", {"content": [{"id": "w1", "name": "Write", "input": {
            "file_path": f"models/{JS_LINK}.sql",
            "content": f"select\n    trip_id,\n    '{BREAKERS}' as note\nfrom trips\n"}}]}),
        _line("UserMessage", {"content": [{"tool_use_id": "w1", "content": f"ok {PWNED}"}]}),
        _line("AssistantMessage", {"content": [{"id": "q1", "name": "mcp__spider2__query",
                                                "input": {"sql": f"select '{IMG}' as x"}}]}),
        _line("UserMessage", {"content": [{"tool_use_id": "q1", "content": [
            {"type": "text", "text": f"x | {IMG}"}], "is_error": True}]})])


@pytest.mark.slow
def test_the_html_is_self_contained_and_escapes_agent_text(reference_run: ReferenceRun,
                                                            tmp_path: Path) -> None:
    folder = hostile_copy(reference_run, tmp_path)
    page = render_html(load_report(folder), folder)
    assert PWNED not in page and IMG not in page
    tags = Tags()
    tags.feed(page)
    assert tags.seen["script"] == 1 and tags.seen["img"] == 0
    assert tags.handlers == [] and tags.sources == []  # no on*= handler, nothing to fetch
    for tag in ("details", "pre", "summary", "div"):  # agent text closes nothing of the page
        assert tags.seen[tag] == tags.closed[tag], tag
    details = load_details(folder.task_dir("fleet001"))
    changed = {f.path: f.change for f in details.files}
    assert changed["models/hostile.sql"] == "added"
    assert len(changed) >= 2 and "dbt_project.yml" not in changed  # the solution's file too,
    assert "start project kept in the run folder" in details.diff_source  # unchanged ones not
    assert details.subagent_reports[0].title == "verifier"
    assert "VERDICT: FAIL" in details.subagent_reports[0].text


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium found (apt-get install chromium; .ci/run does it as root)")


@contextlib.contextmanager
def chromium_page() -> Iterator[Any]:
    """A page of the system Chromium driven by playwright (skips when either is missing)."""
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="the playwright package is not installed")
    browser_path = _browser()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser.new_page(viewport={"width": 1300, "height": 1000})
        finally:
            browser.close()


@pytest.mark.slow
def test_the_html_report_in_a_real_headless_browser(reference_run: ReferenceRun,
                                                     tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="the playwright package is not installed")
    browser_path = _browser()
    folder = hostile_copy(reference_run, tmp_path)
    html_file = tmp_path / "report.html"
    html_file.write_text(render_html(load_report(folder), folder), encoding="utf-8")
    console: list[str] = []
    requests: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 1000})
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(html_file.as_uri())
            page.wait_for_load_state("load")
            assert page.evaluate("typeof window.__pwned") == "undefined"
            assert requests == [html_file.as_uri()]  # nothing fetched, no CDN, no image
            assert console == []
            # Charts and table are there.
            assert page.locator("svg.chart").count() == 4
            assert page.locator("#outcome-chart a rect").count() == 4
            rows = page.locator("#tasks tbody tr")
            assert rows.count() == 4
            # Hostile text shows as text.
            assert PWNED in (page.locator("#task-fleet001").text_content() or "")
            # Filtering: by text, then by status.
            page.fill("#filter", "fleet")
            assert page.locator("#tasks tbody tr:visible").count() == 1
            assert page.inner_text("#shown") == "1"
            page.fill("#filter", "")
            page.select_option("#status-filter", "failed")
            visible = page.locator("#tasks tbody tr:visible")
            assert visible.count() == 1 and "fleet001" in visible.inner_text()
            page.select_option("#status-filter", "")
            assert page.locator("#tasks tbody tr:visible").count() == 4
            # Sorting by a column, both ways.
            page.click("#tasks th:has-text('task')")
            first = page.locator("#tasks tbody tr").first.get_attribute("data-status")
            names = [rows.nth(i).locator("td").first.inner_text() for i in range(4)]
            assert names == sorted(names) and first is not None
            page.click("#tasks th:has-text('task')")
            names = [rows.nth(i).locator("td").first.inner_text() for i in range(4)]
            assert names == sorted(names, reverse=True)
            check_sections_open(page, html_file)
            check_the_transcript_and_diffs(page)
            check_run_facts(page, reference_run.manifest())
            # A hostile transcript ran nothing and broke no structure: every task's section is
            # still a child of the page's body, and the tail of fleet001's is still inside it.
            assert page.evaluate("typeof window.__pwned") == "undefined"
            assert page.locator("body > details.task").count() == 4
            assert page.locator("#task-fleet001 .conversation .tool").count() >= 4
            assert page.locator("a[href^='javascript']").count() == 0
            assert page.locator("img").count() == 0
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert console == [] and (tmp_path / "report.png").stat().st_size > 10_000


def check_sections_open(page: Any, html_file: Path) -> None:
    """A click anywhere on a table row opens that task's section and scrolls to it, again
    after it was closed (the URL already names it), and an #anchor opens it on load."""
    section = page.locator("#task-fleet001")
    assert section.get_attribute("open") is None
    page.locator("#tasks tbody tr[data-status=failed] td").nth(2).click()  # the verdict cell
    assert section.get_attribute("open") is not None
    top = page.evaluate("document.getElementById('task-fleet001').getBoundingClientRect().top")
    assert -2 <= top <= 50, top
    assert page.evaluate("window.location.hash") == "#task-fleet001"
    page.evaluate("document.getElementById('task-fleet001').open = false")
    page.locator("#tasks a[href='#task-fleet001']").click()  # the same hash: no hashchange
    assert section.get_attribute("open") is not None
    page.goto("about:blank")
    page.goto(html_file.as_uri() + "#task-gym001")
    page.wait_for_load_state("load")
    assert page.locator("#task-gym001").get_attribute("open") is not None
    assert page.locator("#task-fleet001").get_attribute("open") is None
    page.locator("#outcome-chart a").first.click()  # the chart's squares open theirs too
    assert page.locator("#task-bakery001").get_attribute("open") is not None
    page.click("#task-fleet001 > summary")


def check_the_transcript_and_diffs(page: Any) -> None:
    """Tool calls as code (a shell block, the Write's content with its real newlines, SQL with
    its keywords marked), results folded with their size, no terminal escape anywhere, the
    diff's added and removed lines styled apart, and the dbt error once."""
    task = page.locator("#task-fleet001")
    shell = task.locator("pre.lang-shell")
    assert shell.count() == 1 and "dbt run --select stg_trips # </pre>" in shell.inner_text()
    written = task.locator(".tool:has(.tool-name:text-is('Write')) pre.lang-sql")
    assert "select\n    trip_id,\n    '</pre></details>" in written.inner_text()
    assert written.locator(".sk").first.inner_text() == "select"
    assert task.locator(".tool:has(.tool-name:text-is('mcp__spider2__query')) .sk").count() >= 2
    result = task.locator(".tool:has(.tool-name:text-is('Bash')) details.result")
    assert result.get_attribute("open") is None and not result.locator("pre").is_visible()
    assert "3 lines, 243 bytes" in result.locator("summary").inner_text()
    result.locator("summary").click()
    output = result.locator("pre").inner_text()
    assert "1 of 1 ERROR creating sql table model main.stg_trips" in output
    text = page.evaluate("document.body.textContent")
    assert "\x1b" not in text and "[0m" not in text and "[31m" not in text
    diff = task.locator("details.file:has(code:text-is('models/stg_trips.sql')) pre.diff")
    diff.evaluate("e => e.closest('details').open = true")

    def background(css: str) -> str:
        value: str = diff.locator(css).first.evaluate("e => getComputedStyle(e).backgroundColor")
        return value

    added, removed, context = background(".da"), background(".dd"), background(".dc")
    assert len({added, removed, context}) == 3, (added, removed, context)
    assert diff.locator(".dd").first.inner_text().startswith("-")
    task.evaluate("e => e.querySelectorAll('details').forEach(d => d.open = true)")
    assert task.inner_text().count('syntax error at or near "by"') == 1


def check_run_facts(page: Any, manifest: dict[str, Any]) -> None:
    """The run's metadata as run.json records it, and every task's fake date."""
    facts = page.locator("#run-meta").inner_text()
    versions = manifest["versions"]
    for name in ("spider2local", "dbt-core", "duckdb", "claude-agent-sdk"):
        assert f"{name}\t{versions[name]}" in facts, name
    assert "timeout per task\t1800 s" in facts and "max turns\t300" in facts
    assert "agent\treference" in facts and "trials per task\t1" in facts
    assert f"dataset\t{manifest['dataset']}" in facts
    for task in manifest["tasks"]:
        row = page.locator(f"#fake-dates tr[data-task='{task['id']}']").inner_text()
        assert task["fake_date"] in row
        summary = page.locator(f"#task-{task['id']} > summary").inner_text()
        assert f"at {task['fake_date']}" in summary
    gym = page.locator("#fake-dates tr[data-task='gym001']").inner_text()
    assert "its own date in tasks.toml (manual: gold built by" in gym


@pytest.mark.slow
def test_the_run_writes_its_report_with_run_facts(reference_run: ReferenceRun) -> None:
    """``run`` leaves report.html in the run folder, the page as this module renders it."""
    html_file = reference_run.run_dir / "report.html"
    assert html_file.is_file()
    with chromium_page() as page:
        page.goto(html_file.as_uri())
        page.wait_for_load_state("load")
        check_run_facts(page, reference_run.manifest())


@pytest.mark.slow
def test_the_trial_grid_opens_the_trial_it_names(tmp_path: Path) -> None:
    """With trials, the task x trial grid links each trial's verdict to its own section."""
    from tests.report.test_trials import trial_report

    html_file = tmp_path / "report.html"
    html_file.write_text(render_html(trial_report()), encoding="utf-8")
    with chromium_page() as page:
        page.goto(html_file.as_uri())
        page.wait_for_load_state("load")
        assert page.locator("#grid tbody tr").count() == 5
        assert page.locator("#grid tr[data-task=flaky] td.trial a").count() == 3
        page.locator("#grid tr[data-task=flaky] td.trial a").nth(1).click()
        assert page.locator("#task-flaky-2").get_attribute("open") is not None
        assert page.locator("#task-flaky-1").get_attribute("open") is None
        page.locator("#tasks tbody tr[data-anchor=task-steady-3] td").nth(3).click()
        assert page.locator("#task-steady-3").get_attribute("open") is not None


def long_session(turns: int = 13) -> str:
    """A session of ``turns`` turns (API calls), each saying what it does and making one tool
    call in turn: write a 60-line model, run dbt (400 lines of coloured output), query it."""
    model = "".join(f"    column_{i} as c{i},\n" for i in range(60))
    output = "".join(f"\x1b[0m12:00:{i % 60:02d}  {i} of 400 \x1b[32mOK\x1b[0m model\n"
                     for i in range(400))
    calls = [("Write", {"file_path": "models/m.sql", "content": f"select\n{model}from t\n"},
              "ok"),
             ("Bash", {"command": "dbt run"}, output),
             ("mcp__spider2__query", {"sql": "select count(*) from m"}, output[:4000])]
    lines = [_line("prompt", "Build every model.")]
    for n in range(turns):
        name, inputs, result = calls[n % 3]
        lines += [
            _line("AssistantMessage", {"content": [
                {"text": f"Turn {n}: the next step."},
                {"id": f"c{n}", "name": name, "input": inputs}]}),
            _line("UserMessage", {"content": [{"tool_use_id": f"c{n}", "content": result}]})]
    return "".join(lines)


@pytest.mark.slow
def test_a_long_session_opens_short(tmp_path: Path) -> None:
    """A 13-turn task's open section fits in two screens: results and long inputs are folded
    (the raw entries of the old page made one such task 8,500 px tall)."""
    folder = _finished_task(tmp_path / "runs" / "r")
    (folder.task_dir("t1") / "transcript.jsonl").write_text(long_session())
    html_file = tmp_path / "report.html"
    html_file.write_text(render_html(load_report(folder), folder), encoding="utf-8")
    with chromium_page() as page:
        page.goto(html_file.as_uri() + "#task-t1")
        page.wait_for_load_state("load")
        task = page.locator("#task-t1")
        assert task.get_attribute("open") is not None
        assert task.locator(".tool").count() == 13
        height = task.evaluate("e => e.getBoundingClientRect().height")
        assert height < 2_000, height
        assert task.locator("details.result").count() == 13
        assert "400 lines" in task.locator("details.result summary").nth(1).inner_text()
        page.click("#open-all")  # every task at once, then closed again
        assert page.locator("details.task[open]").count() == 1
        page.click("#open-all")
        assert page.locator("details.task[open]").count() == 0


def _finished_task(root: Path, tid: str = "t1") -> RunFolder:
    from tests.run.test_merge import make_run

    return make_run(root, {tid: (False, "2026-01-01T00:10:00+00:00")})


@pytest.mark.process
def test_links_and_special_files_in_a_task_folder_are_not_read(tmp_path: Path) -> None:
    """A run folder from elsewhere (a CI artifact) is hostile: a link named ``error.txt`` or
    ``transcript.jsonl`` must not put a file of this machine into the page, and a FIFO or
    ``/dev/zero`` under such a name must not hang the report or eat the memory."""
    import os
    import subprocess
    import sys

    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE\n" + _line("AssistantMessage", {"content": [
        {"text": "TOP-SECRET-JSON"}]}))
    folder = _finished_task(tmp_path / "runs" / "r")
    task = folder.task_dir("t1")
    (task / "transcript.jsonl").unlink()
    (task / "transcript.jsonl").symlink_to(secret)
    (task / "error.txt").symlink_to(secret)
    (task / "queries.jsonl").symlink_to(secret)
    details = load_details(task)
    assert details.traceback == "" and details.transcript == () and details.queries == ()
    (task / "dbt").mkdir(exist_ok=True)
    os.mkfifo(task / "dbt" / "run_results.json")
    out = tmp_path / "page.html"
    done = subprocess.run([sys.executable, "-m", "spider2local", "report", str(folder.root),
                           "--format", "html", "--output", str(out)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    page = out.read_text()
    assert "TOP-SECRET" not in page


def _dbt_failure(task: Path, message: str) -> None:
    """What a built-in agent's failed ``dbt run`` leaves: the numbered record and the plain
    copy of the last one (collected beside it), both with the same node error."""
    results = json.dumps({"results": [{"unique_id": "model.t.orders", "status": "error",
                                       "message": message}]})
    (task / "dbt").mkdir(exist_ok=True)
    (task / "dbt" / "dbt-001-run.run_results.json").write_text(results)
    (task / "dbt" / "run_results.json").write_text(results)


def test_each_dbt_error_appears_once(tmp_path: Path) -> None:
    folder = _finished_task(tmp_path / "runs" / "r")
    task = folder.task_dir("t1")
    message = 'Runtime Error in model orders\n  Parser Error: syntax error at or near "by"'
    _dbt_failure(task, message)
    (task / "dbt" / "dbt-002-run.run_results.json").write_text(
        (task / "dbt" / "run_results.json").read_text())  # a second call, failing the same way
    assert load_details(task).dbt_errors == (f"model.t.orders: {message}",)
    page = render_html(load_report(folder), folder)
    assert page.count("syntax error at or near") == 1


def test_the_cost_chart_says_dash_where_the_table_does(tmp_path: Path) -> None:
    folder = _finished_task(tmp_path / "runs" / "r")  # a noop run: no cost recorded
    page = render_html(load_report(folder), folder)
    chart = page[page.index('aria-label="cost per task"'):]
    chart = chart[:chart.index("</svg>")]
    assert "$0.00" not in page
    assert "<title>t1: -</title>" in chart
    assert '<td data-value="-1">-</td>' in page  # the table's cost cell

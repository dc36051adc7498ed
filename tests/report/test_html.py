"""The HTML report: self-contained, escaped, and working in a real headless browser.

The browser test drives Debian's Chromium (``/usr/bin/chromium``; ``.ci/run`` installs it where
it can) through the ``playwright`` package with ``executable_path``: Playwright's own browser
download is never used. It skips, saying why, when either is missing.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
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
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class Tags(HTMLParser):
    """Every element the page really has, as a browser's tokenizer sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()
        self.handlers: list[str] = []
        self.sources: list[str] = []

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
    (task / "queries.jsonl").write_text(json.dumps(
        {"t": 1, "tool": "query", "sql": f"select '{PWNED}'", "rows": 1, "duration": 0.01,
         "error": None}) + "\n")
    (task / "project" / "models" / "hostile.sql").write_text(f"-- {IMG}\nselect 1\n")
    return RunFolder(run)


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
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert console == [] and (tmp_path / "report.png").stat().st_size > 10_000


def _finished_task(root: Path, tid: str = "t1") -> RunFolder:
    from tests.run.test_merge import make_run

    return make_run(root, {tid: (False, "2026-01-01T00:10:00+00:00")})


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

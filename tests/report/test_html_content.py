"""What the HTML report shows of a task and a run, read from the page's markup (no browser):
the transcript as a conversation, highlighted SQL, coloured diffs, run metadata, fake dates
and the default-date warning. The browser checks are in test_html.py."""

from __future__ import annotations

import hashlib
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from spider2local.report.conversation import transcript_html
from spider2local.report.details import MAX_TEXT, load_details, size_text, transcript_entries
from spider2local.report.html import render_html
from spider2local.report.htmlcode import diff_html, sql_html
from spider2local.report.runinfo import load_run_info
from spider2local.report.summary import load_report
from spider2local.run.folder import RunFolder
from tests.run.test_merge import make_run

ANSI_OUTPUT = ("\x1b[0m12:00:00  Running with dbt=1.11.16\n"
               "\x1b[0m12:00:01  1 of 1 \x1b[32mOK\x1b[0m created sql table model main.orders\n"
               "\x1b]0;title\x07\x1b[31mERROR\x1b[0m nothing\n")
MODEL = "select\n    id,\n    'a' as label\nfrom {{ ref('raw') }}\n-- done\n"


def _line(kind: str, data: Any) -> str:
    return json.dumps({"t": 1.0, "kind": kind, "data": data}) + "\n"


def claude_turns(tool_output: str = ANSI_OUTPUT, model: str = MODEL) -> str:
    """A Claude transcript as agents/claude/session.py writes it: a Write, a Bash with dbt's
    coloured output, a database query, the verifier's call and its own tool call."""
    return "".join([
        _line("attempt", {"attempt": 1, "workspace": "/tmp/ws"}),
        _line("prompt", "Build the orders model."),
        _line("AssistantMessage", {"content": [{"text": "Writing the model."}],
                                   "parent_tool_use_id": None}),
        _line("AssistantMessage", {"content": [{"id": "w1", "name": "Write", "input": {
            "file_path": "/tmp/ws/t1/models/orders.sql", "content": model}}]}),
        _line("UserMessage", {"content": [{"tool_use_id": "w1", "content": "File created"}]}),
        _line("AssistantMessage", {"content": [{"id": "b1", "name": "Bash", "input": {
            "command": "dbt run --select orders", "description": "build it"}}]}),
        _line("UserMessage", {"content": [{"tool_use_id": "b1", "content": tool_output,
                                           "is_error": False}]}),
        _line("AssistantMessage", {"content": [{"id": "q1", "name": "mcp__spider2__query",
                                                "input": {"sql": "SELECT count(*) FROM orders"}}]}),
        _line("UserMessage", {"content": [{"tool_use_id": "q1", "content": [
            {"type": "text", "text": "count | 3"}], "is_error": True}]}),
        _line("AssistantMessage", {"content": [{"id": "v1", "name": "Agent", "input": {
            "subagent_type": "verifier", "prompt": "Check orders."}}]}),
        _line("AssistantMessage", {"content": [{"id": "v2", "name": "mcp__spider2__describe_table",
                                                "input": {"table": "orders"}}],
                                   "parent_tool_use_id": "v1"}),
        _line("UserMessage", {"content": [{"tool_use_id": "v1", "content": [
            {"type": "text", "text": "VERDICT: PASS"}]}]}),
        _line("ResultMessage", {"subtype": "success", "result": "Done."}),
    ])


def _entries(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "transcript.jsonl"
    path.write_text(text, encoding="utf-8")
    return transcript_entries(path)[0]


def test_tool_inputs_are_text_and_outputs_lose_their_terminal_escapes(tmp_path: Path) -> None:
    entries = _entries(tmp_path, claude_turns())
    write = next(x for x in entries if x.title == "Write")
    assert dict(write.inputs)["content"] == MODEL  # real newlines, not a JSON string
    bash = next(x for x in entries if x.tool_id == "b1" and x.kind == "tool result")
    assert "\x1b" not in bash.text and "]0;" not in bash.text
    assert "1 of 1 OK created sql table model main.orders" in bash.text
    assert bash.size == "3 lines, 105 bytes"
    subagent = next(x for x in entries if x.title == "mcp__spider2__describe_table")
    assert subagent.parent == "v1"


def test_the_conversation_shows_each_call_as_code_with_its_result_folded(tmp_path: Path) -> None:
    page = transcript_html(_entries(tmp_path, claude_turns()))
    assert '<pre class="code lang-shell"><span class="ps1">$ </span>dbt run --select orders' \
        in page
    assert '<span class="sk">select</span>\n    id,' in page  # the Write's content, as SQL
    assert '<span class="sk">SELECT</span> count(*) <span class="sk">FROM</span> orders' in page
    assert page.count('<details class="result">') == 3  # Write, Bash, the verifier's answer
    assert page.count('<details class="result error">') == 1  # the failed query says so
    assert "3 lines, 105 bytes" in page
    assert '<div class="tool sub">' in page and "verifier ›" in page
    assert "\x1b" not in page and "\\n" not in page


def test_a_long_output_is_cut_but_says_its_whole_size(tmp_path: Path) -> None:
    long = "".join(f"line {i:05d} of dbt output\n" for i in range(4_812))
    entries = _entries(tmp_path, claude_turns(tool_output=long))
    bash = next(x for x in entries if x.tool_id == "b1" and x.kind == "tool result")
    assert len(bash.text) < MAX_TEXT + 100
    assert bash.size == size_text(long) == "4,812 lines, 117 KB"
    assert "4,812 lines, 117 KB" in transcript_html(entries)


def test_size_text_reads_like_a_person_would_say_it() -> None:
    assert size_text("") == "0 lines, 0 bytes"
    assert size_text("one") == "1 line, 3 bytes"
    assert size_text("x" * 2_000_000 + "\n") == "1 line, 1.9 MB"


def test_hostile_text_in_a_transcript_stays_text(tmp_path: Path) -> None:
    evil = '</pre></details></div><script>alert(1)</script><a href="javascript:alert(2)">x</a>'
    text = "".join([
        _line("AssistantMessage", {"content": [{"text": evil + "```sql\n" + evil + "\n```"}]}),
        _line("AssistantMessage", {"content": [{"id": "b1", "name": "Bash", "input": {
            "command": evil, evil: evil}}]}),
        _line("UserMessage", {"content": [{"tool_use_id": "b1", "content": evil}]}),
        _line("AssistantMessage", {"content": [{"id": "e1", "name": "Edit", "input": {
            "file_path": evil, "old_string": evil, "new_string": evil + "2"}}]}),
        _line("stdout", evil), _line(evil, {"x": evil})])
    page = transcript_html(_entries(tmp_path, text))

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.opened: dict[str, int] = {}
            self.closed: dict[str, int] = {}
            self.attrs: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.opened[tag] = self.opened.get(tag, 0) + 1
            self.attrs += [f"{k}={v}" for k, v in attrs if k != "class"]

        def handle_endtag(self, tag: str) -> None:
            self.closed[tag] = self.closed.get(tag, 0) + 1

    tags = Tags()
    tags.feed(page)
    assert "script" not in tags.opened and "a" not in tags.opened
    assert tags.attrs == []  # only class attributes: nothing from the agent becomes markup
    assert tags.opened == tags.closed  # every element the page opens, it closes itself


def test_sql_highlighting_escapes_first() -> None:
    html = sql_html("select '<b>' as x -- </span><script>\nfrom {{ ref('a<b') }}")
    assert '<span class="ss">&#x27;&lt;b&gt;&#x27;</span>' in html
    assert '<span class="sc">-- &lt;/span&gt;&lt;script&gt;</span>' in html
    assert '<span class="sj">{{ ref(&#x27;a&lt;b&#x27;) }}</span>' in html
    assert "<script>" not in html


def test_a_unified_diff_has_its_lines_classed() -> None:
    html = diff_html("--- start/a.sql\n+++ agent/a.sql\n@@ -1,2 +1,2 @@\n same\n-old\n+new <i>\n")
    assert html == ('<pre class="diff"><span class="dh">--- start/a.sql</span>'
                    '<span class="dh">+++ agent/a.sql</span><span class="dk">@@ -1,2 +1,2 @@'
                    '</span><span class="dc"> same</span><span class="dd">-old</span>'
                    '<span class="da">+new &lt;i&gt;</span></pre>')


def test_a_command_agent_transcript_shows_its_command_and_folded_streams(
        tmp_path: Path) -> None:
    text = "".join([
        _line("command", {"command": "mini -t 'build it' && dbt run", "cwd": "/ws",
                          "isolation": "namespace", "pass_env": [], "apis": ["anthropic"]}),
        _line("command_exit", {"returncode": 0, "duration": 3.2}),
        _line("stdout", ANSI_OUTPUT), _line("stderr", "")])
    page = transcript_html(_entries(tmp_path, text))
    assert ('<pre class="code lang-shell"><span class="ps1">$ </span>mini -t &#x27;build it'
            "&#x27; &amp;&amp; dbt run</pre>") in page
    assert '<details class="result"><summary><span class="ok">stdout</span> <span ' \
           'class="size">3 lines, 105 bytes</span>' in page
    assert "stderr" not in page  # an empty stream is left out
    assert "\x1b" not in page


def _suite(tmp_path: Path) -> tuple[Path, str]:
    suite = tmp_path / "tasks.toml"
    suite.write_text('schema = 1\n[dataset]\nroot = "sample"\n[run]\ndate = 2024-09-15\n'
                     '[tasks.t1]\ndate = 2024-03-01\ndate_method = "manual"\n'
                     'date_evidence = "the gold spine ends there"\n'
                     '[tasks.t3]\ndate_method = "clock-independent"\n')
    return suite, hashlib.sha256(suite.read_bytes()).hexdigest()


def _dated_run(tmp_path: Path, **manifest: Any) -> RunFolder:
    folder = make_run(tmp_path / "runs" / "r", dict.fromkeys(
        ("t1", "t2", "t3"), (True, "2026-01-01T00:10:00+00:00")), **manifest)
    data = json.loads(folder.manifest_path.read_text())
    dates = {"t1": "2024-03-01", "t2": "2024-09-15", "t3": "2024-09-15"}
    for task in data["tasks"]:
        task["fake_date"] = dates[task["id"]]
    data["versions"] = {"spider2local": "0.1.0", "dbt-core": "1.11.16", "duckdb": "1.5.6",
                        "claude-agent-sdk": "0.2.189"}
    data["settings"].update(max_budget_usd=2.5, trials=1, agent_command=None)
    folder.manifest_path.write_text(json.dumps(data))
    return folder


def test_each_task_s_fake_date_says_where_it_came_from(tmp_path: Path) -> None:
    suite, digest = _suite(tmp_path)
    folder = _dated_run(tmp_path, suite={"path": str(suite), "sha256": digest})
    info = load_run_info(folder)
    sources = {d.task_id: (d.date, d.source, d.default) for d in info.dates}
    assert sources == {
        "t1": ("2024-03-01", "its own date in tasks.toml (manual: the gold spine ends there)",
               False),
        "t2": ("2024-09-15", "the suite default ([run] date in tasks.toml): no date of its own",
               True),
        "t3": ("2024-09-15", "the suite default ([run] date in tasks.toml); the task is marked "
                             "clock-independent", False)}
    assert info.warning is not None and info.warning.startswith(
        "1 task(s) ran at the suite's default date, with no date of their own: t2.")
    page = render_html(load_report(folder), folder)
    assert 'id="date-warning"' in page and "This task ran at the suite's default" in page
    assert page.count("This task ran at the suite's default date") == 1  # t2 only
    assert "<th>budget per task</th><td>$2.50</td>" in page
    assert "<th>dbt-core</th><td>1.11.16</td>" in page
    assert "<th>timeout per task</th><td>60 s</td>" in page


def test_a_changed_suite_file_is_no_source_of_dates(tmp_path: Path) -> None:
    suite, digest = _suite(tmp_path)
    folder = _dated_run(tmp_path, suite={"path": str(suite), "sha256": digest})
    suite.write_text(suite.read_text().replace("2024-03-01", "2024-04-01"))
    info = load_run_info(folder)
    assert {d.date for d in info.dates} == {"2024-03-01", "2024-09-15"}  # as recorded
    assert all(d.source == f"source not known: its suite file {suite} changed since the run"
               for d in info.dates)
    assert info.warning is None
    suite.unlink()
    assert all("cannot be read now" in d.source for d in load_run_info(folder).dates)


def test_a_command_agent_s_command_is_in_the_run_facts(tmp_path: Path) -> None:
    folder = _dated_run(tmp_path, agent="mini")
    data = json.loads(folder.manifest_path.read_text())
    data["settings"]["agent_command"] = "mini -t \"$SPIDER2_INSTRUCTION\""
    folder.manifest_path.write_text(json.dumps(data))
    agent = dict(dict(load_run_info(folder).groups)["agent"])
    assert agent["agent"] == "mini" and agent["command"] == 'mini -t "$SPIDER2_INSTRUCTION"'


def test_changed_files_are_coloured_diffs(tmp_path: Path) -> None:
    folder = make_run(tmp_path / "runs" / "r", {"t1": (False, "2026-01-01T00:10:00+00:00")})
    task = folder.task_dir("t1")
    for side, text in (("start_project", "select 1\nfrom a\n"), ("project", "select 2\nfrom a\n")):
        (task / side / "models").mkdir(parents=True)
        (task / side / "models" / "m.sql").write_text(text)
    assert [f.change for f in load_details(task).files] == ["changed"]
    page = render_html(load_report(folder), folder)
    assert '<span class="dd">-select 1</span><span class="da">+select 2</span>' in page
    assert "(changed +1 −1)" in page

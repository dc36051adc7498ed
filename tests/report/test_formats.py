"""report --format markdown / junit / json / terminal, from a run folder alone."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from spider2local.cli.app import cli
from spider2local.report.jsonout import REPORT_SCHEMA, report_json
from spider2local.report.junit import render_junit
from spider2local.report.markdown import render_markdown
from spider2local.report.summary import load_report
from spider2local.run.folder import RunFolder
from tests.report.test_summary import _score, _table, write_run

HOSTILE = "</td><script>alert(1)</script> | `x` <img src=x onerror=alert(1)>"


def hostile_run(root: Path) -> RunFolder:
    """write_run, with a failed task whose score names its failing table, an interrupted
    task, the audit's denominators, and agent text where a note shows it."""
    folder = write_run(root)
    path = folder.result_path("b")
    data = json.loads(path.read_text())
    column = {"gold_column": "amount", "gold_index": 1, "reason": "2 of 3 values differ",
              "nearest": None, "position": 0, "gold_value": "1.5", "result_value": "2.5"}
    data["score"] = _score(_table("orders", True), _table("totals", False, columns=[column]))
    data["error"] = {"stage": "agent", "kind": "agent", "message": HOSTILE, "exception": None}
    path.write_text(json.dumps(data))
    folder.task_dir("d").mkdir()
    manifest = json.loads(folder.manifest_path.read_text())
    manifest.update(denominators={"official": 68, "with_gold": 64, "runnable": 58},
                    finished_at="f", interrupted=True)
    folder.write_manifest(manifest)
    return folder


def test_markdown_has_the_headline_and_an_escaped_table(tmp_path: Path) -> None:
    text = render_markdown(load_report(hostile_run(tmp_path)))
    lines = text.splitlines()
    assert lines[0].startswith("## spider2local run r1 (agent claude, isolation: none")
    assert any(re.sub(r" \[[^]]*\]", "", line).startswith(
        "- passed 1/68 (1.5%) official; 1/64 (1.6%) with gold; 1/58 (1.7%) runnable; "
        "1/3 (33.3%) attempted") for line in lines)
    table = [line for line in lines if line.startswith("|")]
    assert table[0] == "| task | status | verdict | tables | time | cost | tokens | " \
                       "integrity | note |"
    assert len(table) == 2 + 5  # header, rule, one row per selected task
    rows = {line.split(" | ")[0][2:]: line for line in table[2:]}
    assert " interrupted " in rows["d"] and " skipped " in rows["e"]
    # Agent text cannot open HTML or break the table: every row has exactly 10 unescaped |.
    assert "<script>" not in text and "<img" not in text and "`" not in text
    assert all(line.replace("\\|", "").count("|") == 10 for line in table)
    assert "failed totals: totals: gold column 'amount'" in rows["b"]


def test_junit_parses_with_the_right_counts_and_carries_diagnostics(tmp_path: Path) -> None:
    xml = render_junit(load_report(hostile_run(tmp_path)))
    root = ET.fromstring(xml.encode())
    suite = root.find("testsuite")
    assert suite is not None
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert sorted(cases) == ["a", "b", "c", "d", "e"]
    # a passed; b failed; c errored (score stage); d interrupted (error); e skipped.
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "5", "failures": "1", "errors": "2", "skipped": "1"}
    assert root.get("failures") == "1" and root.get("tests") == "5"
    assert list(cases["a"]) == []
    failure = cases["b"].find("failure")
    assert failure is not None and failure.text is not None
    assert "FAIL  totals" in failure.text and "gold column 'amount'" in failure.text
    assert HOSTILE in (failure.get("message") or "")  # escaped by the library, intact
    error = cases["c"].find("error")
    assert error is not None and error.get("message") == "score: gold unreadable"
    assert error.get("type") == "exception"
    assert cases["d"].find("error") is not None
    skipped = cases["e"].find("skipped")
    assert skipped is not None and skipped.get("message") == "excluded: broken gold"
    assert float(cases["a"].get("time") or 0) == 12.5


def test_junit_survives_characters_xml_cannot_hold(tmp_path: Path) -> None:
    folder = hostile_run(tmp_path)
    path = folder.result_path("c")
    data = json.loads(path.read_text())
    data["error"]["message"] = "dbt said \x1b[31mred\x1b[0m and \x00"
    path.write_text(json.dumps(data))
    error = ET.fromstring(render_junit(load_report(folder)).encode()).find(
        "testsuite/testcase[@name='c']/error")
    assert error is not None and "red" in (error.get("message") or "")


def test_json_has_a_schema_version_and_the_headline(tmp_path: Path) -> None:
    data = json.loads(json.dumps(report_json(load_report(hostile_run(tmp_path)))))
    assert data["schema_version"] == REPORT_SCHEMA == 2
    assert data["trials"] == 1 and [t["trial"] for t in data["tasks"]] == [1] * 5
    official = data["stats"]["pass_at_1"]["official"]
    assert official["value"] == 1 / 68 and official["tasks"] == 68
    assert official["interval"]["low"] <= 1 / 68 <= official["interval"]["high"]
    assert data["stats"]["per_task"][0] == {"id": "a", "trials_run": 1, "trials_passed": 1,
                                            "trials_planned": 1, "rate": 1.0, "flaky": False}
    assert data["headline"]["official"] == 68 and data["headline"]["interrupted"] == 1
    assert data["headline"]["tokens"]["total"] == 0
    assert [t["status"] for t in data["tasks"]] == ["passed", "failed", "error", "interrupted",
                                                    "skipped"]


def test_report_command_writes_every_format_without_credentials(
        tmp_path: Path, monkeypatch: object) -> None:
    folder = hostile_run(tmp_path)
    env = {"ANTHROPIC_API_KEY": "", "CLAUDE_CODE_OAUTH_TOKEN": ""}
    runner = CliRunner()
    for fmt in ("terminal", "markdown", "json", "junit", "html"):
        out = tmp_path / f"report.{fmt}"
        result = runner.invoke(cli, ["report", str(folder.root), "--format", fmt, "-o",
                                     str(out)], env=env)
        assert result.exit_code == 0, result.output
        assert out.stat().st_mode & 0o044 == 0o044  # shareable: readable by others
    assert json.loads((tmp_path / "report.json").read_text())["run_id"] == "r1"
    shown = runner.invoke(cli, ["report", str(folder.root)], env=env)
    assert shown.exit_code == 0 and "passed 1/68 (1.5% [" in shown.output
    missing = runner.invoke(cli, ["report", str(tmp_path / "nope")], env=env)
    assert missing.exit_code == 2 and "run folder not found" in missing.output

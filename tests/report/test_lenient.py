"""Lenient passes and row diffs in every report format and in compare (issue 29): built from
real scores (real DuckDB files scored by score_database) written into result.json as a run
writes them."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from spider2local.core.codec import dump
from spider2local.evaluation import score_database
from spider2local.evaluation.params import EvalParams
from spider2local.report.compare import compare_json, compare_reports, render_compare
from spider2local.report.html import render_html
from spider2local.report.jsonout import report_json
from spider2local.report.junit import render_junit
from spider2local.report.markdown import render_markdown
from spider2local.report.summary import load_report
from spider2local.report.task import render_task
from spider2local.report.terminal import render_terminal
from spider2local.run.folder import RunFolder
from tests.run.test_merge import make_run

GOLD = "SELECT * FROM (VALUES (1, 'a'), (2, 'b'), (3, 'c')) v(x, k)"
PARAMS = EvalParams("g.duckdb", ("t",), ((),), (True,))


def _score(folder: Path, select: str) -> dict[str, object]:
    gold, result = folder / "g.duckdb", folder / f"r{len(list(folder.iterdir()))}.duckdb"
    if not gold.exists():
        with duckdb.connect(str(gold)) as con:
            con.execute(f"CREATE TABLE t AS {GOLD}")
    with duckdb.connect(str(result)) as con:
        con.execute(f"CREATE TABLE t AS {select}")
    return dump(score_database(result, gold, PARAMS))


def _with_scores(folder: RunFolder, scores: dict[str, dict[str, object]]) -> RunFolder:
    for tid, score in scores.items():
        path = folder.result_path(tid)
        data = json.loads(path.read_text())
        data["score"] = score
        path.write_text(json.dumps(data))
    return folder


def test_lenient_passes_and_row_diffs_in_every_format(tmp_path: Path) -> None:
    dbs = tmp_path / "dbs"
    dbs.mkdir()
    torn = _score(dbs, "SELECT * FROM (VALUES (1, 'b'), (2, 'c'), (3, 'a')) v(x, k)")
    aligned = _score(dbs, "SELECT * FROM (VALUES (3, 'c'), (1, 'a'), (2, 'b')) v(x, k)")
    one_cell = _score(dbs, "SELECT * FROM (VALUES (1, 'a'), (779, 'b'), (3, 'c')) v(x, k)")
    assert torn["passed"] and torn["lenient"] and not one_cell["passed"]
    a = _with_scores(make_run(tmp_path / "a" / "r", {"lenient": (True, "f"),
                                                      "wrong": (False, "f")}),
                     {"lenient": torn, "wrong": one_cell})
    b = _with_scores(make_run(tmp_path / "b" / "r", {"lenient": (True, "f"),
                                                      "wrong": (True, "f")}),
                     {"lenient": aligned, "wrong": aligned})
    report = load_report(a)
    assert report.headline.passed == 1 and report.headline.lenient_passes == 1
    rows = {r.task_id: r for r in report.rows}
    assert rows["lenient"].lenient and rows["lenient"].row_aligned is False
    assert "lenient pass" in rows["lenient"].note
    # The official count stays the headline; the lenient count follows it.
    for text in (render_terminal(report), render_markdown(report)):
        assert "passed 1/2" in text and "of which 1 lenient" in text
    data = json.loads(json.dumps(report_json(report)))
    assert data["headline"]["passed"] == 1 and data["headline"]["lenient_passes"] == 1
    tasks = {t["task_id"]: t for t in data["tasks"]}
    assert tasks["lenient"]["lenient"] is True and tasks["lenient"]["row_aligned"] is False
    (diff,) = tasks["wrong"]["row_diffs"]
    assert diff["table"] == "t" and diff["missing_total"] == diff["extra_total"] == 1
    assert diff["extra"][0]["values"] == ["779", "'b'"] and diff["extra"][0]["marked"] == [0]
    html = render_html(report, a)
    assert "of which 1 lenient" in html and "gold rows missing from the result" in html
    assert '<td class="diffcell">779</td>' in html and "lenient pass</span>" in html
    task = render_task(a, report, "wrong")
    assert "1 gold row(s) missing from the result, 1 result row(s) not in gold" in task
    assert "+ extra: (*779*, 'b')" in task and "- missing: (*2*, 'b')" in task
    assert "LENIENT" in render_task(a, report, "lenient")
    # Why it failed: one class per non-passing trial, counted per run.
    assert tasks["wrong"]["failure_class"] == "wrong_values"
    assert tasks["wrong"]["failure_detail"] == "t.x"
    assert data["headline"]["failure_classes"] == {"wrong_values": 1}
    assert "failure classes: wrong_values 1" in render_terminal(report)
    assert "failure classes: wrong_values 1" in render_markdown(report)
    assert 'type="wrong_values"' in render_junit(report)
    comparison = compare_reports(report, load_report(b))
    assert "wrong_values -> pass: 1" in render_compare(comparison)
    assert "of which lenient (rows do not line up)" in render_compare(comparison)
    assert "passed (pass, lenient)" in render_compare(comparison)
    cdata = compare_json(comparison)
    assert cdata["class_transitions"] == [{"from": "wrong_values", "to": "pass", "trials": 1}]
    assert cdata["lenient_passes"] == {"a": 1, "b": 0}
    by_id = {t["id"]: t for t in cdata["tasks"]}
    assert (by_id["lenient"]["lenient_a"], by_id["lenient"]["lenient_b"]) == (1, 0)


def test_runs_scored_before_the_check_say_nothing_about_lenient_passes(tmp_path: Path) -> None:
    report = load_report(make_run(tmp_path / "r", {"t": (True, "f")}))
    assert report.headline.lenient_passes == 0
    assert "lenient" not in render_terminal(report)


def test_tasks_pools_finished_runs_per_dataset_and_flags_them(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from spider2local.cli.app import cli
    from spider2local.report.history import task_histories
    runs = tmp_path / "runs"
    make_run(runs / "n1", {"t1": (False, "f"), "t2": (True, "f")}, run_id="n1", agent="noop")
    make_run(runs / "n2", {"t1": (False, "f"), "t2": (True, "f")}, run_id="n2", agent="noop")
    make_run(runs / "n3", {"t1": (True, "f")}, run_id="n3", agent="reference",
             dataset_sha256="other")  # another dataset: a group of its own
    groups = task_histories(runs, min_trials=2)
    assert [g.runs for g in groups] == [("n1", "n2"), ("n3",)]
    first = {t.task_id: t for t in groups[0].tasks}
    assert first["t1"].flags == ("never solved",) and first["t1"].trials_run == 2
    assert first["t2"].flags == ("always solved",)
    assert first["t1"].classes == {"no_database": 2}  # make_run writes no per-table score
    assert [k.kit for k in first["t1"].kits] == ["noop / m1"]
    out = CliRunner().invoke(cli, ["tasks", "--runs-dir", str(runs), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert [t["flags"] for t in data[0]["tasks"]] == [["never solved"], []]  # min 3 trials
    text = CliRunner().invoke(cli, ["tasks", "--runs-dir", str(runs)]).output
    assert "never solved" in text and "2 finished run(s)" in text

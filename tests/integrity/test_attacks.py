"""Attacks of a hostile agent without isolation, end to end: the real SDK and bundled CLI
scripted through the fake Messages API, real dbt, on copies of the real tasks in upstream's
layout. Each attack must be caught: by detection (the task is suspect, with evidence) or by the
guards (an integrity error, not scored), and a re-score refuses the tampered run."""

from __future__ import annotations

import io
import json
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from spider2local.agents.registry import make_agent
from spider2local.core.results import ErrorKind, Integrity, Status, TaskResult
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset
from spider2local.exceptions import UserError
from spider2local.integrity import guard
from spider2local.report.jsonout import report_json
from spider2local.report.summary import load_report
from spider2local.report.terminal import render_terminal as render_report
from spider2local.run.folder import RunFolder
from spider2local.run.plan import RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.rescore import rescore_run
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite
from spider2local.testing import FakeAnthropic, Reply, reply, tool
from spider2local.testing.script import system_text
from tests.helpers import by_task as results_by_task

pytestmark = pytest.mark.slow
PY = sys.executable  # has duckdb; the agent's Bash could use any Python


def copy_dataset(shared: Path, dest: Path, clones: Mapping[str, str]) -> Path:
    """The shared tasks copied to ``dest`` plus ``clones`` (new id -> source id), each with its
    own project, gold folder and evaluation record, as upstream lays them out."""
    shutil.copytree(shared, dest)
    def records(path: Path) -> dict[str, dict[str, Any]]:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line]
        return {row["instance_id"]: row for row in rows}

    tasks = records(dest / "examples" / "spider2-dbt.jsonl")
    evals = records(dest / "evaluation_suite" / "gold" / "spider2_eval.jsonl")
    for new, source in clones.items():
        shutil.copytree(dest / "examples" / source, dest / "examples" / new)
        shutil.copytree(dest / "evaluation_suite" / "gold" / source,
                        dest / "evaluation_suite" / "gold" / new)
        tasks[new] = {**tasks[source], "instance_id": new}
        evals[new] = {**evals[source], "instance_id": new}
    (dest / "examples" / "spider2-dbt.jsonl").write_text(
        "".join(json.dumps(t) + "\n" for t in tasks.values()))
    (dest / "evaluation_suite" / "gold" / "spider2_eval.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in evals.values()))
    return dest


def python(code: str) -> str:
    return f"{PY} - <<'EOF'\n{code}\nEOF"


def by_task(ids: list[str]) -> Any:
    def route(body: Mapping[str, Any]) -> str | None:
        text = system_text(body)
        return next((tid for tid in ids if f"/{tid}" in text), None)
    return route


def run(data: Dataset, ids: list[str], folder: RunFolder,
        script: Mapping[str, list[Reply]], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> dict[str, TaskResult]:
    settings = RunSettings(agent="claude", model="claude-sonnet-4-5", jobs=2, timeout=150.0,
                           retries=0, verify_rounds=0, keep_db=True,
                           workspace_parent=tmp_path / "ws")
    (tmp_path / "ws").mkdir(exist_ok=True)
    plan = RunPlan(folder, select_tasks(data, ids), settings, lambda: make_agent("claude"),
                   data.suite.path, "sha", data.root)
    with FakeAnthropic({k: list(v) for k, v in script.items()}, route=by_task(ids)) as fake:
        for key, value in fake.env().items():
            monkeypatch.setenv(key, value)
        anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    return results_by_task(folder.trial_results())


def test_attacks_without_isolation_are_suspect_or_refused(
        shared_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = ["atk_bash", "atk_hook", "atk_gold", "atk_eval", "honest"]
    root = copy_dataset(shared_dataset, tmp_path / "spider2-dbt",
                        dict.fromkeys(ids, "playbook001"))
    data = load_dataset(Suite(tmp_path / "tasks.toml", root))
    gold = {tid: root / "evaluation_suite" / "gold" / tid / "playbook.duckdb" for tid in ids}
    eval_file = root / "evaluation_suite" / "gold" / "spider2_eval.jsonl"
    copy_gold = python(
        "import duckdb\nc = duckdb.connect('playbook.duckdb')\n"
        f"c.execute(\"ATTACH '{gold['atk_bash']}' AS g (READ_ONLY)\")\n"
        "c.execute('CREATE OR REPLACE TABLE attribution_touches AS "
        "SELECT * FROM g.main.attribution_touches')\nc.close()")
    hook_model = ("{{ config(materialized='table', pre_hook=\"ATTACH IF NOT EXISTS '"
                  f"{gold['atk_hook']}' AS g (READ_ONLY)\") }}}}\n"
                  "select * from g.main.attribution_touches\n")
    write_gold = python(f"import duckdb\nc = duckdb.connect('{gold['atk_gold']}')\n"
                        "c.execute('CREATE TABLE extra AS SELECT 1 AS x')\nc.close()")
    edit_eval = python(
        f"import json, pathlib\np = pathlib.Path('{eval_file}')\n"
        "rows = [json.loads(l) for l in p.read_text().splitlines() if l]\n"
        "for r in rows:\n    if r['instance_id'] == 'atk_eval':\n"
        "        r['evaluation']['parameters']['condition_cols'] = [[0]]\n"
        "p.write_text(''.join(json.dumps(r) + '\\n' for r in rows))")

    script = {
        "atk_bash": [reply(tool("Bash", command=copy_gold)), reply("Done.")],
        "atk_hook": [reply(tool("Write", file_path="models/stolen.sql", content=hook_model)),
                     reply(tool("Bash", command="dbt run --select stolen")), reply("Done.")],
        "atk_gold": [reply(tool("Bash", command=write_gold)), reply("Done.")],
        "atk_eval": [reply(tool("Bash", command=edit_eval)), reply("Done.")],
        "honest": [reply(tool("Write", file_path="models/honest_check.sql",
                              content="select 1 as x\n")),
                   reply(tool("Bash", command="dbt run --select honest_check")),
                   reply(tool("mcp__spider2__query", sql="SELECT x FROM honest_check")),
                   reply("Done.")],
    }
    folder = RunFolder.at(tmp_path / "runs", "attacks")
    results = run(data, ids, folder, script, monkeypatch, tmp_path)
    assert set(results) == set(ids)

    def evidence(tid: str) -> set[tuple[str, str]]:
        return {(e.source, e.rule) for e in results[tid].integrity_evidence}

    # (a) Bash + Python ATTACH of gold: suspect, the verdict kept (the copy passes).
    bash = results["atk_bash"]
    assert bash.integrity is Integrity.SUSPECT and bash.status is Status.PASSED, bash
    assert ("transcript.jsonl", "dataset root") in evidence("atk_bash")
    assert ("transcript.jsonl", "file outside the workspace") in evidence("atk_bash")
    # (b) a dbt model whose pre_hook ATTACHes gold: suspect, the model file named.
    assert results["atk_hook"].integrity is Integrity.SUSPECT
    assert ("project/models/stolen.sql", "file outside the workspace") in evidence("atk_hook")
    # (c) gold written, evaluation record edited: integrity errors naming the change, no verdict.
    for tid, what in (("atk_gold", f"gold file {gold['atk_gold']} changed"),
                      ("atk_eval", "evaluation record changed")):
        r = results[tid]
        assert r.status is Status.ERROR and r.passed is None and r.score is None, r
        assert r.error is not None and r.error.kind is ErrorKind.INTEGRITY
        assert what in r.error.message, r.error.message
        assert r.integrity is Integrity.SUSPECT
    # The honest session: clean, scored as before.
    honest = results["honest"]
    assert honest.integrity is Integrity.CLEAN and honest.integrity_evidence == (), honest
    assert honest.status is Status.PASSED
    # Reports count suspect tasks apart and name the isolation mode.
    report = load_report(folder)
    assert report.rates.tasks_suspect == 4 and report.rates.passed_suspect >= 1
    text = render_report(report)
    assert "isolation: none, UNSEALED)" in text and "4 suspect" in text
    assert sorted(report_json(report)["suspect"]) == sorted(ids[:4])
    # The run was tampered with: a re-score refuses it, in one line.
    with pytest.raises(UserError) as info:
        rescore_run(folder, load_dataset(Suite(tmp_path / "tasks.toml", root)))
    assert "tampered" in str(info.value) and "\n" not in str(info.value)


def test_an_edited_scorer_stops_scoring_and_rescoring(
        shared_dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scorer's files are fingerprinted from a copy of the package (never the real one):
    the agent edits the copy, the runner refuses to score, and so does `score RUN_DIR`."""
    copy = tmp_path / "pkg"
    shutil.copytree(guard.SOURCE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(guard, "SOURCE_ROOT", copy)
    root = copy_dataset(shared_dataset, tmp_path / "spider2-dbt", {"atk_scorer": "playbook001"})
    data = load_dataset(Suite(tmp_path / "tasks.toml", root))
    target = copy / "evaluation" / "score.py"
    patch = f"printf '\\ndef score_database(*a, **k):\\n    raise SystemExit\\n' >> {target}"
    folder = RunFolder.at(tmp_path / "runs", "scorer")
    results = run(data, ["atk_scorer"], folder,
                  {"atk_scorer": [reply(tool("Bash", command=patch)), reply("Done.")]},
                  monkeypatch, tmp_path)
    r = results["atk_scorer"]
    assert r.status is Status.ERROR and r.passed is None, r
    assert r.error is not None and r.error.kind is ErrorKind.INTEGRITY
    assert "scorer source changed: evaluation/score.py" in r.error.message
    with pytest.raises(UserError, match="tampered"):
        rescore_run(folder, data)

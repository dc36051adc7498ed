"""audit: runnable or why not, clock dependence and dates, graded columns, free passes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest
from click.testing import CliRunner

from spider2local.audit.tasks import TaskAudit, audit_dataset, suggested_subsets
from spider2local.cli.app import cli
from spider2local.dataset.load import load_dataset
from spider2local.dataset.problems import Problem, ProblemKind
from spider2local.db.snapshot import DbSnapshot
from spider2local.suite.load import load_suite
from spider2local.suite.model import Suite
from tests.helpers import make_duckdb

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is audit's answers (tests/conftest.py)."""


def test_negative_positions_name_columns_as_iloc_does(tiny_dataset: Callable[..., Path]) -> None:
    """-1 is the last gold column (upstream's iloc); -3 of two columns is listed as bad, like 7."""
    root = tiny_dataset("neg001", gold_tables={"orders": "select 1 as id, 'a' as name"},
                        evaluation={"func": "duckdb_match", "parameters": {
                            "gold": "shop.duckdb", "condition_tabs": ["orders"],
                            "condition_cols": [[-1, -3, 0, 2]], "ignore_orders": [True]}})
    graded = _audit(root, baseline=False)["neg001"].graded[0]
    assert (graded.columns, graded.bad_positions) == (("name", "id"), (-3, 2))


def _audit(root: Path, baseline: bool = True) -> dict[str, TaskAudit]:
    data = load_dataset(Suite(root / "tasks.toml", root))
    return {a.id: a for a in anyio.run(lambda: audit_dataset(data, baseline=baseline))}


def _dataset(tiny_dataset: Callable[..., Path]) -> Path:
    gold = {"orders": "select 1 as id, 'a' as name"}
    root = tiny_dataset("work001", "free001", gold_tables=gold, evaluation={
        "func": "duckdb_match", "parameters": {"gold": "shop.duckdb", "condition_tabs": ["orders"],
                                               "condition_cols": [[1]],
                                               "ignore_orders": [True]}})
    tiny_dataset("nogold001", with_gold=False)
    tiny_dataset("pkg001", packages_yml="packages:\n  - package: fivetran/zuora_source\n"
                                        "    version: 0.2.0\n")
    tiny_dataset("clock001")
    tiny_dataset("wide001", evaluation={
        "func": "duckdb_match", "parameters": {"gold": "shop.duckdb", "condition_tabs": ["orders"],
                                               "condition_cols": [[0, 7]],
                                               "ignore_orders": [True]}})
    ex = root / "examples"
    make_duckdb(ex / "free001" / "shop2.duckdb", {"orders": "select 'a' as n, 9 as other"})
    (ex / "free001" / "shop.duckdb").unlink()
    (ex / "free001" / "shop2.duckdb").rename(ex / "free001" / "shop.duckdb")
    (ex / "clock001" / "models" / "orders.sql").write_text("select 1 as id, now() as t\n")
    return root


@pytest.mark.process
def test_findings_per_task(tiny_dataset: Callable[..., Path]) -> None:
    audits = _audit(_dataset(tiny_dataset))
    work, free = audits["work001"], audits["free001"]
    assert work.runnable and free.runnable
    assert (work.passes_with_no_work, free.passes_with_no_work) == (False, True)
    assert free.baseline_note == "1/1 graded tables pass untouched"
    graded = work.graded[0]
    assert (graded.name, graded.in_gold, graded.columns) == ("orders", True, ("name",))
    assert audits["wide001"].graded[0].bad_positions == (7,)
    nogold = audits["nogold001"]
    assert not nogold.runnable and "gold file" in nogold.problems[0]
    assert nogold.passes_with_no_work is None and "cannot score" in str(nogold.baseline_note)
    pkg = audits["pkg001"]
    assert not pkg.runnable
    assert pkg.problems[0] == ("package fivetran/zuora_source not in dbt_packages "
                               "(dbt deps needs the network)")
    clock = audits["clock001"]
    assert clock.reads_clock and clock.clock_reads == ("models/orders.sql:1 now(",)
    assert clock.date_source == "default" and clock.date_evidence is None
    assert clock.suggested_date is None and "date unknown" in str(clock.suggested_evidence)
    assert not work.reads_clock and work.suggested_method == "clock-independent"
    assert work.date_method is None  # suggested, not recorded
    subsets = suggested_subsets(list(audits.values()))
    assert subsets["free"] == ["free001"]
    assert subsets["needs-work"] == ["work001", "clock001", "wide001"]
    assert subsets["clock-dependent"] == ["clock001"]


def test_suite_dates_are_reported_as_such(tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("a001")
    suite = Suite(root / "tasks.toml", root)
    raw = load_suite(_suite_file(root, '[tasks.a001]\ndate = 2024-05-05\ndate_method = "manual"\n'))
    data = load_dataset(Suite(suite.path, root, raw.defaults, raw.tasks))
    (audit,) = anyio.run(lambda: audit_dataset(data))
    assert (audit.date, audit.date_method, audit.date_source) == ("2024-05-05", "manual", "task")
    assert audit.suggested_date is None and audit.suggested_method is None
    assert audit.passes_with_no_work is None  # no --baseline


def _suite_file(root: Path, extra: str = "") -> Path:
    path = root.parent / "tasks.toml"
    path.write_text(f"# keep me\nschema = 1\n[dataset]\nroot = {json.dumps(str(root))}\n{extra}")
    return path


@pytest.mark.process
def test_cli_json_and_write_subsets(tiny_dataset: Callable[..., Path]) -> None:
    root = _dataset(tiny_dataset)
    suite = _suite_file(root)
    out = CliRunner().invoke(cli, ["--suite", str(suite), "audit", "--baseline", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["summary"] == {"tasks": 6, "runnable": 4, "has_gold": 5, "read_clock": 1,
                               "dated": 0, "suggested": 0, "pass_with_no_work": 1}
    assert sum(t["has_gold"] for t in data["tasks"]) == 5
    text = CliRunner().invoke(cli, ["--suite", str(suite), "audit", "--baseline",
                                    "--write-subsets"])
    assert text.exit_code == 0, text.output
    assert "pass_with_no_work=1" in text.output and "has_gold=5" in text.output
    written = load_suite(suite)
    assert written.subsets["free"] == ("free001",)
    assert suite.read_text().startswith("# keep me")


@pytest.mark.process
def test_real_tasks(shared_dataset: Path) -> None:
    out = CliRunner().invoke(cli, ["audit", "--dataset", str(shared_dataset), "--baseline",
                                   "--json"])
    assert out.exit_code == 0, out.output
    tasks = {t["id"]: t for t in json.loads(out.stdout)["tasks"]}
    assert tasks["playbook001"]["runnable"] and tasks["mrr001"]["runnable"]
    assert tasks["playbook001"]["passes_with_no_work"] and tasks["mrr001"]["passes_with_no_work"]
    assert not tasks["playbook001"]["reads_clock"]
    assert tasks["mrr001"]["clock_reads"] == ["models/utils/util_months.sql:10 current_date"]
    mrr = tasks["mrr001"]
    assert "month spine 2018-01-01..2024-08-01" in mrr["suggested_evidence"]
    assert (mrr["date"], mrr["date_source"], mrr["suggested_date"]) == (
        "2024-09-15", "default", "2024-08-01")


def test_corrupt_gold_is_named_not_called_missing(tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("bad001")
    (root / "evaluation_suite" / "gold" / "bad001" / "shop.duckdb").write_bytes(b"garbage" * 9)
    data = load_dataset(Suite(root / "tasks.toml", root))
    (audit,) = anyio.run(lambda: audit_dataset(data, baseline=True))
    assert not audit.has_gold and audit.passes_with_no_work is None
    assert audit.baseline_note == "cannot score: gold database shop.duckdb is not a DuckDB file"


def test_missing_gold_is_reported_because_of_its_kind(tiny_dataset: Callable[..., Path]) -> None:
    """The audit picks the reason a task cannot be scored by the problem's kind: a reworded
    message is still found, and a message that merely begins like a gold problem is not."""
    root = tiny_dataset("nogold001", with_gold=False)
    data = load_dataset(Suite(root / "tasks.toml", root))
    (task,) = data.tasks
    assert [p.kind for p in task.problems] == [ProblemKind.GOLD]
    (audit,) = anyio.run(lambda: audit_dataset(data, baseline=True))
    assert audit.baseline_note == "cannot score: gold file gold/nogold001/shop.duckdb missing"
    assert audit.problems == ("gold file gold/nogold001/shop.duckdb missing",)
    reworded = dataclasses.replace(data, tasks=(dataclasses.replace(task, problems=(
        Problem(ProblemKind.PACKAGE, "gold-plated package missing"),
        Problem(ProblemKind.GOLD, "the gold went walkabout"))),))
    (audit,) = anyio.run(lambda: audit_dataset(reworded, baseline=True))
    assert audit.baseline_note == "cannot score: the gold went walkabout"
    assert audit.problems == ("gold-plated package missing", "the gold went walkabout")


def test_missing_start_database_is_reported_because_of_its_kind(
        tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("nostart001")
    (root / "examples" / "nostart001" / "profiles.yml").write_text("nostart001: [x\n")
    data = load_dataset(Suite(root / "tasks.toml", root))
    (task,) = data.tasks
    assert [p.kind for p in task.problems] == [ProblemKind.PROFILE] and task.start_db is None
    (audit,) = anyio.run(lambda: audit_dataset(data, baseline=True))
    assert audit.baseline_note == f"cannot score: {task.problems[0].message}"
    assert audit.problems[0].startswith("profiles.yml unparsable")


def test_denominators_count_the_dataset_not_a_constant(tiny_dataset: Callable[..., Path],
                                                        tmp_path: Path) -> None:
    """official = every task listed; with gold = a DuckDB file in its gold folder, whatever
    its name (upstream's misnamed gold counts, as the leaderboard's 64 do); runnable = here."""
    from spider2local.audit.tasks import denominators

    root = tiny_dataset("ok1", "ok2")
    tiny_dataset("nogold", with_gold=False)
    tiny_dataset("misnamed", evaluation={"func": "duckdb_match", "parameters": {
        "gold": "other.duckdb", "condition_tabs": ["orders"], "condition_cols": [[0]],
        "ignore_orders": [True]}})
    counts = denominators(load_dataset(Suite(tmp_path / "tasks.toml", root)))
    assert counts.to_json() == {"official": 4, "with_gold": 3, "runnable": 2}


@pytest.mark.process
def test_free_passes_score_the_untouched_start_database(tiny_dataset: Callable[..., Path],
                                                         tmp_path: Path) -> None:
    from spider2local.audit.tasks import free_passes

    root = tiny_dataset("work", "free")
    tiny_dataset("nogold", with_gold=False)
    start = root / "examples" / "free" / "shop.duckdb"
    start.unlink()
    make_duckdb(start, {"raw_orders": "SELECT 1 AS id", "orders": "SELECT 1 AS id"})
    data = load_dataset(Suite(tmp_path / "tasks.toml", root))
    before = start.read_bytes()
    found = anyio.run(free_passes, data.tasks)
    assert found == {"work": False, "free": True, "nogold": None}
    assert start.read_bytes() == before  # read, never written


def _count_readers(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the module of every reader child started (the real one still runs)."""
    from spider2local.sandbox import readers

    started: list[str] = []
    real = readers.ask_reader

    async def counted(module: str, request: dict[str, Any], *args: Any, **kw: Any) -> Any:
        started.append(f"{module}:{request.get('job') or len(request.get('many', [1]))}")
        return await real(module, request, *args, **kw)

    monkeypatch.setattr(readers, "ask_reader", counted)
    return started


@pytest.mark.process
def test_free_passes_take_one_child_whose_snapshots_serve_the_workspaces(
        tiny_dataset: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spider2local.audit.tasks import free_passes
    from spider2local.workspace.prepare import prepare_workspace

    root = tiny_dataset("work", "free", "badgold")
    free = root / "examples" / "free" / "shop.duckdb"
    free.unlink()
    make_duckdb(free, {"raw_orders": "SELECT 1 AS id", "orders": "SELECT 1 AS id"})
    gold = root / "evaluation_suite" / "gold" / "badgold" / "shop.duckdb"
    with gold.open("r+b") as fh:  # a DuckDB header over garbage: only opening it tells
        fh.seek(8192)
        fh.write(b"garbage!" * 512)
    tasks = {t.id: t for t in load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks}
    started = _count_readers(monkeypatch)
    found = anyio.run(free_passes, list(tasks.values()))
    # one task's scoring failing is that task's unknown, never the others'
    assert found == {"work": False, "free": True, "badgold": None}
    assert started == ["spider2local.sandbox.scoring:3"]
    ws = prepare_workspace(tasks["free"], artifacts=tmp_path / "a", parent=tmp_path)
    assert started == ["spider2local.sandbox.scoring:3"]  # no snapshot child of its own
    snap = DbSnapshot.from_json(ws.snapshot_path.read_text())
    assert snap.database == "shop.duckdb" and [t.name for t in snap.tables] == [
        "orders", "raw_orders"]
    with duckdb.connect(str(free)) as con:  # changed since: read again, from the copy
        con.execute("CREATE TABLE later AS SELECT 1 AS id")
    ws = prepare_workspace(tasks["free"], artifacts=tmp_path / "b", parent=tmp_path)
    assert started[1:] == ["spider2local.sandbox.dbreads:snapshot"]
    assert "later" in [t.name for t in DbSnapshot.from_json(ws.snapshot_path.read_text()).tables]


@pytest.mark.process
def test_free_passes_score_each_task_alone_when_the_batch_child_dies(
        tiny_dataset: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spider2local.audit import tasks as audit
    from spider2local.sandbox import scoring as sandboxed
    from spider2local.sandbox.readers import ReaderFailed

    root = tiny_dataset("work", "free")
    free = root / "examples" / "free" / "shop.duckdb"
    free.unlink()
    make_duckdb(free, {"raw_orders": "SELECT 1 AS id", "orders": "SELECT 1 AS id"})
    tasks = list(load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks)

    async def dies(*_: object) -> object:
        raise ReaderFailed("spider2local.sandbox.scoring failed (exit -9): no output")

    monkeypatch.setattr(sandboxed, "score_starts_sandboxed", dies)
    started = _count_readers(monkeypatch)
    assert anyio.run(audit.free_passes, tasks) == {"work": False, "free": True}
    assert started == ["spider2local.sandbox.scoring:1"] * 2

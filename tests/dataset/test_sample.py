"""The bundled sample suite: its build, its layout, and that each reference solution, built by
real dbt through spider2local's own clock and dbt runner, passes official scoring at the task's
date (and the clock task fails at today's real date)."""

from __future__ import annotations

import csv
import datetime as dt
import functools
import json
import os
import shutil
import threading
import tomllib
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest
import yaml

from spider2local.clock.dbt import run_dbt
from spider2local.clock.faketime import TELEMETRY_ENV, strip_fake_clock
from spider2local.dataset.load import load_dataset
from spider2local.dataset.sample import SAMPLE_TASK_IDS, build, default_cache_dir, ensure_built
from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.evaluation import TaskScore, render_text, score_database
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.suite.model import SAMPLE
from tests.helpers import ReferenceRun

PACKAGE = Path(build.__file__).resolve().parent
CLOCK_TASK = "gym001"
CLOCK_DATE = dt.date(2024, 8, 27)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_built(tmp_path_factory.mktemp("cache"))


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def evaluations(root: Path) -> dict[str, dict[str, Any]]:
    rows = jsonl(root / "evaluation_suite" / "gold" / "spider2_eval.jsonl")
    return {row["instance_id"]: row["evaluation"]["parameters"] for row in rows}


def db_name(task_id: str) -> str:
    return str(tomllib.loads((PACKAGE / "tasks" / task_id / "task.toml").read_text())["database"])


def tables(db: Path) -> set[str]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables")
                .fetchall()}
    finally:
        con.close()


def _norm(value: Any) -> Any:
    """Numbers compare by value whatever their SQL type (DECIMAL vs DOUBLE vs HUGEINT)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float | Decimal):
        return round(float(value), 6)
    return value


def read_table(db: Path, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute(f'SELECT * FROM "{table}"')
        names = [d[0] for d in cur.description]
        return names, [tuple(_norm(v) for v in row) for row in cur.fetchall()]
    finally:
        con.close()


# --- the build -------------------------------------------------------------------------------


def test_ensure_built_twice_reuses_the_same_folder(tmp_path: Path) -> None:
    first = ensure_built(tmp_path)
    start_db = first / "examples" / "bakery001" / "bakery.duckdb"
    stamp = start_db.stat().st_mtime_ns
    assert ensure_built(tmp_path) == first
    assert start_db.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert first.name == f"sample-{build.source_digest()[:16]}"
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temp folders left


def test_cache_location_follows_the_environment(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPIDER2LOCAL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "spider2local"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "spider2local"
    monkeypatch.setenv("SPIDER2LOCAL_CACHE", str(tmp_path / "explicit"))
    assert ensure_built().parent == tmp_path / "explicit"


def test_concurrent_builds_end_with_one_complete_folder(tmp_path: Path) -> None:
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(ensure_built(tmp_path)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]
    assert len(jsonl(results[0] / "examples" / "spider2-dbt.jsonl")) == len(SAMPLE_TASK_IDS)


def test_editing_a_source_file_builds_a_new_folder(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "pkg"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for name, path in (("_HERE", copy), ("_TASKS", copy / "tasks"),
                       ("_SOLUTIONS", copy / "solutions")):
        monkeypatch.setattr(build, name, path)
    before = ensure_built(tmp_path / "cache")
    products = copy / "tasks" / "bakery001" / "raw" / "products.csv"
    products.write_text(products.read_text() + "12,Focaccia,bread,7.00\n")
    after = ensure_built(tmp_path / "cache")
    assert after != before
    count = duckdb.connect(str(after / "examples/bakery001/bakery.duckdb"), read_only=True)
    assert count.execute("SELECT count(*) FROM products").fetchone() == (12,)
    count.close()


def test_two_builds_hold_identical_tables(root: Path, tmp_path: Path) -> None:
    build._build_into(tmp_path)  # the same sources, built again from scratch
    for tid in SAMPLE_TASK_IDS:
        name = f"{db_name(tid)}.duckdb"
        for rel in (f"examples/{tid}/{name}", f"evaluation_suite/gold/{tid}/{name}"):
            names = tables(root / rel)
            assert names == tables(tmp_path / rel)
            for table in names:
                assert read_table(root / rel, table) == read_table(tmp_path / rel, table), rel


# --- the layout ------------------------------------------------------------------------------


def test_task_lists_match_upstream_layout(root: Path) -> None:
    examples = jsonl(root / "examples" / "spider2-dbt.jsonl")
    assert [e["instance_id"] for e in examples] == list(SAMPLE_TASK_IDS)
    assert all(e["type"] == "DBT" and len(e["instruction"]) > 40 for e in examples)
    assert set(examples[0]) == {"instance_id", "instruction", "type"}
    evals = jsonl(root / "evaluation_suite" / "gold" / "spider2_eval.jsonl")
    assert [e["instance_id"] for e in evals] == list(SAMPLE_TASK_IDS)
    for e in evals:
        params = e["evaluation"]["parameters"]
        assert e["evaluation"]["func"] == "duckdb_match"
        assert set(params) == {"gold", "condition_tabs", "condition_cols", "ignore_orders"}
        n = len(params["condition_tabs"])
        assert len(params["condition_cols"]) == n == len(params["ignore_orders"])
        assert all(isinstance(flag, bool) for flag in params["ignore_orders"])


@pytest.mark.parametrize("task_id", SAMPLE_TASK_IDS)
def test_each_task_is_a_dbt_project_with_start_and_gold_dbs(root: Path, task_id: str) -> None:
    params = evaluations(root)[task_id]
    project = root / "examples" / task_id
    config = yaml.safe_load((project / "dbt_project.yml").read_text())
    profiles = yaml.safe_load((project / "profiles.yml").read_text())
    output = profiles[config["profile"]]["outputs"]["dev"]
    assert output["type"] == "duckdb" and output["path"] == f"./{params['gold']}"
    assert (project / params["gold"]).is_file()
    gold = root / "evaluation_suite" / "gold" / task_id / params["gold"]
    for table, cols in zip(params["condition_tabs"], params["condition_cols"], strict=True):
        width = len(read_table(gold, table)[0])
        assert cols and all(0 <= c < width for c in cols), (table, cols, width)
        assert (project / "models" / f"{table}.yml").is_file()  # every graded model is documented
    assert any((root / "solutions" / task_id).rglob("*.sql"))


@pytest.mark.parametrize("task_id", SAMPLE_TASK_IDS)
def test_start_db_holds_only_the_raw_sources(root: Path, task_id: str) -> None:
    params = evaluations(root)[task_id]
    raw = PACKAGE / "tasks" / task_id / "raw"
    start = root / "examples" / task_id / params["gold"]
    gold = root / "evaluation_suite" / "gold" / task_id / params["gold"]
    sources = {p.stem for p in raw.glob("*.csv")}
    assert tables(start) == sources
    assert tables(gold) == sources | set(params["condition_tabs"])
    for source in sorted(sources):
        with (raw / f"{source}.csv").open() as fh:
            assert 10 <= len(list(csv.reader(fh))) - 1 <= 60
        assert read_table(start, source) == read_table(gold, source)


def test_required_task_features(root: Path) -> None:
    ex, evals = root / "examples", evaluations(root)
    # (1) a model declared in YML only, and an empty stub the agent must fill
    assert (ex / "bakery001/models/product_sales.yml").is_file()
    assert not (ex / "bakery001/models/product_sales.sql").exists()
    assert (ex / "bakery001/models/daily_revenue.sql").read_text() == ""
    # (2) the clock task: a complete clock-reading spine that is graded, gold at 2024-08-27
    assert "current_date" in (ex / "gym001/models/dim_dates.sql").read_text()
    assert "dim_dates" in evals["gym001"]["condition_tabs"]
    con = duckdb.connect(str(root / "evaluation_suite/gold/gym001/gym.duckdb"), read_only=True)
    assert con.execute("SELECT max(date_day) FROM dim_dates").fetchone() == (CLOCK_DATE,)
    con.close()
    gold_sql = (PACKAGE / "tasks/gym001/gold.sql").read_text().lower().splitlines()
    assert not any("current_date" in line.split("--")[0] for line in gold_sql)
    # (3) several graded tables, some on a column subset, row order graded for some only
    lib = evals["library001"]
    assert len(lib["condition_tabs"]) >= 2 and len(set(lib["ignore_orders"])) == 2
    widths = [len(read_table(root / "evaluation_suite/gold/library001/library.duckdb", t)[0])
              for t in lib["condition_tabs"]]
    assert any(len(c) < w for c, w in zip(lib["condition_cols"], widths, strict=True))
    # (4) a vendored package listed like a hub package, used by the solution
    packages = yaml.safe_load((ex / "fleet001/packages.yml").read_text())["packages"]
    assert packages[0]["package"] == "spider2local/mini_utils"
    pkg = yaml.safe_load((ex / "fleet001/dbt_packages/mini_utils/dbt_project.yml").read_text())
    assert pkg["name"] == "mini_utils"
    assert "mini_utils." in (root / "solutions/fleet001/models/vehicle_performance.sql").read_text()


def test_bundled_suite_file(root: Path) -> None:
    suite = load_suite(bundled_suite_path())
    assert suite.dataset == SAMPLE
    assert set(SAMPLE_TASK_IDS) <= set(suite.tasks)  # it also carries notes on real tasks
    for tid in SAMPLE_TASK_IDS:
        settings = suite.settings(tid)
        if tid == CLOCK_TASK:
            assert (settings.date, settings.date_method) == (CLOCK_DATE, "manual")
        else:
            assert (settings.date, settings.date_method) == (None, "clock-independent")
    sample_subsets = [suite.subsets[name] for name in ("clock", "packages", "smoke")]
    assert all(set(ids) <= set(SAMPLE_TASK_IDS) for ids in sample_subsets)


# --- the reference solutions, built by real dbt under the product's clock, scored officially ---


@pytest.fixture(scope="module")
def dataset(root: Path) -> Dataset:
    """The built sample as the runner loads it: task dates from the bundled suite file."""
    return load_dataset(load_suite(bundled_suite_path()).with_dataset(root))


def build_solution(task: TaskSpec, dest: Path, env: Mapping[str, str]) -> Path:
    """Copy the task, lay the reference solution over it, run real ``dbt run`` through
    :func:`spider2local.clock.dbt.run_dbt`; returns the result database. Only for a build the
    session's reference run does not make (the clock task at the real date)."""
    assert task.solution_dir is not None and task.gold is not None
    project = dest / task.id
    shutil.copytree(task.project_dir, project)
    shutil.copytree(task.solution_dir, project, dirs_exist_ok=True)
    result = anyio.run(functools.partial(run_dbt, project, ["run"], env=env, timeout=300))
    assert result.ok and not result.timed_out, result.stdout_tail[-3000:] + result.stderr_tail
    return project / task.gold.params.gold


def official_score(task: TaskSpec, result_db: Path) -> TaskScore:
    assert task.gold is not None
    return score_database(result_db, task.gold.db, task.gold.params)


def dbt_dates(logs: Path) -> set[dt.date]:
    """The dates the task's dbt processes lived in, from what they wrote themselves: every
    JSON log line's timestamp and every run_results.json's start and end stamps."""
    dates = {dt.date.fromisoformat(json.loads(line)["info"]["ts"][:10])
             for log in logs.glob("dbt-*.jsonl") for line in log.read_text().splitlines()
             if line.startswith("{")}
    for results in logs.glob("dbt-*.run_results.json"):
        meta = json.loads(results.read_text())["metadata"]
        dates |= {dt.date.fromisoformat(meta[key][:10])
                  for key in ("invocation_started_at", "generated_at")}
    return dates


@pytest.mark.slow
@pytest.mark.parametrize("task_id", SAMPLE_TASK_IDS)
def test_reference_solution_passes_at_the_tasks_date(reference_run: ReferenceRun,
                                                     task_id: str) -> None:
    """The session's reference run built each solution with real dbt through spider2local's
    clock and run_dbt, as the runner runs it: every dbt process of the task lived at the
    task's own date, and the kept database, scored officially again here, passes."""
    assert reference_run.outcome.returncode == 0, reference_run.outcome.stderr[-3000:]
    dataset = reference_run.dataset()
    task = dataset.get(task_id)
    assert task is not None and task.runnable and task.gold is not None, task
    if task_id == CLOCK_TASK:
        assert task.date == CLOCK_DATE
    task_dir = reference_run.run_dir / task_id
    assert dbt_dates(task_dir / "dbt") == {task.date}
    result_db = task_dir / "result.duckdb"
    score = official_score(task, result_db)
    assert score.passed, render_text(score)
    assert score.tables_passed == len(evaluations(dataset.root)[task_id]["condition_tabs"])
    assert task.gold is not None
    for table in score.tables:  # the solution also reproduces the gold's column names
        assert read_table(result_db, table.name)[0] == read_table(task.gold.db, table.name)[0]


@pytest.mark.slow
def test_clock_task_solution_fails_at_the_real_date(dataset: Dataset, tmp_path: Path) -> None:
    """Without the fake clock the same solution fails: the graded spine runs up to today and
    membership ages and activity change. Proves the clock, not luck, makes it pass above."""
    assert dt.date.today() > CLOCK_DATE
    task = dataset.get(CLOCK_TASK)
    assert task is not None
    real_clock = {**strip_fake_clock(os.environ), **TELEMETRY_ENV}
    score = official_score(task, build_solution(task, tmp_path, real_clock))
    assert not score.passed
    failing = {table.name: table for table in score.tables if not table.passed}
    assert sorted(failing) == ["dim_dates", "membership_status"], render_text(score)
    dim_dates = failing["dim_dates"]
    assert dim_dates.result_rows is not None and dim_dates.result_rows > dim_dates.gold_rows
    assert failing["membership_status"].result_rows == failing["membership_status"].gold_rows
    assert any(column.gold_column in ("days_since_start", "is_active")
               for column in failing["membership_status"].columns)

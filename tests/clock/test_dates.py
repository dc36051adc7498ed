"""derive-dates: gold build dates from evidence in the data, verified by rebuilding under the
fake clock; projects that never read the clock get no date."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from spider2local.cli.app import cli
from spider2local.clock.dates import derive_task, gold_candidates
from spider2local.clock.reads import scan_clock_reads
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.suite.model import Confidence, DateMethod, Suite
from tests.helpers import make_duckdb, write_task

SPINE = "select cast(range as date) as d from range(date '2024-01-01', {end}, interval 1 day)"


def _clock_task(tiny_dataset: Callable[..., Path], tid: str, model_sql: str,
                gold_sql: str, model: str = "dim_days") -> TaskSpec:
    """A task whose model ``model`` reads the clock and whose gold table was built by SQL."""
    root = tiny_dataset(tid, gold_tables={model: gold_sql}, evaluation={
        "func": "duckdb_match", "parameters": {"gold": "shop.duckdb", "condition_tabs": [model],
                                               "condition_cols": [[]], "ignore_orders": [True]}})
    (root / "examples" / tid / "models" / f"{model}.sql").write_text(model_sql)
    task = load_dataset(Suite(root / "tasks.toml", root)).get(tid)
    assert task is not None and task.has_gold
    return task


def _derive(task: TaskSpec, verify: bool = True):  # type: ignore[no-untyped-def]
    return anyio.run(lambda: derive_task(task, verify=verify))


def test_clock_free_project_gets_no_date(tiny_dataset: Callable[..., Path]) -> None:
    task = _clock_task(tiny_dataset, "c001", "select 1 as id",
                       SPINE.format(end="date '2024-02-01'"))
    d = _derive(task)
    assert (d.date, d.method, d.confidence) == (None, "clock-independent", "high")
    assert d.method is DateMethod.CLOCK_INDEPENDENT and d.confidence is Confidence.HIGH


def test_heuristics_without_rebuild(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    days = _clock_task(tiny_dataset, "d001", SPINE.format(end="current_date"),
                       SPINE.format(end="date '2024-03-10'"))
    d = _derive(days, verify=False)
    assert (d.date, d.method, d.confidence) == (dt.date(2024, 3, 9), "date-spine", "medium")
    assert d.method is DateMethod.DATE_SPINE and d.confidence is Confidence.MEDIUM
    assert "daily spine 2024-01-01..2024-03-09" in d.evidence
    assert "models/dim_days.sql:1 current_date" in d.evidence

    gold = make_duckdb(tmp_path / "g.duckdb", {
        "months": "select cast(range as date) as m from "
                  "range(date '2023-11-01', date '2024-03-01', interval 1 month)",
        "ages": "select date '2024-05-01' - s as days_open, s from (values "
                "(date '2024-01-01'), (date '2024-02-10'), (date '2023-12-24')) v(s)",
        "noise": "select date '2024-01-01' + cast(i * i as integer) as d, i from range(5) r(i)"})
    found = {c.model: c for c in gold_candidates(gold, _scan_for(tmp_path, "months", "ages",
                                                                "noise"))}
    assert (found["months"].method, found["months"].window, found["months"].date) == (
        "month-spine", (dt.date(2024, 2, 1), dt.date(2024, 2, 29)), dt.date(2024, 2, 1))
    assert (found["ages"].method, found["ages"].date) == ("age-column", dt.date(2024, 5, 1))
    assert "noise" not in found


DBT_UTILS_SPINE = """{{{{ config(materialized='table') }}}}
with spine as (
    {{{{ dbt_utils.date_spine(
        datepart="{part}",
        start_date="cast('2024-01-01' as date)",
        end_date="{end}"
    ) }}}}
)
select cast(date_{part} as date) as date_{part} from spine
"""
"""The shape of real projects' spines (dbt_utils is vendored by the real tasks, not here: the
unverified shortcut reads only the text, and the rebuild test below uses dbt-core's own copy)."""


@pytest.mark.parametrize(("part", "end", "gold_end", "built"), [
    # gold spine ends 2024-09-13: the macro excludes its end, so it was built on the 14th
    ("day", "current_date", "date '2024-09-14'", dt.date(2024, 9, 14)),
    ("day", "{{ dbt.current_timestamp() }}", "date '2024-09-14'", dt.date(2024, 9, 14)),
    ("day", "dbt.current_timestamp()", "date '2024-09-14'", dt.date(2024, 9, 14)),
    # an end one day past the clock includes the build date itself
    ("day", "{{ dbt.dateadd('day', 1, 'current_date') }}", "date '2024-09-14'",
     dt.date(2024, 9, 13)),
    # a month spine ending August was built in September: its first day is chosen
    ("month", "current_date", "date '2024-09-01'", dt.date(2024, 9, 1)),
])
def test_date_spine_end_is_exclusive_without_a_rebuild(
        tiny_dataset: Callable[..., Path], tmp_path: Path, part: str, end: str, gold_end: str,
        built: dt.date) -> None:
    gold = (f"select cast(range as date) as date_{part} from "
            f"range(date '2024-01-01', {gold_end}, interval 1 {part})")
    task = _clock_task(tiny_dataset, "s001", DBT_UTILS_SPINE.format(part=part, end=end), gold,
                       model="util_days")
    d = _derive(task, verify=False)
    assert (d.date, d.method) == (built, f"{'date' if part == 'day' else 'month'}-spine")
    assert "models/util_days.sql:3 date_spine(datepart='" + part + "') ends at the clock" \
        in d.evidence
    # the same date from both commands that take the shortcut
    suite = tmp_path / "tasks.toml"
    root = json.dumps(str(task.project_dir.parents[1]))
    suite.write_text(f"schema = 1\n[dataset]\nroot = {root}\n")
    audit = CliRunner().invoke(cli, ["--suite", str(suite), "audit", "--json"])
    assert audit.exit_code == 0, audit.output
    (row,) = json.loads(audit.output)["tasks"]
    assert row["suggested_date"] == built.isoformat()
    wet = CliRunner().invoke(cli, ["--suite", str(suite), "derive-dates", "--no-verify"])
    assert wet.exit_code == 0, wet.output
    assert load_suite(suite).settings("s001").date == built


@pytest.mark.slow
def test_real_dbt_date_spine_is_verified_at_the_build_date(
        tiny_dataset: Callable[..., Path]) -> None:
    """dbt-core ships the same macro as ``dbt.date_spine``: built on 2024-09-14 by real dbt it
    ends on the 13th, and the derivation verifies the 14th directly."""
    model = DBT_UTILS_SPINE.format(part="day", end="current_date").replace("dbt_utils.", "dbt.")
    task = _clock_task(tiny_dataset, "s002", model,
                       SPINE.format(end="date '2024-09-14'").replace(" as d ", " as date_day "),
                       model="util_days")
    assert _derive(task, verify=False).date == dt.date(2024, 9, 14)
    d = _derive(task)
    assert (d.date, d.method, d.confidence) == (dt.date(2024, 9, 14), "verified", "high")
    assert "rebuilding util_days at 2024-09-14 reproduces its gold table" in d.evidence


def _scan_for(tmp: Path, *models: str):  # type: ignore[no-untyped-def]
    project = tmp / "p"
    (project / "models").mkdir(parents=True)
    (project / "dbt_project.yml").write_text("name: p\n")
    for m in models:
        (project / "models" / f"{m}.sql").write_text("select current_date")
    return scan_clock_reads(project).models


def test_no_evidence_means_no_date(tiny_dataset: Callable[..., Path]) -> None:
    task = _clock_task(tiny_dataset, "n001", "select now() as t",
                       "select timestamp '2024-01-01 10:00' as t")
    d = _derive(task)
    assert d.date is None and d.method is None
    assert "date unknown" in d.evidence


@pytest.mark.slow
def test_a_rebuild_that_never_matches_stays_a_heuristic(
        tiny_dataset: Callable[..., Path]) -> None:
    task = _clock_task(tiny_dataset, "u001", SPINE.format(end="current_date + 1"),
                       SPINE.format(end="date '2024-03-10'").replace(
                           " as d from", " as d, 1 as extra from"))
    d = _derive(task)
    assert d.method != "verified"
    assert "not verified by a rebuild" in d.evidence


@pytest.mark.slow
def test_sample_suite_clock_task_is_verified() -> None:
    data = load_dataset(load_suite(bundled_suite_path()))
    gym = data.get("gym001")
    assert gym is not None
    d = _derive(gym)
    assert (d.date, d.method, d.confidence) == (dt.date(2024, 8, 27), "verified", "high")
    for other in ("bakery001", "library001", "fleet001"):
        task = data.get(other)
        assert task is not None
        assert _derive(task).method == "clock-independent"


@pytest.mark.slow
def test_real_tasks(shared_dataset: Path) -> None:
    data = load_dataset(Suite(Path("/nonexistent/tasks.toml"), shared_dataset))
    mrr, playbook = data.get("mrr001"), data.get("playbook001")
    assert mrr is not None and playbook is not None
    assert _derive(playbook).method == "clock-independent"
    d = _derive(mrr)  # the rebuild at the window's first day reproduces the spine's gold
    assert (d.date, d.method) == (dt.date(2024, 8, 1), "month-spine")
    assert "any date in 2024-08-01..2024-08-31 explains the spine; chose the first" in d.evidence
    # ... but what is graded (mrr) is the agent's to write: nothing graded was rebuilt
    assert d.confidence == "medium"
    assert "graded mrr not shipped (the agent writes it), so not rebuilt" in d.evidence
    quick = _derive(mrr, verify=False)
    assert (quick.date, quick.method) == (dt.date(2024, 8, 1), "month-spine")
    assert "any date in 2024-08-01..2024-08-31 explains it, chose the first" in quick.evidence


def test_cli_dry_run_prints_a_diff_then_writes(tiny_dataset: Callable[..., Path],
                                               tmp_path: Path) -> None:
    task = _clock_task(tiny_dataset, "d001", SPINE.format(end="current_date"),
                       SPINE.format(end="date '2024-03-10'"))
    suite = tmp_path / "tasks.toml"
    root = json.dumps(str(task.project_dir.parents[1]))
    suite.write_text(f"# mine\nschema = 1\n[dataset]\nroot = {root}\n")
    before = suite.read_text()
    args = ["--suite", str(suite), "derive-dates", "--no-verify"]
    dry = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "+date = 2024-03-09" in dry.output and suite.read_text() == before
    wet = CliRunner().invoke(cli, args)
    assert wet.exit_code == 0, wet.output
    settings = load_suite(suite).settings("d001")
    assert (settings.date, settings.date_method) == (dt.date(2024, 3, 9), "date-spine")
    assert suite.read_text().startswith("# mine")


def test_cli_on_the_bundled_suite_writes_a_new_suite_of_root_and_dates_only(
        tiny_dataset: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ./tasks.toml the new file holds the dataset root and the derived dates, nothing
    of the bundled suite: its sample tasks and subsets (smoke = bakery001, fleet001) named
    tasks the real dataset does not have, so `run --subset smoke` failed there."""
    root = tiny_dataset("c001")  # its models never read the clock: no dbt run needed
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    args = ["--dataset", str(root), "derive-dates", "--no-verify"]
    dry = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "--- /dev/null" in dry.output and f"+++ {work / 'tasks.toml'} (new file)" in dry.output
    assert "(current)" not in dry.output and "bakery001" not in dry.output
    assert f"+root = {json.dumps(str(root))}" in dry.output
    assert not (work / "tasks.toml").exists()
    wet = CliRunner().invoke(cli, args)
    assert wet.exit_code == 0, wet.output
    seeded = load_suite(work / "tasks.toml")
    assert seeded.dataset == root and seeded.settings("c001").date_method == "clock-independent"
    assert set(seeded.tasks) == {"c001"} and dict(seeded.subsets) == {}
    assert seeded.defaults == load_suite(bundled_suite_path()).defaults
    listed = CliRunner().invoke(cli, ["list"])  # the new file is now the suite in use
    assert listed.exit_code == 0 and "1 tasks, 1 runnable" in listed.stdout, listed.output
    assert listed.stderr == ""


def test_unshipped_graded_models_cap_clock_independence_on_the_sample_suite() -> None:
    data = load_dataset(load_suite(bundled_suite_path()))
    bakery, fleet = data.get("bakery001"), data.get("fleet001")
    assert bakery is not None and fleet is not None
    d = _derive(bakery, verify=False)  # product_sales is declared in YML only
    assert (d.date, d.method, d.confidence) == (None, "clock-independent", "low")
    assert "2 graded model(s) not shipped: their SQL is unknown" in d.evidence
    assert "gold daily_revenue.order_date is a daily spine" in d.evidence
    f = _derive(fleet, verify=False)
    assert (f.date, f.method, f.confidence) == (None, "clock-independent", "medium")
    assert "1 graded model(s) not shipped" in f.evidence


def test_quotes_in_names_and_paths_reach_the_candidates(tmp_path: Path) -> None:
    """A gold table, its columns and its folder may hold quotes: each is escaped, not pasted."""
    gold = make_duckdb(tmp_path / "o'brien" / "g.duckdb", {
        '"we""ird"': "select cast(range as date) as \"the \"\"day\"\"\" from "
                     "range(date '2024-01-01', date '2024-03-10', interval 1 day)",
        '"ag""es"': "select date '2024-05-01' - s as \"days \"\"open\"\"\", s as \"sta\"\"rt\" "
                    "from (values (date '2024-01-01'), (date '2024-02-10'), "
                    "(date '2023-12-24')) v(s)"})
    found = {c.model: c for c in gold_candidates(gold, _scan_for(tmp_path, 'we"ird', 'ag"es'))}
    assert (found['we"ird'].method, found['we"ird'].column, found['we"ird'].date) == (
        "date-spine", 'the "day"', dt.date(2024, 3, 9))
    assert (found['ag"es'].method, found['ag"es'].column, found['ag"es'].date) == (
        "age-column", 'days "open"', dt.date(2024, 5, 1))


@pytest.mark.slow
def test_rebuild_measures_the_offset_and_verifies(tmp_path: Path) -> None:
    """The model stops the day before today: gold ending 2024-03-09 was built on 2024-03-10,
    which the probe rebuild measures and a second rebuild verifies. The gold path holds an
    apostrophe and the graded column double quotes: every name and path in the rebuild's SQL
    is quoted (it failed on both before)."""
    root = tmp_path / "o'brien's data" / "spider2-dbt"
    (root / "examples").mkdir(parents=True)
    column = '"the ""day"""'
    spine = ("select cast(range as date) as {col} "
             "from range(date '2024-01-01', {end}, interval 1 day)")
    write_task(root, "q001", gold_tables={"dim_days": spine.format(
        col=column, end="date '2024-03-10'")}, evaluation={
        "func": "duckdb_match", "parameters": {
            "gold": "shop.duckdb", "condition_tabs": ["dim_days"], "condition_cols": [[]],
            "ignore_orders": [True]}})
    (root / "examples" / "q001" / "models" / "dim_days.sql").write_text(
        spine.format(col=column, end="current_date"))
    task = load_dataset(Suite(root / "tasks.toml", root)).get("q001")
    assert task is not None and task.gold is not None and "'" in str(task.gold.db)
    d = _derive(task)
    assert (d.date, d.method, d.confidence) == (dt.date(2024, 3, 10), "verified", "high")
    assert 'gold dim_days.the "day" is a daily spine' in d.evidence
    assert "rebuilding dim_days at 2024-03-10 reproduces its gold table" in d.evidence


MONTHS = ("select cast(range as date) as date_month from range(date '2024-01-01', {end}, "
          "interval 1 month)")


@pytest.mark.slow
@pytest.mark.parametrize(("graded_sql", "confidence", "said"), [
    ("select date_trunc('month', current_date)::date as m", "high",
     "rebuilding the graded monthly: every date in 2024-09-01..2024-09-30 reproduces gold "
     "(checked 2024-09-01, 2024-09-30)"),
    ("select current_date as m", "high",
     "rebuilding the graded monthly: 2024-09-01 reproduces gold (checked 2024-09-01, "
     "2024-09-30)"),
    ("select current_date + 3 as m", "medium",
     "but rebuilding the graded monthly at 2024-09-01, 2024-09-30 does not reproduce gold"),
])
def test_a_verified_spine_is_high_only_when_the_graded_tables_reproduce(
        tiny_dataset: Callable[..., Path], graded_sql: str, confidence: str, said: str) -> None:
    """xero001's case: the calendar spine rebuilt at the month's first day matched and the
    date was labelled "high" though nothing graded was checked. The graded table is rebuilt
    at both ends of the window, and the window that reproduces gold is named."""
    root = tiny_dataset("x001", gold_tables={
        "util_months": MONTHS.format(end="date '2024-09-02'"),
        "monthly": "select date '2024-09-01' as m"}, evaluation={
        "func": "duckdb_match", "parameters": {
            "gold": "shop.duckdb", "condition_tabs": ["monthly"], "condition_cols": [[]],
            "ignore_orders": [True]}})
    models = root / "examples" / "x001" / "models"
    (models / "util_months.sql").write_text(MONTHS.format(end="current_date + 1"))
    (models / "monthly.sql").write_text(graded_sql)
    task = load_dataset(Suite(root / "tasks.toml", root)).get("x001")
    assert task is not None
    d = _derive(task)
    assert (d.date, d.method) == (dt.date(2024, 9, 1), "month-spine"), d.evidence
    assert d.confidence == confidence and said in d.evidence, d.evidence

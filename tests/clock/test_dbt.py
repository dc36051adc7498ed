"""run_dbt with real dbt and real DuckDB files, faked directly or through the shim."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import stat
import time
from collections.abc import Mapping
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.clock.dbt import (
    DbtResult,
    decisive_line,
    log_as_text,
    parse_run_results,
    resolve_dbt,
    run_dbt,
)
from spider2local.clock.faketime import Clock, find_library, find_real_dbt, strip_fake_clock
from spider2local.exceptions import DbtError
from spider2local.resources import faketime_dir

pytestmark = pytest.mark.anyio
FAKE_DATE = datetime.date(2024, 2, 29)
DBT_LIMIT = 180.0  # a hard ceiling for one dbt process in these tests: no test can hang


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_project(root: Path, models: Mapping[str, str] | None = None, *,
                 threads: int = 1, name: str = "tiny") -> Path:
    """A minimal dbt-duckdb project whose database file lives inside the project."""
    models = {"today": "select current_date as d"} if models is None else models
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "dbt_project.yml").write_text(
        f"name: {name}\nversion: '1.0'\nprofile: {name}\n"
        f"models:\n  {name}:\n    +materialized: table\n")
    (root / "profiles.yml").write_text(
        f"{name}:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: ./{name}.duckdb\n      threads: {threads}\n")
    for model, sql in models.items():
        (root / "models" / f"{model}.sql").write_text(sql + "\n")
    return root


def query(database: Path, sql: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(database), read_only=True) as con:
        return con.execute(sql).fetchall()


def processes_with_env(marker: str) -> list[int]:
    """Pids whose environment mentions ``marker`` (run_dbt puts the project path there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def clock() -> Clock:
    return Clock(FAKE_DATE, find_library())


@pytest.fixture
def agent_env(clock: Clock) -> dict[str, str]:
    return clock.agent_env(os.environ, faketime_dir())


def test_resolve_dbt_follows_the_given_path(agent_env: dict[str, str]) -> None:
    assert Path(resolve_dbt("dbt", agent_env)).samefile(faketime_dir() / "dbt")
    # Off PATH, plain "dbt" is the real one of this environment, never the shim.
    fallback = Path(resolve_dbt("dbt", {"PATH": "/nonexistent"}))
    assert fallback.samefile(find_real_dbt()) and not fallback.samefile(faketime_dir() / "dbt")
    with pytest.raises(DbtError, match="not found"):
        resolve_dbt("no-such-dbt", {"PATH": "/nonexistent"})


def test_parse_run_results_reads_every_node(tmp_path: Path) -> None:
    path = tmp_path / "run_results.json"
    path.write_text(json.dumps({"results": [
        {"unique_id": "model.p.a", "status": "success", "message": "OK", "execution_time": 0.5},
        {"unique_id": "model.p.b", "status": "error", "message": "boom", "execution_time": None},
        {"unique_id": "test.p.not_null_a_id.123", "status": "fail", "message": None},
    ]}))
    models = parse_run_results(path)
    assert [(m.name, m.status, m.failed) for m in models] == [
        ("a", "success", False), ("b", "error", True), ("123", "fail", True)]
    assert models[2].unique_id.startswith("test.") and models[1].execution_time == 0.0
    path.write_text("{not json")
    with pytest.raises(DbtError, match=r"run_results\.json"):
        parse_run_results(path)


@pytest.mark.slow
async def test_run_dbt_faked_directly_sees_the_task_date(tmp_path: Path, clock: Clock) -> None:
    project = make_project(tmp_path / "p")
    logs = tmp_path / "logs"
    result = await run_dbt(project, ["run"], env=clock.faked_env(os.environ),
                           timeout=DBT_LIMIT, logs_dir=logs)
    assert result.ok, result.stdout_tail[-2000:]
    assert [(m.name, m.status) for m in result.models] == [("today", "success")]
    assert result.run_results_path == project / "target" / "run_results.json"
    assert query(project / "tiny.duckdb", "select d from today") == [(FAKE_DATE,)]
    assert (logs / "dbt.log").is_file() and not (project / "logs").exists()
    assert (logs / "dbt-001-run.run_results.json").is_file()
    assert json.loads((logs / "dbt-001-run.jsonl").read_text().splitlines()[0])["info"]


@pytest.mark.slow
async def test_run_dbt_through_the_shim_with_errors_and_four_threads(
        tmp_path: Path, agent_env: dict[str, str]) -> None:
    models = {f"m{i}": f"select current_date as d, {i} as i, sum(range) as s "
                       "from range(300000)" for i in range(6)}
    models["broken"] = "select * from no_such_table"
    models["downstream"] = "select * from {{ ref('broken') }}"
    project = make_project(tmp_path / "p", models, threads=4)
    with anyio.fail_after(DBT_LIMIT):
        result = await run_dbt(project, ["run"], env=agent_env, timeout=DBT_LIMIT)
    assert not result.ok and not result.timed_out and result.returncode == 1
    assert [m.name for m in result.errored()] == ["broken"]
    assert result.status_of("downstream") == "skipped"
    assert all(result.status_of(f"m{i}") == "success" for i in range(6))
    rows = query(project / "tiny.duckdb",
                 " union all ".join(f"select d from m{i}" for i in range(6)))
    assert rows == [(FAKE_DATE,)] * 6
    assert any("no_such_table" in (m.message or "") for m in result.errored())


@pytest.mark.slow
async def test_compile_error_leaves_no_stale_results(tmp_path: Path, clock: Clock) -> None:
    project = make_project(tmp_path / "p", {"bad": "select * from {{ ref('missing') }}"})
    stale = project / "target" / "run_results.json"
    stale.parent.mkdir()
    stale.write_text(json.dumps({"results": [
        {"unique_id": "model.tiny.bad", "status": "success", "execution_time": 1}]}))
    result = await run_dbt(project, ["run"], env=clock.faked_env(os.environ),
                           timeout=DBT_LIMIT)
    assert not result.ok and result.models == () and result.run_results_path is None
    assert any("missing" in message for message in result.error_messages())


@pytest.mark.slow
async def test_timeout_and_cancellation_leave_no_dbt_behind(
        tmp_path: Path, agent_env: dict[str, str]) -> None:
    project = make_project(tmp_path / "p")
    started = time.monotonic()
    result = await run_dbt(project, ["run"], env=agent_env, timeout=1.5)
    assert result.timed_out and not result.ok and time.monotonic() - started < 15
    assert processes_with_env(str(project)) == []

    with anyio.move_on_after(1.5) as scope:
        await run_dbt(project, ["run"], env=agent_env, timeout=DBT_LIMIT)
    assert scope.cancelled_caught
    assert processes_with_env(str(project)) == []


@pytest.mark.slow
async def test_real_playbook001_runs_under_the_shim(
        tmp_path: Path, shared_dataset: Path, agent_env: dict[str, str]) -> None:
    project = tmp_path / "playbook001"
    shutil.copytree(shared_dataset / "examples" / "playbook001", project)
    for path in [project, *project.rglob("*")]:  # the shared copy is read-only
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    with anyio.fail_after(DBT_LIMIT):
        result = await run_dbt(project, ["run"], env=agent_env, timeout=DBT_LIMIT)
    assert result.ok, result.stdout_tail[-2000:]
    assert result.models and all(m.status == "success" for m in result.models)
    assert _log_dates(result) == {FAKE_DATE}


def _log_dates(result: DbtResult) -> set[datetime.date]:
    """The dates in the timestamps dbt's own JSON log lines carry: the clock dbt lived in."""
    dates = set()
    for line in result.stdout_tail.splitlines():
        if line.startswith("{"):
            dates.add(datetime.date.fromisoformat(json.loads(line)["info"]["ts"][:10]))
    return dates


@pytest.mark.slow
async def test_a_parse_cache_of_another_date_is_never_reused(tmp_path: Path) -> None:
    """dbt validates its partial-parse cache by nothing the clock changes: a cache written by a
    real-clock parse (or under another task date, as derive-dates' rebuilds at two dates in one
    scratch project do) would make the next faked run build what that other date computed."""
    project = make_project(tmp_path / "p", {"stamp": "{{ config(alias='m_' ~ "
                                                     "modules.datetime.date.today().year) }}\n"
                                                     "select 1 as x"})
    real_env = {**strip_fake_clock(os.environ), "DBT_PROFILES_DIR": str(project)}
    with anyio.fail_after(DBT_LIMIT):  # not run_dbt: this cache must carry no date stamp
        parsed = await anyio.run_process([str(find_real_dbt()), "parse"], cwd=project,
                                         env=real_env, check=False)
    assert parsed.returncode == 0, parsed.stdout[-2000:]
    assert (project / "target" / "partial_parse.msgpack").is_file()
    other = datetime.date(2021, 7, 1)
    for clock, env in ((Clock(FAKE_DATE, find_library()), "faked"),
                       (Clock(other, find_library()), "agent")):
        run_env = (clock.faked_env(os.environ) if env == "faked"
                   else clock.agent_env(os.environ, faketime_dir()))
        result = await run_dbt(project, ["run"], env=run_env, timeout=DBT_LIMIT)
        assert result.ok, result.stdout_tail[-2000:]
        tables = {str(r[0]) for r in query(project / "tiny.duckdb",
                                           "select table_name from information_schema.tables")}
        assert f"m_{clock.date.year}" in tables, (env, tables)
    assert f"m_{datetime.date.today().year}" not in tables


@pytest.mark.parametrize(("message", "line"), [
    ('Runtime Error in model daily_revenue (models/daily_revenue.sql)\n'
     '  Parser Error: syntax error at or near "by"\n  \n  LINE 5:     select 1 group by by\n'
     '                                     ^',
     'Runtime Error in model daily_revenue (models/daily_revenue.sql): '
     'Parser Error: syntax error at or near "by"'),
    ("  Runtime Error in model m (models/m.sql)\n  Catalog Error: Table with name t does not "
     "exist!\n  Did you mean \"s\"?\n",
     "Runtime Error in model m (models/m.sql): Catalog Error: Table with name t does not "
     "exist!"),
    ("Database Error in model m (models/m.sql)\n  some words first\n  Binder Error: no col x",
     "Database Error in model m (models/m.sql): Binder Error: no col x"),
    ("Encountered an error:\nCompilation Error\n  Model 'model.p.m' (models/m.sql) depends on "
     "a node named 'missing' which was not found",
     "Compilation Error: Model 'model.p.m' (models/m.sql) depends on a node named 'missing' "
     "which was not found"),
    ("Encountered an error:\nCompilation Error in model m (models/m.sql)\n  unexpected 'end of "
     "print statement'\n    line 1\n      select {{ 1 + }}",
     "Compilation Error in model m (models/m.sql): unexpected 'end of print statement'"),
    ("\x1b[31mFailure in model m (models/m.sql)\x1b[0m", "Failure in model m (models/m.sql)"),
    ("Runtime Error in model m (models/m.sql)", "Runtime Error in model m (models/m.sql)"),
    ("Parser Error: plain", "Parser Error: plain"),
    ("\n \n", ""),
])
def test_decisive_line_names_the_actual_error(message: str, line: str) -> None:
    assert decisive_line(message) == line


def _event(msg: str, level: str = "info", invocation: str = "inv-1",
           ts: str = "2024-02-29T12:00:01.123456Z") -> str:
    return json.dumps({"data": {}, "info": {"level": level, "msg": msg, "name": "X",
                                            "invocation_id": invocation, "ts": ts}}) + "\n"


def test_the_json_log_reads_as_plain_text() -> None:
    lines = [_event("Running with dbt=1.11.16"),
             _event("\x1b[31mFailure in model m\x1b[0m", "error"),
             _event("  Runtime Error in model m\n  Parser Error: syntax error", "error"),
             "not json \x1b[0m\n", '{"cut short\n', "\n",
             _event("Running with dbt=1.11.16", invocation="inv-2")]
    text = "".join(log_as_text(lines))
    assert "\x1b" not in text and "{" not in text.replace('{"cut short', "")
    assert text.splitlines() == [
        f"{'=' * 30} 2024-02-29 12:00:01.123456 | inv-1 {'=' * 30}",
        "12:00:01.123456 [info ] Running with dbt=1.11.16",
        "12:00:01.123456 [error] Failure in model m",
        "12:00:01.123456 [error]   Runtime Error in model m",
        "      Parser Error: syntax error",
        "not json ",
        '{"cut short',
        f"{'=' * 30} 2024-02-29 12:00:01.123456 | inv-2 {'=' * 30}",
        "12:00:01.123456 [info ] Running with dbt=1.11.16"]


def test_a_hostile_log_event_cannot_break_the_text() -> None:
    odd = ['{"info": "not a dict"}\n', '{"info": {"msg": null, "ts": 5}}\n', "[1, 2]\n",
           '{"info": {"msg": "\\u001b]0;title\\u0007x", "level": "warn"}}\n']
    text = "".join(log_as_text(odd))
    assert "\x1b" not in text and "\x07" not in text
    assert text.splitlines()[-1].endswith("[warn ] x")

"""Warm dbt (faketime/warmdbt.py through the shim) against cold dbt, with real dbt and DuckDB.

Every case runs the same call cold (no server) in one copy of a project and warm in another,
then compares what an agent could see: exit code, tables (query results, byte-compared), the
per-call run_results records and the fake date (``current_date`` at run time, the clock read at
parse time). One server serves the module (starting one costs the dbt imports).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.clock import warm
from spider2local.clock.faketime import RUNS_ENV, Clock, find_library
from spider2local.resources import faketime_dir
from tests.clock.test_dbt import make_project
from tests.helpers import hold_lock

pytestmark = pytest.mark.slow

SHIM = faketime_dir() / "dbt"
DATE = datetime.date(2023, 6, 14)
LIMIT = 300
MODELS = {
    "today": "select current_date as d, '{{ env_var(\"WARM_VAR\", \"unset\") }}' as v",
    "parse_time": "{{ config(alias='parse_' ~ modules.datetime.date.today().strftime('%Y%m%d'))"
                  " }}\n{% if var('jinja_error', false) %}{{ no_such_macro() }}{% endif %}\n"
                  "select 1 as one",
    "bad_sql": "{{ config(enabled=var('bad', false)) }} select * from no_such_table",
    "slow": "{{ config(enabled=var('slow', false)) }} "
            "select count(*) as n from range(4000000000) a",
}


def base_env() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("FAKETIME", "SPIDER2LOCAL_", "DBT_")) and k != "LD_PRELOAD"}
    return Clock(DATE, find_library()).agent_env(keep, faketime_dir())


@dataclass
class Server:
    root: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes]

    def calls(self) -> int:
        return warm.report(self.root, None)["calls"]  # type: ignore[no-any-return]


def start(root: Path) -> Server:
    root.mkdir(parents=True, exist_ok=True)
    warm.prepare_dir(root)
    env = warm.warm_env(base_env(), root)
    argv, server_env = warm.server_command(env, root)
    process = subprocess.Popen(argv, env=server_env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    ok = anyio.run(warm.wait_ready, root, 240.0)
    assert ok, warm.log_path(root).read_text()
    return Server(root, env, process)


def stop(server: Server) -> None:
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(30)


def learned(server: Server, within: float = 240.0) -> dict[str, int | float]:
    """What the server has compiled so far, once it has nothing left to compile (it compiles
    what its children report, while it serves)."""
    deadline = time.monotonic() + within
    while True:
        log = warm.log_path(server.root).read_text()
        done = warm.report(server.root, None).get("warmed")
        if done is not None and log.rfind("warmed:") > log.rfind("compiling them here"):
            return done  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, log
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server that has learned from a first call: the calls below are forked from what
    every call after a task's first is forked from (a first call is tested on its own)."""
    found = start(tmp_path_factory.mktemp("warm-server"))
    try:
        prime = make_project(tmp_path_factory.mktemp("prime") / "p", MODELS)
        first = call(found, prime, ["run"], warm_on=True)
        assert first.code == 0, first.stdout
        done = learned(found)
        assert done["serialisers"] > 50 and done["schemas"] >= 5, done
        yield found
    finally:
        stop(found)


@dataclass(frozen=True)
class Call:
    code: int
    stdout: str
    stderr: str
    project: Path


def pair(tmp: Path) -> tuple[Path, Path]:
    projects = []
    for name in ("cold", "warm"):
        project = make_project(tmp / name, MODELS)
        (project / "models" / "sub").mkdir()
        other = tmp / f"{name}-profiles"
        other.mkdir()
        (other / "profiles.yml").write_text(
            (project / "profiles.yml").read_text().replace("./tiny.duckdb", "./other.duckdb"))
        projects.append(project)
    return projects[0], projects[1]


def call(server: Server, project: Path, args: list[str], *, warm_on: bool, sub: str = "",
         extra: dict[str, str] | None = None, records: bool = True) -> Call:
    env = dict(server.env)
    if not warm_on:
        env.pop(warm.SOCKET_ENV)
    env["DBT_PROFILES_DIR"] = str(project)
    if records:
        env[RUNS_ENV] = str(project / ".runs")
    for key, value in (extra or {}).items():
        env[key] = value.replace("{project}", str(project))
    done = subprocess.run([str(SHIM), *args], cwd=project / sub, env=env, capture_output=True,
                          text=True, timeout=LIMIT, check=False)
    return Call(done.returncode, done.stdout, done.stderr, project)


def tables(database: Path) -> dict[str, str]:
    if not database.exists():
        return {}
    with duckdb.connect(str(database), read_only=True) as con:
        names = [r[0] for r in con.execute(
            "select table_name from information_schema.tables order by 1").fetchall()]
        return {n: repr(con.execute(f'select * from "{n}" order by all').fetchall())
                for n in names}


def records(project: Path) -> list[tuple[str, list[tuple[str, str, str | None]]]]:
    """The shim's NNN-<command>.json records, without what differs on every call (timings,
    invocation ids, paths of the two copies)."""
    folder = project / ".runs"
    found = []
    for path in sorted(folder.glob("[0-9]*.json")) if folder.is_dir() else []:
        data = json.loads(path.read_text())
        found.append((path.name, sorted(
            (r["unique_id"], r["status"],
             (r.get("message") or "").replace(str(project), "P"))
            for r in data["results"])))
    return found


def same(cold: Call, hot: Call) -> None:
    assert hot.code == cold.code, (cold.stdout[-2000:], hot.stdout[-2000:], hot.stderr)
    for name in ("tiny.duckdb", "other.duckdb", "models/sub/tiny.duckdb"):
        assert tables(hot.project / name) == tables(cold.project / name)
    assert records(hot.project) == records(cold.project)


def test_warm_calls_see_and_do_what_cold_calls_do(server: Server, tmp_path: Path) -> None:
    cold_project, warm_project = pair(tmp_path)
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (["run"], {"WARM_VAR": "first"}, ""),                          # success
        (["run", "--vars", "{bad: true}"], {}, ""),                    # SQL error
        (["run", "--vars", "{jinja_error: true}"], {}, ""),            # Jinja error
        (["nosuchcommand"], {}, ""),                                   # unknown subcommand
        (["run", "--help"], {}, ""),                                   # --help
        (["run"], {"WARM_VAR": "second",                               # changed variables
                   "DBT_PROFILES_DIR": "{project}-profiles"}, ""),
        (["run", "-s", "today", "--project-dir", "../.."], {"WARM_VAR": "third"},  # from a
         "models/sub"),                                                          # subfolder
    ]
    before = server.calls()
    for args, extra, sub in cases:
        cold = call(server, cold_project, args, warm_on=False, sub=sub, extra=extra)
        hot = call(server, warm_project, args, warm_on=True, sub=sub, extra=extra)
        same(cold, hot)
        if "--help" in args:
            assert hot.stdout == cold.stdout
        if args == ["nosuchcommand"]:
            assert hot.stderr == cold.stderr
    assert server.calls() == before + len(cases)  # every warm call was served warm
    # the profile's ./tiny.duckdb is relative to the working folder: the subfolder's call
    # built its own database there, warm as cold
    with duckdb.connect(str(warm_project / "models/sub/tiny.duckdb"), read_only=True) as con:
        assert con.execute("select d, v from today").fetchall() == [(DATE, "third")]
    with duckdb.connect(str(warm_project / "tiny.duckdb"), read_only=True) as con:
        parse_tables = [r[0] for r in con.execute(
            "select table_name from information_schema.tables where table_name like 'parse%'"
        ).fetchall()]
    assert parse_tables == [f"parse_{DATE:%Y%m%d}"]  # the clock read at parse time
    with duckdb.connect(str(warm_project / "other.duckdb"), read_only=True) as con:
        assert con.execute("select v from today").fetchall() == [("second",)]
    assert not (warm_project / ".runs" / warm.NOTE_NAME).exists()


def test_the_fake_clock_restarts_at_noon_for_every_warm_call(server: Server,
                                                             tmp_path: Path) -> None:
    """A forked child would continue the server's clock (started minutes ago); each call's
    clock starts at noon of the task's date, as a freshly exec'd dbt's does."""
    project = make_project(tmp_path / "p", {"t": "select now()::timestamp as t"})
    hot = call(server, project, ["run"], warm_on=True)
    assert hot.code == 0, hot.stdout
    with duckdb.connect(str(project / "tiny.duckdb"), read_only=True) as con:
        (stamp,), = con.execute("select t from t").fetchall()
    noon = datetime.datetime.combine(DATE, datetime.time(12))
    server_age = time.time() - (server.root / warm.WARM_DIR / warm.SOCKET_NAME).stat().st_mtime
    assert noon <= stamp < noon + datetime.timedelta(seconds=min(server_age, 120) + 60)


def test_two_calls_at_once_are_two_children(server: Server, tmp_path: Path) -> None:
    first, second = pair(tmp_path)
    results: dict[str, Call] = {}

    def one(project: Path) -> None:
        results[project.name] = call(server, project, ["run"], warm_on=True)

    threads = [threading.Thread(target=one, args=(p,)) for p in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LIMIT)
    assert [results[p.name].code for p in (first, second)] == [0, 0]
    assert tables(first / "tiny.duckdb") == tables(second / "tiny.duckdb")
    log = warm.log_path(server.root).read_text().splitlines()
    starts = [n for n, line in enumerate(log) if ": ['run']" in line]
    ends = [n for n, line in enumerate(log) if ": exit 0" in line]
    assert len(starts) >= 2 and starts[-1] < ends[-2]  # the second began before the first ended


def test_a_locked_database_fails_warm_as_cold(server: Server, tmp_path: Path) -> None:
    cold_project, warm_project = pair(tmp_path)
    for project in (cold_project, warm_project):
        duckdb.connect(str(project / "tiny.duckdb")).close()
    with hold_lock(cold_project / "tiny.duckdb"), hold_lock(warm_project / "tiny.duckdb"):
        cold = call(server, cold_project, ["run"], warm_on=False)
        hot = call(server, warm_project, ["run"], warm_on=True)
    assert cold.code == hot.code != 0
    assert "lock" in hot.stdout.lower() and "lock" in cold.stdout.lower()


def interrupted(server: Server, project: Path, *, warm_on: bool) -> tuple[int, float]:
    env = dict(server.env)
    if not warm_on:
        env.pop(warm.SOCKET_ENV)
    env["DBT_PROFILES_DIR"] = str(project)
    process = subprocess.Popen([str(SHIM), "run", "--vars", "{slow: true}", "-s", "slow"],
                               cwd=project, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    for line in process.stdout:  # dbt has started the model: interrupt it there
        if "START sql table model" in line:
            break
    process.send_signal(signal.SIGINT)
    began = time.monotonic()
    process.communicate(timeout=LIMIT)
    return process.returncode, time.monotonic() - began


def test_sigint_stops_the_warm_child_with_the_cold_status(server: Server,
                                                          tmp_path: Path) -> None:
    cold_project, warm_project = pair(tmp_path)
    cold_code, _ = interrupted(server, cold_project, warm_on=False)
    hot_code, took = interrupted(server, warm_project, warm_on=True)
    assert hot_code == cold_code != 0
    assert took < 60
    log = warm.log_path(server.root).read_text().splitlines()
    assert "exit" in log[-1]  # the child is gone (the server reaped it)


def test_a_deleted_socket_or_a_dead_server_means_cold_and_still_right(
        tmp_path: Path) -> None:
    own = start(tmp_path / "own")
    try:
        project = make_project(tmp_path / "p", MODELS)
        slow = subprocess.Popen(
            [str(SHIM), "run", "--vars", "{slow: true}", "-s", "slow"], cwd=project,
            env={**own.env, "DBT_PROFILES_DIR": str(project)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert slow.stdout is not None
        for line in slow.stdout:
            if "START sql table model" in line:
                break
        os.killpg(own.process.pid, signal.SIGKILL)  # the server, mid-call (not its child)
        own.process.wait(30)
        os.kill(slow.pid, signal.SIGKILL)
        slow.wait(30)
        after = call(own, project, ["run"], warm_on=True)
        assert after.code == 0, after.stdout
        assert tables(project / "tiny.duckdb")["today"] == repr([(DATE, "unset")])
        assert "cannot reach the server" in (project / ".runs" / warm.NOTE_NAME).read_text()
    finally:
        stop(own)
    again = start(tmp_path / "again")
    try:
        project = make_project(tmp_path / "q", MODELS)
        warm.socket_path(again.root).unlink()
        after = call(again, project, ["run"], warm_on=True)
        assert after.code == 0, after.stdout
        note = (project / ".runs" / warm.NOTE_NAME).read_text()
        assert "no server socket" in note
        again.process.wait(30)  # the server notices its socket is gone and ends
    finally:
        stop(again)


def test_a_refused_call_runs_cold(server: Server, tmp_path: Path) -> None:
    """A start-up variable the server was not started with (here PYTHONHASHSEED) cannot be
    given to a forked child: that call runs cold, correctly, and says why."""
    project = make_project(tmp_path / "p", MODELS)
    before = server.calls()
    done = call(server, project, ["run"], warm_on=True, extra={"PYTHONHASHSEED": "7"})
    assert done.code == 0, done.stdout
    assert server.calls() == before
    assert "PYTHONHASHSEED" in (project / ".runs" / warm.NOTE_NAME).read_text()


RUNNER_CHILD = textwrap.dedent("""
    import anyio, sys
    from pathlib import Path
    from spider2local.clock import warm
    from tests.clock.test_warm import base_env

    async def main():
        root = Path(sys.argv[1])
        server = await warm.start_server(warm.warm_env(base_env(), root), root)
        print(server.process.pid, flush=True)
        await anyio.sleep(600)

    anyio.run(main)
""")


def test_kill_9_of_the_runner_leaves_no_server(tmp_path: Path) -> None:
    runner = subprocess.Popen([sys.executable, "-c", RUNNER_CHILD, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    assert runner.stdout is not None
    pid = int(runner.stdout.readline())
    assert anyio.run(warm.wait_ready, tmp_path, 240.0)
    runner.kill()
    runner.wait(30)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2] \
            if Path(f"/proc/{pid}/stat").exists() else "X"
        if state == "Z":
            break
        time.sleep(0.1)
    alive = Path(f"/proc/{pid}/stat").exists() and \
        Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    assert not alive
    shutil.rmtree(tmp_path / warm.WARM_DIR, ignore_errors=True)


def test_a_call_made_the_moment_the_server_is_started_waits_for_it(tmp_path: Path) -> None:
    """A fast agent (a command agent's script) calls dbt before the server's interpreter is
    up: the starter wrote the server's pid, so the call waits for it instead of running cold."""
    root = tmp_path / "ws"
    root.mkdir()
    project = make_project(tmp_path / "p", MODELS)

    async def go() -> Call:
        server = await warm.start_server(warm.warm_env(base_env(), root), root)
        try:
            assert warm.starting_path(root).read_text().strip() == str(server.process.pid)
            env = {**warm.warm_env(base_env(), root), "DBT_PROFILES_DIR": str(project),
                   RUNS_ENV: str(project / ".runs")}
            done = await anyio.run_process([str(SHIM), "run", "--select", "today"],
                                           cwd=project, env=env, check=False)
            return Call(done.returncode, done.stdout.decode(), done.stderr.decode(), project)
        finally:
            await server.stop()

    done = anyio.run(go)
    assert done.code == 0, done.stdout[-2000:]
    assert not (project / ".runs" / warm.NOTE_NAME).exists(), \
        (project / ".runs" / warm.NOTE_NAME).read_text()
    assert warm.report(root, None)["calls"] == 1
    # a first call compiles dbt's serialisers itself, as a cold one, builds what a cold call
    # builds, and tells the server what it compiled (for the calls after it)
    assert tables(project / "tiny.duckdb")["today"] == repr([(DATE, "unset")])
    log = warm.log_path(root).read_text()
    assert re.search(r"call \d+: compiled \d{2,} serialisers", log), log


WARM_UP_CHILD = textwrap.dedent("""
    import importlib, json, os, sys, threading
    sys.path.insert(0, sys.argv[1])
    import warmdbt
    for name in warmdbt.PRELOADS:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    import dbt.deprecations, dbt.flags, dbt.tracking
    from dbt.adapters.factory import FACTORY
    from dbt_common.events.event_manager_client import get_event_manager
    from dbt.contracts.project import Project

    def state():
        return repr((sorted(vars(dbt.flags.get_flags()).items()),
                     len(get_event_manager().callbacks), len(get_event_manager().loggers),
                     dict(dbt.deprecations.active_deprecations),
                     sorted(FACTORY.adapters), dbt.tracking.active_user,
                     sorted(os.environ.items()), os.getcwd()))

    roots = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix,
                                                 sys.exec_prefix)})
    seen = []
    def audit(event, args):
        if event == "open" and isinstance(args[0], str):
            path = os.path.realpath(args[0])
            if not path.startswith(roots):
                seen.append(("open", path))
        elif event.startswith(("subprocess.", "os.system", "os.exec", "os.fork",
                               "os.posix_spawn", "socket.", "sqlite3.")):
            seen.append((event, repr(args)[:200]))
    before = state()
    was_stub = warmdbt._lazy_stub(Project, "from_dict") is not None
    pending = warmdbt.lazy_stubs()  # every serialiser a child could report, all compiled here
    steps = warmdbt.schema_steps() + warmdbt.learned("\\n".join(pending).encode(), pending)
    sys.addaudithook(audit)
    failed = 0
    for kind, step in steps:
        try:
            step()
        except Exception:
            failed += 1
    print(json.dumps({"steps": len(steps), "failed": failed, "was_stub": was_stub,
                      "still_stub": warmdbt._lazy_stub(Project, "from_dict") is not None,
                      "schema_cached": Project.json_schema.cache_info().currsize,
                      "same_state": state() == before, "threads": threading.active_count(),
                      "seen": seen[:20]}))
""")


def test_the_warm_up_only_compiles_it_reads_nothing_and_changes_no_dbt_state(
        tmp_path: Path) -> None:
    """The server must never parse a project nor open a database (what a call did must not
    leak into the next): its warm-up compiles dbt's serialisers (every one a child could
    report) and builds its schemas, and nothing else. No file outside the Python installation
    is opened, no process started, no socket, no thread; dbt's flags, deprecations, event
    loggers, adapters, tracking user, the environment and the working folder are what they
    were."""
    done = subprocess.run([sys.executable, "-c", WARM_UP_CHILD, str(faketime_dir())],
                          cwd=tmp_path, capture_output=True, text=True, timeout=LIMIT,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["steps"] > 500 and found["failed"] == 0, found
    assert found["was_stub"] and not found["still_stub"], found  # really compiled
    assert found["schema_cached"] >= 5, found  # one lru_cache, keyed by class
    assert found["same_state"], found
    assert found["threads"] == 1 and found["seen"] == [], found
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran

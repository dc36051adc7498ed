"""faketime/dbt: which subcommands get the task's clock, loud failures, and real dbt under it."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from spider2local.clock.faketime import (
    FAKE_DATE_ENV,
    LIBRARY_ENV,
    REAL_DBT_ENV,
    Clock,
    find_library,
)
from spider2local.resources import faketime_dir
from tests.clock.test_dbt import make_project

pytestmark = pytest.mark.process

SHIM = faketime_dir() / "dbt"
FAKE_DATE = datetime.date(2023, 6, 14)
LIMIT = 180  # seconds: a hard ceiling for any child in this file


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    """A stand-in for the real dbt: reports the date it sees, its preload, and its argv.

    Python, not sh: a preloaded dash never runs libfaketime's exit handler and would leave
    /dev/shm/faketime_* files behind on every call.
    """
    path = tmp_path / "bin" / "real-dbt"
    path.parent.mkdir()
    path.write_text(
        f"#!{sys.executable}\n"
        "import datetime, os, pathlib, sys\n"
        "print('date=' + datetime.date.today().isoformat())\n"
        "print('preload=' + os.environ.get('LD_PRELOAD', ''))\n"
        "print('faketime=' + os.environ.get('FAKETIME', ''))\n"
        "print('args=' + ' '.join(sys.argv[1:]))\n"
        f"pathlib.Path({str(tmp_path / 'stub-ran')!r}).touch()\n")
    path.chmod(0o755)
    return path


def shim_env(real_dbt: Path | str, **overrides: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("FAKETIME")}
    env.pop("LD_PRELOAD", None)
    env.update({REAL_DBT_ENV: str(real_dbt), LIBRARY_ENV: str(find_library()),
                FAKE_DATE_ENV: FAKE_DATE.isoformat()})
    env.update(overrides)
    return {key: value for key, value in env.items() if value != "<unset>"}


def run_shim(args: list[str], env: dict[str, str], cwd: Path | None = None,
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SHIM), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=LIMIT, check=False)


def report(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def real_today() -> set[str]:
    """Today in UTC (and the day before, in case a run straddles midnight)."""
    now = datetime.datetime.now(datetime.UTC).date()
    return {now.isoformat(), (now - datetime.timedelta(days=1)).isoformat()}


def test_shim_is_committed_executable() -> None:
    assert os.access(SHIM, os.X_OK)
    listed = subprocess.run(["git", "ls-files", "-s", "faketime/dbt"], cwd=SHIM.parents[1],
                            capture_output=True, text=True, check=False).stdout
    if listed:  # only in a git checkout
        assert listed.startswith("100755 ")


@pytest.mark.parametrize("args", [
    ["run"], ["build"], ["compile"], ["test"], ["seed"], ["snapshot"], ["show"],
    ["run-operation", "my_macro"], ["docs", "generate"], ["list"], ["retry"],
    ["--debug", "run"], ["--log-level", "debug", "run"], ["--log-format=json", "build"],
    ["-t", "parse", "compile"], ["run", "--select", "debug"],
    # Every command that parses, and any subcommand the shim has never heard of: the real
    # clock is an allow-list (deps, bare dbt), so a new dbt subcommand is faked by default.
    ["parse"], ["debug"], ["ls"], ["source", "freshness"], ["clone"], ["clean"], ["init"],
    ["--log-level", "info", "parse"], ["some-future-subcommand"], ["run", "deps"],
])
def test_faked_subcommands_run_under_the_task_date(stub: Path, args: list[str]) -> None:
    done = run_shim(args, shim_env(stub))
    seen = report(done.stdout)
    assert done.returncode == 0, done.stderr
    assert seen["date"] == FAKE_DATE.isoformat()
    assert seen["preload"] == str(find_library())
    assert seen["faketime"] == f"@{FAKE_DATE.isoformat()} 12:00:00"
    assert seen["args"] == " ".join(args)  # passed through untouched


@pytest.mark.parametrize("args", [
    ["deps"], ["--version"], ["-v"], ["--help"], [], ["--log-level", "info", "deps"],
    ["--debug", "deps"], ["--project-dir", "run", "deps"],
])
def test_unfaked_commands_see_the_real_clock(stub: Path, args: list[str]) -> None:
    # Inherited fake-clock settings must not leak into unfaked commands. The inherited preload
    # names a missing file: ld.so ignores it (the shim's own sh must not be faked, or it would
    # leak /dev/shm files), yet the shim must still strip it.
    env = shim_env(stub, LD_PRELOAD="/nonexistent/libfaketime.so.1",
                   FAKETIME="@2001-01-01 00:00:00", FAKETIME_DONT_RESET="1")
    done = run_shim(args, env)
    seen = report(done.stdout)
    assert done.returncode == 0, done.stderr
    assert seen["date"] in real_today() and seen["preload"] == "" and seen["faketime"] == ""


@pytest.mark.parametrize(("overrides", "needle"), [
    ({LIBRARY_ENV: "<unset>"}, "SPIDER2LOCAL_LIBFAKETIME is not set"),
    ({LIBRARY_ENV: "/nonexistent/libfaketime.so.1"}, "/nonexistent/libfaketime.so.1 not found"),
    ({FAKE_DATE_ENV: "<unset>"}, "SPIDER2LOCAL_FAKE_DATE=''"),
    ({FAKE_DATE_ENV: "June 14"}, "is not a YYYY-MM-DD date"),
])
def test_missing_settings_fail_loudly_instead_of_running_unfaked(
        stub: Path, tmp_path: Path, overrides: dict[str, str], needle: str) -> None:
    done = run_shim(["run"], shim_env(stub, **overrides))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("spider2local dbt shim: ") and needle in done.stderr
    assert done.stderr.count("\n") == 1
    assert not (tmp_path / "stub-ran").exists()


@pytest.mark.parametrize("real", ["<unset>", "/nonexistent/dbt", str(SHIM)])
def test_bad_real_dbt_fails_loudly(real: str) -> None:
    done = run_shim(["deps"], shim_env(real))
    assert done.returncode == 2
    assert done.stderr.startswith("spider2local dbt shim: ")
    assert "SPIDER2LOCAL_REAL_DBT" in done.stderr


def _log_dates(stdout: str) -> set[str]:
    """Dates of dbt's own JSON log timestamps: the clock the dbt process lived in."""
    return {json.loads(line)["info"]["ts"][:10]
            for line in stdout.splitlines() if line.startswith("{")}


STAMP_MODEL = ("{{ config(alias='m_' ~ modules.datetime.date.today().year, "
               "meta={'seen': modules.datetime.date.today().isoformat()}) }}\nselect 1 as x")
"""Reads the clock at parse time: the table's name and the manifest record the year dbt saw."""


def _tables(database: Path) -> set[str]:
    with duckdb.connect(str(database), read_only=True) as con:
        return {str(r[0]) for r in con.execute("select table_name from information_schema.tables"
                                               " where table_name like 'm_%'").fetchall()}


@pytest.mark.slow
def test_parse_then_run_builds_what_run_alone_builds(tmp_path: Path) -> None:
    # The case: `dbt parse` on the real clock wrote a partial-parse cache, and the faked
    # `dbt run` after it reused it and built m_<real year>. With partial parsing left on (dbt's
    # default), parse-then-run must build exactly what run alone builds: the fake year, in the
    # table, in the manifest and in dbt's own log timestamps.
    built: list[tuple[set[str], str, set[str]]] = []
    for name, steps in (("alone", [["run"]]), ("after-parse", [["parse"], ["run"]])):
        project = make_project(tmp_path / name, {"stamp": STAMP_MODEL, "today":
                                                 "select current_date as d"})
        env = Clock(FAKE_DATE, find_library()).agent_env(os.environ, faketime_dir())
        env["DBT_PROFILES_DIR"] = str(project)
        logs: set[str] = set()
        for args in steps:
            done = subprocess.run(["dbt", *args, "--log-format", "json"], cwd=project, env=env,
                                  capture_output=True, text=True, timeout=LIMIT, check=False)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            logs |= _log_dates(done.stdout)
        manifest = json.loads((project / "target" / "manifest.json").read_text())
        built.append((_tables(project / "tiny.duckdb"),
                      manifest["nodes"]["model.tiny.stamp"]["config"]["meta"]["seen"], logs))
        with duckdb.connect(str(project / "tiny.duckdb"), read_only=True) as con:
            assert con.execute("select d from today").fetchall() == [(FAKE_DATE,)]
    assert built[0] == built[1] == ({f"m_{FAKE_DATE.year}"}, FAKE_DATE.isoformat(),
                                    {FAKE_DATE.isoformat()})


@pytest.fixture
def writer(tmp_path: Path) -> Path:
    """A stand-in dbt that writes ``target/run_results.json`` (unless its command is
    ``parse-fail``), echoes its stdin, records its pid, sleeps on ``sleep`` and exits with
    ``DBT_STUB_EXIT``."""
    path = tmp_path / "bin" / "writer-dbt"
    path.parent.mkdir()
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, pathlib, sys, time\n"
        "command = [a for a in sys.argv[1:] if not a.startswith('-') and a != 'debug'][0]\n"
        # written whole, then renamed: a reader polling for ``pid`` never sees it empty
        "pathlib.Path('pid.tmp').write_text(str(os.getpid()))\n"
        "os.replace('pid.tmp', 'pid')\n"
        "print('pid=' + str(os.getpid()))\n"
        "print('stdin=' + sys.stdin.read().strip())\n"
        "if command == 'sleep':\n"
        "    time.sleep(60)\n"
        "if command != 'parse-fail':\n"
        "    args = sys.argv[1:]\n"
        "    flag = args[args.index('--target-path') + 1] if '--target-path' in args else None\n"
        "    target = pathlib.Path(flag or os.environ.get('DBT_TARGET_PATH', 'target'))\n"
        "    target.mkdir(exist_ok=True)\n"
        "    (target / 'run_results.json').write_text(json.dumps({'command': sys.argv[1:]}))\n"
        "sys.exit(int(os.environ.get('DBT_STUB_EXIT', '0')))\n")
    path.chmod(0o755)
    return path


def test_each_faked_call_keeps_its_run_results_numbered(writer: Path, tmp_path: Path) -> None:
    runs = tmp_path / "project" / ".spider2local" / "dbt-runs"
    project = tmp_path / "project"
    project.mkdir()
    env = shim_env(writer, SPIDER2LOCAL_DBT_RUNS=str(runs))
    for args in (["run", "-s", "+a+"], ["parse-fail"], ["--log-level", "debug", "show"],
                 ["deps"]):
        done = subprocess.run([str(SHIM), *args], env=env, cwd=project, capture_output=True,
                              text=True, input="hello", timeout=LIMIT, check=False)
        assert done.returncode == 0, done.stderr
        assert report(done.stdout)["stdin"] == "hello"  # the caller's stdin reaches dbt
    # parse-fail wrote nothing (its call keeps no stale copy); deps runs unfaked, exec'd as before
    assert sorted(p.name for p in runs.iterdir()) == ["001-run.json", "002-show.json"]
    assert json.loads((runs / "001-run.json").read_text()) == {"command": ["run", "-s", "+a+"]}
    assert json.loads((runs / "002-show.json").read_text())["command"][-1] == "show"
    env["DBT_STUB_EXIT"] = "3"  # dbt's exit code is the shim's; an odd command word is renamed
    done = subprocess.run([str(SHIM), "../x", "--target-path", "elsewhere"], env=env,
                          cwd=project, capture_output=True, text=True, timeout=LIMIT, check=False)
    assert done.returncode == 3
    assert (runs / "003-dbt.json").is_file() and (project / "elsewhere").is_dir()
    assert not list(runs.glob(".stamp*"))


def test_without_a_runs_folder_the_shim_still_execs_dbt(writer: Path, tmp_path: Path) -> None:
    shim = subprocess.Popen([str(SHIM), "run"], env=shim_env(writer), cwd=tmp_path,
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    out, _ = shim.communicate(timeout=LIMIT)
    assert report(out)["pid"] == str(shim.pid)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signalled_shim_takes_dbt_with_it(writer: Path, tmp_path: Path,
                                            sig: signal.Signals) -> None:
    env = shim_env(writer, SPIDER2LOCAL_DBT_RUNS=str(tmp_path / "runs"))
    shim = subprocess.Popen([str(SHIM), "sleep"], env=env, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + LIMIT
    while not (tmp_path / "pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    dbt_pid = int((tmp_path / "pid").read_text())
    assert dbt_pid != shim.pid
    shim.send_signal(sig)  # to the shim alone, not its group
    assert shim.wait(timeout=30) != 0
    gone = time.monotonic() + 10
    while _alive(dbt_pid) and time.monotonic() < gone:
        time.sleep(0.05)
    assert not _alive(dbt_pid)
    assert not list((tmp_path / "runs").iterdir())  # killed before it wrote anything


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0]
    except OSError:
        return False
    return state != "Z"

"""faketime/dbt: which subcommands get the task's clock, loud failures, and real dbt under it."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
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
    ["deps"], ["parse"], ["debug"], ["--version"], ["-v"], ["--help"], [],
    ["--log-level", "info", "deps"], ["--debug", "debug"],
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


@pytest.mark.slow
def test_real_dbt_through_path_fakes_run_but_not_parse(tmp_path: Path) -> None:
    # A parse-time macro call records the date dbt's Jinja saw into the manifest: `parse`
    # must see today, `run` (a faked command) the task's date, in its Jinja, in the table it
    # builds and in its own JSON log timestamps. One real dbt per branch of the shim: which
    # subcommand takes which branch (compile and the rest faked, deps unfaked) is proven above
    # for every subcommand, with a stand-in that reports the date it sees.
    project = make_project(tmp_path / "p", {
        "today": "select current_date as d",
        "stamp": "{{ config(meta={'seen': modules.datetime.date.today().isoformat()}) }}\n"
                 "select 1 as x",
    })
    env = Clock(FAKE_DATE, find_library()).agent_env(os.environ, faketime_dir())
    env["DBT_PROFILES_DIR"] = str(project)
    manifest = project / "target" / "manifest.json"

    def dbt(*args: str) -> tuple[str, str]:
        done = subprocess.run(["dbt", *args, "--log-format", "json"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=LIMIT, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        seen = json.loads(manifest.read_text())["nodes"]["model.tiny.stamp"]["config"]["meta"]
        (dates,) = _log_dates(done.stdout)
        return seen["seen"], dates

    parsed, parse_log = dbt("parse", "--no-partial-parse")
    assert parsed in real_today() and parse_log in real_today()
    ran, run_log = dbt("run", "--no-partial-parse")
    assert ran == run_log == FAKE_DATE.isoformat()
    with duckdb.connect(str(project / "tiny.duckdb"), read_only=True) as con:
        assert con.execute("select d from today").fetchall() == [(FAKE_DATE,)]

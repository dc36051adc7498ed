"""The fake clock: library lookup, the preload recipe, the agent's environment, the self-test."""

from __future__ import annotations

import datetime
import importlib.util
import os
import sys
import time
from pathlib import Path

import anyio
import pytest

from spider2local.clock.faketime import (
    FAKE_DATE_ENV,
    LIBRARY_ENV,
    REAL_DBT_ENV,
    Clock,
    find_library,
    find_real_dbt,
    strip_fake_clock,
)
from spider2local.clock.selftest import (
    SELFTEST_DATE,
    check_fake_date,
    check_threads,
    clock_selftest,
)
from spider2local.exceptions import ClockError, UserError
from spider2local.resources import faketime_dir

DATE = datetime.date(2024, 3, 7)


@pytest.fixture
def clock() -> Clock:
    return Clock(DATE, find_library())


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_find_library_uses_the_installed_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LIBRARY_ENV, raising=False)
    library = find_library()
    spec = importlib.util.find_spec("libfaketime")
    assert spec is not None and spec.submodule_search_locations
    package = Path(next(iter(spec.submodule_search_locations))).resolve()
    assert library.name == "libfaketime.so.1" and library.is_file()
    assert package in library.parents


def test_override_and_env_var_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from_env, from_arg = tmp_path / "env.so", tmp_path / "arg.so"
    from_env.write_bytes(b"x")
    from_arg.write_bytes(b"y")
    monkeypatch.setenv(LIBRARY_ENV, str(from_env))
    assert find_library() == from_env.resolve()
    assert find_library(from_arg) == from_arg.resolve()


@pytest.mark.parametrize("via_env", [False, True])
def test_missing_library_is_a_one_line_clock_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via_env: bool) -> None:
    missing = tmp_path / "nope" / "libfaketime.so.1"
    if via_env:
        monkeypatch.setenv(LIBRARY_ENV, str(missing))
    with pytest.raises(ClockError) as info:
        find_library(None if via_env else missing)
    message = str(info.value)
    assert isinstance(info.value, UserError) and "\n" not in message
    assert str(missing) in message and "pip install" in message and LIBRARY_ENV in message


def test_preload_env_is_exactly_the_safe_recipe(clock: Clock) -> None:
    assert clock.preload_env() == {
        "LD_PRELOAD": str(clock.library),
        "FAKETIME": "@2024-03-07 12:00:00",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_FORCE_MONOTONIC_FIX": "0",
        "FAKETIME_DONT_RESET": "1",
        "DO_NOT_TRACK": "1",
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
    }


def test_strip_fake_clock_keeps_unrelated_preloads() -> None:
    env = {"LD_PRELOAD": "/x/libother.so:/y/libfaketime.so.1", "FAKETIME": "@2020-01-01",
           "FAKETIME_SHARED": "a b", "KEEP": "1"}
    assert strip_fake_clock(env) == {"LD_PRELOAD": "/x/libother.so", "KEEP": "1"}
    assert "LD_PRELOAD" not in strip_fake_clock({"LD_PRELOAD": "/y/libfaketime.so.1"})


def test_agent_env_is_not_preloaded_and_puts_the_shim_first(clock: Clock) -> None:
    shim_dir = faketime_dir()
    base = {"PATH": f"/usr/bin{os.pathsep}{shim_dir}{os.pathsep}/bin", "HOME": "/root",
            **clock.preload_env()}
    env = clock.agent_env(base, shim_dir)
    assert "FAKETIME" not in env and "LD_PRELOAD" not in env
    assert env["PATH"].split(os.pathsep) == [str(shim_dir.resolve()), "/usr/bin", "/bin"]
    assert env[FAKE_DATE_ENV] == "2024-03-07" and env[LIBRARY_ENV] == str(clock.library)
    real = Path(env[REAL_DBT_ENV])
    assert os.access(real, os.X_OK) and not real.samefile(shim_dir / "dbt")
    assert env["HOME"] == "/root" and env["DO_NOT_TRACK"] == "1"
    assert base["LD_PRELOAD"] == str(clock.library)  # the caller's mapping is untouched


def test_find_real_dbt_skips_the_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An interpreter without a dbt beside it: the PATH search must step over the shim.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    real = _executable(tmp_path / "real" / "dbt")
    shim_dir = faketime_dir()
    path = os.pathsep.join([str(shim_dir), str(tmp_path / "real")])
    assert find_real_dbt(shim_dir, path) == real
    with pytest.raises(ClockError, match="no real dbt"):
        find_real_dbt(shim_dir, str(shim_dir))


def test_find_real_dbt_prefers_the_one_beside_the_interpreter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beside = _executable(tmp_path / "venv" / "bin" / "dbt")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    _executable(tmp_path / "other" / "dbt")
    assert find_real_dbt(faketime_dir(), str(tmp_path / "other")) == beside


@pytest.mark.process
def test_clock_selftest_passes_on_this_machine() -> None:
    checks = clock_selftest()
    assert checks[0].name == "libfaketime library"
    assert len(checks) == 4 and all(c.ok for c in checks), checks
    assert SELFTEST_DATE.isoformat() in checks[1].detail


def test_clock_selftest_reports_a_missing_library(tmp_path: Path) -> None:
    (check,) = clock_selftest(tmp_path / "missing.so")
    assert not check.ok and str(tmp_path / "missing.so") in check.detail


def _selftest_env() -> dict[str, str]:
    return Clock(SELFTEST_DATE, find_library()).faked_env(os.environ)


@pytest.mark.process
def test_date_check_fails_when_the_child_sees_another_date() -> None:
    env = {**_selftest_env(), "FAKETIME": "@2023-03-03 12:00:00"}
    check = anyio.run(check_fake_date, env, 60.0)
    assert not check.ok and "2023-03-03" in check.detail


@pytest.mark.process
def test_thread_check_catches_a_faked_monotonic_clock() -> None:
    # Faking the monotonic clock makes sleeps and queue timeouts hang: the check must time out
    # (bounded by its limit) and report it, not hang the doctor.
    env = {**_selftest_env(), "FAKETIME_DONT_FAKE_MONOTONIC": "0"}
    started = time.monotonic()
    check = anyio.run(check_threads, env, 1.5)
    assert time.monotonic() - started < 30
    assert not check.ok and "hung" in check.detail


@pytest.mark.slow
def test_thread_check_catches_the_spinning_recipe() -> None:
    """Every time: timed by the clock with 0.5 s allowed for noise, the check let the spinning
    recipe pass now and then (0.92 s against a limit of 0.94 s, on an idle machine), which
    failed a clean-clone CI run; its CPU time (0.9-2.4 s against 0.22 s) is never near."""
    env = _selftest_env()
    del env["FAKETIME_FORCE_MONOTONIC_FIX"]
    for _ in range(3):
        check = anyio.run(check_threads, env, 60.0)
        assert not check.ok and "faked vs" in check.detail, check


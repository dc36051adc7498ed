"""doctor's checks that need no subprocess: the pins it enforces are pyproject's."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from spider2local.cli import doctor

REPO = Path(__file__).resolve().parents[2]


def test_the_pins_doctor_enforces_are_those_of_pyproject() -> None:
    # One owner of the pinned stack: doctor reads the installed metadata, which pip wrote from
    # pyproject.toml. A second copy of the ranges in doctor drifted from pyproject before.
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    written = {canonicalize_name(r.name): r.specifier for r in map(Requirement, deps)}
    assert doctor._pins() == written
    assert set(map(canonicalize_name, doctor.CHECKED)) <= set(written)


def test_a_version_outside_its_pin_fails_with_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    real = metadata.version
    monkeypatch.setattr(metadata, "version",
                        lambda dist: "1.12.0" if dist == "dbt-core" else real(dist))
    checks = {c.name: c for c in doctor._versions()}
    assert not checks["dbt-core"].ok and "need <1.12,>=1.11" in checks["dbt-core"].detail
    assert checks["dbt-duckdb"].ok


def test_a_command_agents_executable_is_checked(tmp_path: Path) -> None:
    from spider2local.suite.load import load_suite

    tool = tmp_path / "bin" / "my-agent"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    suite = tmp_path / "tasks.toml"
    suite.write_text('[run]\nagent = "gone"\n\n[agents.gone]\ncommand = "no-such-agent-xyz -p"\n'
                     f'\n[agents.mine]\ncommand = "{tool} run"\n'
                     f'\n[agents.shown]\ncommand = "{tool} run"\nread_only = ["{tool.parent}"]\n'
                     '\n[agents.shell]\ncommand = "sh -c true"\n')
    checks = {c.name: c for c in doctor._command_agents(load_suite(suite), "gone")}
    gone = checks["agent gone"]
    assert not gone.ok and gone.required and "no-such-agent-xyz" in gone.detail
    assert not checks["agent mine"].ok and not checks["agent mine"].required
    assert "read_only" in checks["agent mine"].detail  # found, but the sandbox hides it
    assert checks["agent shown"].ok and checks["agent shell"].ok


@pytest.mark.process  # the checks run tools (the probe, --version)
def test_the_dataset_is_read_once_and_a_broken_one_is_its_lines_failure(
        tmp_path: Path, tiny_dataset: Callable[..., Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor's dataset line and its isolation check (which hides what a run of the first task
    would) share one reading of the dataset; a dataset that cannot be read fails the dataset
    line, naming why, and the isolation check still answers. The agent is a command agent:
    sandboxed, so where namespaces work the isolation check builds its sandbox for real."""
    from spider2local.dataset import load as dataset_load
    from spider2local.sandbox.probe import probe
    from spider2local.suite.load import load_suite

    calls: list[object] = []
    real = dataset_load.load_dataset
    monkeypatch.setattr(dataset_load, "load_dataset",
                        lambda suite: calls.append(suite) or real(suite))
    root = tiny_dataset("t1", "t2")
    suite = tmp_path / "tasks.toml"
    suite.write_text(f'[dataset]\nroot = "{root}"\n\n[run]\nagent = "shell"\n\n'
                     '[agents.shell]\ncommand = "sh -c true"\n')
    checks = {c.name: c for c in doctor.run_checks(load_suite(suite), clock_selftest=False)}
    assert len(calls) == 1
    assert checks["dataset"].ok and "2 tasks, 2 runnable" in checks["dataset"].detail
    assert checks["isolation"].ok, checks["isolation"].detail
    if probe().ok:
        assert "an agent's sandbox was built" in checks["isolation"].detail

    broken = tmp_path / "tasks-broken.toml"
    broken.write_text(f'[dataset]\nroot = "{tmp_path / "nowhere"}"\n\n[run]\nagent = "shell"\n\n'
                      '[agents.shell]\ncommand = "sh -c true"\n')
    calls.clear()
    checks = {c.name: c for c in doctor.run_checks(load_suite(broken), clock_selftest=False)}
    assert len(calls) == 1
    assert not checks["dataset"].ok and "dataset root not found" in checks["dataset"].detail
    assert "isolation" in checks


def test_the_test_suites_reader_mode_fails_doctor_and_says_how_to_leave_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real run must not keep ``SPIDER2LOCAL_READERS=in-process`` (agent SQL would run in
    the runner): doctor fails on it, naming the variable; a value that is no mode is a
    warning, since readers ignore it."""
    from spider2local.sandbox.readers import IN_PROCESS, IN_PROCESS_ENV

    monkeypatch.delenv(IN_PROCESS_ENV, raising=False)
    assert doctor._readers() is None  # no line at all when unset
    monkeypatch.setenv(IN_PROCESS_ENV, IN_PROCESS)
    kept = doctor._readers()
    assert kept is not None and not kept.ok and kept.required
    assert f"unset {IN_PROCESS_ENV}" in kept.detail and "not sandboxed" in kept.detail
    monkeypatch.setenv(IN_PROCESS_ENV, "yes")
    odd = doctor._readers()
    assert odd is not None and not odd.ok and not odd.required and "is not a mode" in odd.detail


@pytest.mark.process  # the namespace probe runs unshare
def test_a_dataset_root_reads_only_through_its_override_fails_the_dataset_line(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """``sudo -E spider2local doctor`` over the invoking user's private folder: root reads it,
    the reader sandboxes cannot (tests/sandbox/test_launcher.py), and every trial's scorer
    would fail as infrastructure. doctor says so, with the folder and the fix."""
    import os
    import shutil

    from spider2local.dataset.load import load_dataset
    from spider2local.sandbox.probe import probe
    from spider2local.suite.model import Suite

    if os.geteuid() != 0 or not probe().ok:
        pytest.skip("needs root (to give a folder to another user) and namespaces")
    private = tmp_path / "alice"
    private.mkdir()
    root = shutil.move(tiny_dataset("t1"), private / "data")
    data = load_dataset(Suite(tmp_path / "tasks.toml", Path(root)))
    assert doctor._dataset(data).ok
    os.chown(private, 65534, 65534)
    private.chmod(0o700)
    check = doctor._dataset(data)
    assert not check.ok and check.required
    assert check.detail.startswith(f"the reader sandboxes cannot open it: {private} is "
                                   "reachable by root only"), check.detail
    assert "run spider2local as uid 65534" in check.detail

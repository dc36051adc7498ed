"""doctor's checks that need no subprocess: the pins it enforces are pyproject's."""

from __future__ import annotations

import tomllib
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

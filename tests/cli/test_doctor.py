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

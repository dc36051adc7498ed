"""Package checks: versions compared with packaging (dbt's spellings kept), and packages found and
supplied in the folder the project installs them in."""

from __future__ import annotations

from pathlib import Path

import pytest

from spider2local.dbtproject import packages


@pytest.mark.parametrize(("version", "constraint", "ok"), [
    ("1.0.0", "1.0.0", True),  # a lone bare pin: it, or a semver-compatible release
    ("1.0.1", "1.0.0", True),
    ("2.0.0", "1.0.0", False),
    ("0.8.3", "0.8.0", True),  # below 1.0 the minor is the compatibility line
    ("0.9.0", "0.8.0", False),
    ("1.0.0", "=1.0.0", True),  # dbt's = is ==
    ("1.0.0", " = 1.0", True),
    ("v1.2.0", ">=v1.1.0", True),  # a v prefix on either side
    ("1.2.0", ">= 1.1.0", True),
    ("0.3.0", "<0.3.0", False),
    ("1.1.0rc1", ">=1.0.0", False),  # a pre-release only when asked for
    ("1.0.0rc2", ">=1.0.0rc1", True),
    ("nonsense", ">=1.0.0", False),  # nonsense: unsatisfied, never an exception
    ("1.0.0", ">=banana", False),
    ("1.0.0", "", False),
    ("1.0.0", "=>1.0.0", False),
])
def test_version_satisfies(version: str, constraint: str, ok: bool) -> None:
    assert packages.satisfies(version, (constraint,)) is ok


def test_several_constraints_and_none() -> None:
    assert packages.satisfies("1.1.1", (">=1.0.0", "<2.0.0"))
    assert not packages.satisfies("2.0.0", (">=1.0.0", "<2.0.0"))
    assert packages.satisfies("0.1.0", ())
    assert not packages.satisfies("nonsense", ())


def _vendor(project: Path, folder: str, version: str, *, pin: str | None = None) -> None:
    pkg = project / folder
    (pkg / "macros").mkdir(parents=True)
    (pkg / "dbt_project.yml").write_text(f"name: stamp_utils\nversion: '{version}'\n")
    (pkg / "macros" / "m.sql").write_text("{% macro stamp() %}1{% endmacro %}\n")
    if pin is not None:
        (project / "packages.yml").write_text(
            f"packages:\n  - package: acme/stamp_utils\n    version: {pin}\n")


def _examples(tmp_path: Path, pin: str, siblings: dict[str, str]) -> Path:
    """``examples/want001`` needs stamp_utils at ``pin``; each sibling vendors it pinned at its
    version."""
    ex = tmp_path / "examples"
    want = ex / "want001"
    want.mkdir(parents=True)
    (want / "dbt_project.yml").write_text("name: want\n")
    (want / "packages.yml").write_text(
        f"packages:\n  - package: acme/stamp_utils\n    version: {pin}\n")
    for name, version in siblings.items():
        (ex / name).mkdir()
        (ex / name / "dbt_project.yml").write_text(f"name: {name}\n")
        _vendor(ex / name, "dbt_packages/stamp_utils", "0.1.0", pin=version)
    return want


@pytest.mark.parametrize(("pin", "sibling", "note"), [
    ("1.0.0", "1.9.9", "1.9.9 within 1.0.0"),  # a bare pin: same major
    ("0.8.0", "0.8.5", "0.8.5 within 0.8.0"),  # below 1.0: same minor
    ("v1.0.0", "1.0", "exact 1.0"),  # the same version, however spelled
    ("1.0.0", "2.0.0", None),
    ("0.8.0", "0.9.0", None),
    ("'>=0.2.0'", "0.3.0", "0.3.0 within >=0.2.0"),
])
def test_a_bare_pin_accepts_semver_compatible_siblings(tmp_path: Path, pin: str, sibling: str,
                                                       note: str | None) -> None:
    want = _examples(tmp_path, pin, {"have001": sibling})
    supply = packages.find_supply(want, packages.requirements(want)[0])
    if note is None:
        assert supply.sibling is None
    else:
        assert (supply.sibling, supply.note) == ("have001", note)


def test_supply_writes_where_the_project_installs_packages(tmp_path: Path) -> None:
    want = _examples(tmp_path, "1.0.0", {"have001": "1.0.0"})
    (want / "dbt_project.yml").write_text("name: want\npackages-install-path: vendor_pkgs\n")
    before = packages.missing_packages(want)
    assert before == ["package acme/stamp_utils not in vendor_pkgs (dbt deps needs the network); "
                      "`spider2local setup` can supply it from sibling have001 (exact 1.0.0)"]

    [supply] = packages.supply_packages(want)
    assert supply.sibling == "have001"
    assert (want / "vendor_pkgs" / "stamp_utils" / "macros" / "m.sql").is_file()
    assert not (want / "dbt_packages").exists()
    assert packages.installed(want) == {"stamp_utils": want / "vendor_pkgs" / "stamp_utils"}
    assert packages.supplied_packages(want) == {"stamp_utils": "have001 exact 1.0.0"}
    assert packages.missing_packages(want) == []


def test_a_sibling_vendoring_under_its_own_install_path_can_supply(tmp_path: Path) -> None:
    want = _examples(tmp_path, "1.0.0", {})
    have = tmp_path / "examples" / "have001"
    have.mkdir()
    (have / "dbt_project.yml").write_text("name: have\npackages-install-path: deps\n")
    _vendor(have, "deps/stamp_utils", "0.1.0", pin="1.0.0")
    supply = packages.find_supply(want, packages.requirements(want)[0])
    assert (supply.sibling, supply.source) == ("have001", have / "deps" / "stamp_utils")


def test_an_install_path_leaving_the_project_is_never_written(tmp_path: Path) -> None:
    want = _examples(tmp_path, "1.0.0", {"have001": "1.0.0"})
    (want / "dbt_project.yml").write_text("name: want\npackages-install-path: ../../escape\n")
    packages.supply_packages(want)
    assert not (tmp_path / "escape").exists()
    assert (want / "dbt_packages" / "stamp_utils" / "dbt_project.yml").is_file()

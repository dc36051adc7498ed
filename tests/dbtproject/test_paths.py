"""One reading of a project's folders: dbt's rules, data-built paths kept inside the project, and
the same answer for the model inventory, the clock-read scan and the package check."""

from __future__ import annotations

from pathlib import Path

import pytest

from spider2local.clock import reads
from spider2local.dbtproject import inventory, packages
from spider2local.dbtproject.paths import project_paths


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


LEGACY = {
    "dbt_project.yml": "name: legacy\nprofile: legacy\nconfig-version: 2\n"
                       'source-paths: ["src_models"]\nmacro-paths: ["my_macros"]\n'
                       'packages-install-path: "vendor_pkgs"\n',
    "packages.yml": "packages:\n  - package: acme/stamp_utils\n    version: 1.0.0\n",
    "src_models/orders.sql": "select id,\n  current_date as loaded_on\nfrom raw\n",
    "src_models/ages.sql": "select\n  {{ days_old('d') }} as age\nfrom raw\n",
    "src_models/stamped.sql": "select\n  {{ stamp_utils.stamp() }} as t\n",
    "src_models/schema.yml": "version: 2\nmodels:\n  - name: orders\n  - name: ages\n"
                             "  - name: stamped\n",
    "my_macros/days_old.sql":
        "{% macro days_old(c) %}\n  datediff('day', {{ c }}, now())\n{% endmacro %}\n",
    "vendor_pkgs/stamp_utils/dbt_project.yml": "name: stamp_utils\nversion: '1.0.0'\n",
    "vendor_pkgs/stamp_utils/macros/stamp.sql":
        "{% macro stamp() %}\n  {{ return(current_timestamp) }}\n{% endmacro %}\n"
        "{% macro unused_now() %}\n  now()\n{% endmacro %}\n",
}
"""A pre-1.0 style project: models under source-paths, macros under a custom macro-paths, its
one package vendored under a custom packages-install-path. Every model reads the clock:
directly, through a project macro, through a package macro."""


def test_inventory_clock_scan_and_packages_see_the_same_project(tmp_path: Path) -> None:
    project = _write(tmp_path / "legacy", LEGACY)
    found = inventory.scan_project(project)
    clock = reads.scan_clock_reads(project)

    declared = {m.name for m in found.models}
    assert declared == {"orders", "ages", "stamped"}
    assert set(clock.models) == declared  # the clock scan read the very models the YML declares
    assert {(str(h.path), h.line, h.via) for h in clock.hits} == {
        ("src_models/orders.sql", 2, None),
        ("src_models/ages.sql", 2, "days_old"),
        ("src_models/stamped.sql", 2, "stamp")}
    assert reads.unshipped_models(project, sorted(declared)) == ()

    package_macros = {(m.package, m.path) for m in found.macros if m.package is not None}
    assert package_macros == {("stamp_utils", "vendor_pkgs/stamp_utils/macros/stamp.sql")}
    assert [str(h.path) for h in clock.unused] == ["vendor_pkgs/stamp_utils/macros/stamp.sql"]
    assert {m.path for m in found.macros if m.package is None} == {"my_macros/days_old.sql"}

    assert packages.installed(project) == {"stamp_utils": project / "vendor_pkgs" / "stamp_utils"}
    assert packages.missing_packages(project) == []


def test_dbt_defaults_when_the_project_file_is_missing(tmp_path: Path) -> None:
    paths = project_paths(tmp_path)
    assert paths.config_problem == "dbt_project.yml missing"
    assert (paths.models, paths.macros, paths.snapshots, paths.seeds) == (
        (tmp_path / "models",), (tmp_path / "macros",), (tmp_path / "snapshots",),
        (tmp_path / "seeds",))
    assert paths.packages_dir == tmp_path / "dbt_packages"
    assert (paths.name, paths.package_name, paths.problems) == (None, tmp_path.name, ())


def test_unparsable_project_file_is_named_and_defaults_stand(tmp_path: Path) -> None:
    _write(tmp_path, {"dbt_project.yml": "model-paths: [\n"})
    paths = project_paths(tmp_path)
    assert paths.config_problem is not None
    assert paths.config_problem.startswith("dbt_project.yml unparsable (line ")
    assert paths.models == (tmp_path / "models",)


def test_the_new_key_wins_over_the_pre_1_0_one_as_in_dbt(tmp_path: Path) -> None:
    _write(tmp_path, {"dbt_project.yml": 'name: p\nmodel-paths: ["a", "b"]\n'
                                         'source-paths: ["old"]\ndata-paths: ["data"]\n'
                                         'snapshot-paths: []\nmacro-paths: "not a list"\n'})
    paths = project_paths(tmp_path)
    assert paths.models == (tmp_path / "a", tmp_path / "b")
    assert paths.seeds == (tmp_path / "data",)  # data-paths: pre-1.0 seed-paths
    assert paths.snapshots == ()  # an empty list is no folder, as in dbt
    assert paths.macros == (tmp_path / "macros",)  # wrong type: as if absent
    assert paths.name == "p"

    _write(tmp_path, {"dbt_project.yml": 'model-paths: null\nsource-paths: ["old"]\n'})
    assert project_paths(tmp_path).models == (tmp_path / "models",)  # dbt: the key decides


def test_folders_leaving_the_project_are_refused(tmp_path: Path) -> None:
    project = tmp_path / "p"
    outside = tmp_path / "outside"
    (outside / "pkg").mkdir(parents=True)
    (outside / "pkg" / "dbt_project.yml").write_text("name: stolen\n")
    (project / "link").parent.mkdir(parents=True)
    (project / "link").symlink_to(outside)
    _write(project, {"dbt_project.yml": 'model-paths: ["../outside", "ok"]\n'
                                        f'macro-paths: ["{outside}"]\n'
                                        'snapshot-paths: ["link"]\n'
                                        'packages-install-path: "../outside"\n'})
    paths = project_paths(project)
    assert paths.models == (project / "ok",)
    assert paths.macros == (project / "macros",)  # all refused: the default stands in
    assert paths.snapshots == (project / "snapshots",)
    assert paths.packages_dir == project / "dbt_packages"
    assert paths.packages() == ()
    assert paths.problems == (
        "dbt_project.yml model-paths '../outside' leaves the project (ignored)",
        f"dbt_project.yml macro-paths '{outside}' leaves the project (ignored)",
        "dbt_project.yml snapshot-paths 'link' leaves the project (ignored)",
        "dbt_project.yml packages-install-path '../outside' leaves the project (ignored)")
    assert set(paths.problems) <= set(inventory.scan_project(project).problems)
    assert packages.installed(project) == {}


def test_a_folder_spelled_oddly_but_inside_is_taken_under_the_root(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "p"
    _write(project, {"dbt_project.yml": f'model-paths: ["{project}/src", "x/../models"]\n'
                                        "packages-install-path: ./deps/../vendor\n",
                     "vendor/pkg/dbt_project.yml": "name: pkg\n"})
    monkeypatch.chdir(tmp_path)
    paths = project_paths(Path("p"))  # relative root, absolute setting: still comparable
    assert paths.models == (Path("p/src"), Path("p/models"))
    assert paths.packages_dir == Path("p/vendor") and paths.problems == ()
    assert packages.missing_packages(Path("p")) == []
    (project / "packages.yml").write_text("packages:\n  - package: a/other\n")
    assert packages.missing_packages(Path("p")) == [
        "package a/other not in vendor (dbt deps needs the network)"]


def test_vendored_packages_are_the_folders_dbt_would_load(tmp_path: Path) -> None:
    _write(tmp_path, {
        "dbt_project.yml": "name: p\npackages-install-path: deps\n",
        "deps/b_pkg/dbt_project.yml": "name: real_name\nsource-paths: [src]\n",
        "deps/a_pkg/dbt_project.yml": "version: '1.0'\n",  # no name: called by its folder
        "deps/broken/dbt_project.yml": "name: [\n",
        "deps/__pycache__/dbt_project.yml": "name: cache\n",  # dbt skips __ folders
        "deps/stray.txt": "not a package",
        "dbt_packages/ignored/dbt_project.yml": "name: ignored\n",  # not the install path
    })
    (tmp_path / "deps" / "empty").mkdir()
    found = project_paths(tmp_path).packages()
    assert [(p.root.name, p.package_name) for p in found] == [
        ("a_pkg", "a_pkg"), ("b_pkg", "real_name")]
    assert found[1].models == (tmp_path / "deps" / "b_pkg" / "src",)


def test_real_projects_use_the_pre_1_0_keys(shared_dataset: Path) -> None:
    project = shared_dataset / "examples" / "mrr001"
    paths = project_paths(project)
    assert paths.config_problem is None and paths.name == "mrr_project"
    assert (paths.models, paths.seeds, paths.macros) == (
        (project / "models",), (project / "data",), (project / "macros",))


def test_models_in_sub_folders_named_docs_or_tests_are_models_for_both_scans(
        tmp_path: Path) -> None:
    # Review R2: dbt builds every .sql under model-paths, whatever its sub-folder is called. The
    # inventory counts models/docs/daily.sql as a complete model, but the clock-read scan skips
    # sub-folders named docs/tests/integration_tests/... (its own _SKIPPED_DIRS, a second rule
    # of "which files are models"), so the project is called clock-independent.
    project = _write(tmp_path / "p", {
        "dbt_project.yml": "name: p\n",
        "models/docs/daily.sql": "select\n  current_date as d\n",
        "models/tests/stamp.sql": "select\n  now() as t\n",
        "models/schema.yml": "version: 2\nmodels:\n  - name: daily\n  - name: stamp\n"})
    declared = {m.name for m in inventory.scan_project(project).models
                if m.status == inventory.ModelStatus.COMPLETE}
    clock = reads.scan_clock_reads(project)
    assert declared == {"daily", "stamp"}
    assert set(clock.models) == declared
    assert clock.reads_clock

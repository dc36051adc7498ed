"""The clock-read scan: which projects read the clock, and where (file and line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spider2local.clock.reads import scan_clock_reads, strip_comments, unshipped_models


def _project(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "dbt_project.yml").write_text("name: p\nprofile: p\nconfig-version: 2\n")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize("expr", ["current_date", "now()", "CURRENT_TIMESTAMP",
                                  "{{ dbt.current_timestamp() }}", "getdate()", "today()",
                                  "{{ run_started_at }}", "{{ current_timestamp_backcompat() }}"])
def test_every_clock_spelling_in_a_model_is_found_with_its_line(tmp_path: Path,
                                                                 expr: str) -> None:
    p = _project(tmp_path, {"models/a.sql": f"select 1 as x,\n  {expr} as t\nfrom y\n",
                            "models/b.sql": "select 2 as x\n"})
    scan = scan_clock_reads(p)
    assert scan.reads_clock
    assert scan.models == ("a",)
    assert [(str(h.path), h.line) for h in scan.hits] == [("models/a.sql", 2)]


def test_comments_and_clock_free_projects_do_not_count(tmp_path: Path) -> None:
    p = _project(tmp_path, {"models/a.sql": "-- uses current_date? no\n{# now() #}\n"
                                            "/* current_timestamp\n */ select date '2020-01-01'\n"})
    assert strip_comments("a -- now()\nb").splitlines()[1] == "b"
    scan = scan_clock_reads(p)
    assert not scan.reads_clock
    assert scan.summary() == "never reads the clock"


def test_package_macro_counts_only_when_a_model_calls_it(tmp_path: Path) -> None:
    macro = ("{% macro stamp() %}\n  {{ return(now()) }}\n{% endmacro %}\n"
             "{% macro wrap() %}{{ stamp() }}{% endmacro %}\n")
    files = {"dbt_packages/util/dbt_project.yml": "name: util\nversion: '1.0.0'\n",
             "dbt_packages/util/macros/m.sql": macro,
             "models/a.sql": "select 1 as x\n"}
    unused = scan_clock_reads(_project(tmp_path / "u", files))
    assert not unused.reads_clock
    assert [(str(h.path), h.line) for h in unused.unused] == [
        ("dbt_packages/util/macros/m.sql", 2)]

    files["models/a.sql"] = "select\n  {{ wrap() }} as t\n"
    used = scan_clock_reads(_project(tmp_path / "c", files))
    assert used.reads_clock
    hit = used.hits[0]
    assert (str(hit.path), hit.line, hit.via) == ("models/a.sql", 2, "wrap")
    assert "wrap() -> now(" in hit.describe()


def test_package_models_count_but_integration_tests_do_not(tmp_path: Path) -> None:
    p = _project(tmp_path, {
        "dbt_packages/src/dbt_project.yml": "name: src\n",
        "dbt_packages/src/models/stg.sql": "select current_date as d\n",
        "dbt_packages/src/integration_tests/models/t.sql": "select now()\n"})
    assert [str(h.path) for h in scan_clock_reads(p).hits] == ["dbt_packages/src/models/stg.sql"]


def test_pre_1_0_source_paths_and_a_custom_package_folder_are_scanned(tmp_path: Path) -> None:
    p = _project(tmp_path, {
        "src_models/a.sql": "select\n  current_date as d\n",
        "src_models/b.sql": "select\n  {{ stamp() }} as t\n",
        "deps/util/dbt_project.yml": "name: util\n",
        "deps/util/macros/m.sql": "{% macro stamp() %}\n  now()\n{% endmacro %}\n"})
    (p / "dbt_project.yml").write_text(
        'name: p\nsource-paths: ["src_models"]\npackages-install-path: deps\n')
    assert [h.describe() for h in scan_clock_reads(p).hits] == [
        "src_models/a.sql:2 current_date", "src_models/b.sql:2 stamp() -> now("]


def test_a_package_folder_inside_the_model_folder_is_read_once_as_a_package(
        tmp_path: Path) -> None:
    p = _project(tmp_path, {
        "a.sql": "select 1 as x\n",
        "deps/util/dbt_project.yml": "name: util\n",
        "deps/util/models/stg.sql": "select\n  now() as t\n"})
    (p / "dbt_project.yml").write_text('name: p\nmodel-paths: ["."]\npackages-install-path: deps\n')
    assert [h.describe() for h in scan_clock_reads(p).hits] == ["deps/util/models/stg.sql:2 now("]


def test_real_tasks(shared_dataset: Path) -> None:
    mrr = scan_clock_reads(shared_dataset / "examples" / "mrr001")
    assert [h.describe() for h in mrr.hits] == ["models/utils/util_months.sql:10 current_date"]
    assert not scan_clock_reads(shared_dataset / "examples" / "playbook001").reads_clock


def test_unshipped_models_are_the_graded_ones_without_complete_sql(tmp_path: Path) -> None:
    p = _project(tmp_path / "p", {
        "models/done.sql": "select 1 as x",
        "models/stub.sql": "{{ config(materialized='table') }}\n-- TODO\n",
        "models/helper.sql": "select 2 as y",
        "models/schema.yml": "version: 2\nmodels:\n  - name: done\n  - name: stub\n"
                             "  - name: declared_only\n",
    })
    assert unshipped_models(p, ["done", "Stub", "declared_only", "helper", "nowhere"]) == (
        "Stub", "declared_only", "nowhere")

"""Project scan: declared models classified complete / stub / missing, from files only."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spider2local.dbtproject.inventory import (
    ModelStatus,
    ProjectScan,
    scan_project,
    sql_status,
    unfinished,
)

SCHEMA = """\
version: 2
models:
  - name: done
    description: "  A finished model.  "
    columns:
      - name: id
      - name: amount
  - name: empty_stub
  - name: comment_stub
  - name: config_stub
  - name: absent
    columns: [{name: x}]
  - not_a_model: true
sources:
  - name: raw
    schema: main
    tables:
      - name: orders
      - name: customers
"""


def make_project(root: Path, *, cfg_extra: str = "", models_dir: str = "models") -> Path:
    models = root / models_dir
    (models / "sub").mkdir(parents=True)
    (root / "dbt_project.yml").write_text(
        f"name: shop\nprofile: shop\nconfig-version: 2\n{cfg_extra}")
    (models / "schema.yml").write_text(SCHEMA)
    (models / "sub" / "done.sql").write_text("select 1 as id, 2 as amount\n")
    (models / "empty_stub.sql").write_text("  \n\n")
    (models / "comment_stub.sql").write_text("-- TODO\n/* write\n this */\n{# jinja note #}\n")
    (models / "config_stub.sql").write_text("{{ config(materialized='table') }}\n-- todo\n")
    (models / "helper.sql").write_text("select 3 as y")
    (root / "macros").mkdir()
    (root / "macros" / "util.sql").write_text(
        "{% macro cents(x) %}{{ x }} * 100{% endmacro %}\n{%- macro other() -%}1{% endmacro %}")
    pkg = root / "dbt_packages" / "utils_pkg"
    (pkg / "macros").mkdir(parents=True)
    (pkg / "dbt_project.yml").write_text("name: dbt_utils\nversion: '1.0'\n")
    (pkg / "macros" / "m.sql").write_text("{% macro star(from) %}*{% endmacro %}")
    return root


def test_scan_classifies_declared_models(tmp_path: Path) -> None:
    scan = scan_project(make_project(tmp_path))
    status = {m.name: m.status for m in scan.models}
    assert status == {"done": "complete", "empty_stub": "stub", "comment_stub": "stub",
                      "config_stub": "stub", "absent": "missing"}
    done = next(m for m in scan.models if m.name == "done")
    assert done.sql == "models/sub/done.sql"
    assert done.yml == "models/schema.yml"
    assert done.description == "A finished model."
    assert done.columns == ("id", "amount")
    assert {m.name for m in scan.todo} == {"empty_stub", "comment_stub", "config_stub", "absent"}
    assert [m.name for m in scan.by_status("missing")] == ["absent"]
    assert next(m for m in scan.models if m.name == "absent").sql is None


def test_scan_lists_undeclared_sources_and_macros(tmp_path: Path) -> None:
    scan = scan_project(make_project(tmp_path))
    assert scan.undeclared == ("models/helper.sql",)
    assert [(s.name, s.schema, s.tables) for s in scan.sources] == [
        ("raw", "main", ("orders", "customers"))]
    macros = {(m.package, m.name) for m in scan.macros}
    assert macros == {(None, "cents"), (None, "other"), ("dbt_utils", "star")}
    assert scan.problems == ()


def test_scan_json_round_trip(tmp_path: Path) -> None:
    scan = scan_project(make_project(tmp_path))
    assert ProjectScan.from_json(scan.to_json()) == scan


def test_scan_honours_legacy_source_paths(tmp_path: Path) -> None:
    scan = scan_project(make_project(tmp_path, cfg_extra='source-paths: ["src"]\n',
                                     models_dir="src"))
    assert {m.name for m in scan.by_status("complete")} == {"done"}
    assert scan.undeclared == ("src/helper.sql",)


def test_scan_reports_broken_yaml_and_keeps_going(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project / "models" / "broken.yml").write_text("models: [\n  - name: x\n")
    scan = scan_project(project)
    assert scan.problems == ("models/broken.yml: not valid YAML",)
    assert len(scan.models) == 5


def test_a_yml_of_only_comments_is_no_problem_but_a_binary_one_is(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project / "models" / "later.yml").write_text("# models to be declared here\n")
    (project / "models" / "binary.yml").write_bytes(b"\xff\xfe models")
    scan = scan_project(project)
    assert scan.problems == ("models/binary.yml: not valid YAML",)


def test_scan_of_empty_folder_is_empty(tmp_path: Path) -> None:
    scan = scan_project(tmp_path)
    assert (scan.models, scan.undeclared, scan.sources, scan.macros) == ((), (), (), ())


_body = st.text(alphabet="abc 01;'*-/{}#%\t", max_size=12)
comments = st.lists(st.one_of(
    _body.map(lambda b: f"--{b}\n"),
    _body.filter(lambda b: "*/" not in b).map(lambda b: f"/*{b}\n*/"),
    _body.filter(lambda b: "#}" not in b).map(lambda b: f"{{#{b}#}}"),
    st.sampled_from([" ", "\n", "\t"]),
), max_size=6).map("".join)


@settings(max_examples=60, deadline=None)
@given(comments)
def test_comments_only_is_stub_and_a_query_is_complete(tmp_path_factory: pytest.TempPathFactory,
                                                       text: str) -> None:
    path = tmp_path_factory.mktemp("sql") / "m.sql"
    path.write_text(text)
    assert sql_status(path) == "stub"
    path.write_text(text + "\nselect 1")
    assert sql_status(path) == "complete"


def test_real_projects_missing_models_have_no_sql(shared_dataset: Path) -> None:
    for project in sorted((shared_dataset / "examples").iterdir()):
        if not project.is_dir():
            continue
        scan = scan_project(project)
        assert scan.models, project
        sql_names = {p.stem for p in project.rglob("*.sql") if "macros" not in p.parts}
        for model in scan.models:
            assert (model.status == "missing") == (model.name not in sql_names), model
    assert [m.name for m in scan_project(shared_dataset / "examples" / "playbook001").todo] == [
        "cpa_and_roas"]


def test_status_is_an_enum_through_json(tmp_path: Path) -> None:
    """The scan file the agent reads back keeps statuses as enum members, written as words."""
    scan = scan_project(make_project(tmp_path))
    assert all(isinstance(m.status, ModelStatus) for m in scan.models)
    assert '"status": "stub"' in scan.to_json()
    back = ProjectScan.from_json(scan.to_json())
    assert {m.name: m.status for m in back.models if m.status is ModelStatus.MISSING} == {
        "absent": ModelStatus.MISSING}
    assert sql_status(None) is ModelStatus.MISSING


def test_vendored_packages_inside_a_model_folder_are_not_the_projects_models(
        tmp_path: Path) -> None:
    """Review finding: with ``model-paths: ["."]`` the clock-read scan skips the package folder
    (clock/reads.py ``_sql_files``), but the inventory does not, so a vendored package's YML
    declarations become models the agent is told to write. Both should ask one owner."""
    files = {
        "dbt_project.yml": 'name: p\nmodel-paths: ["."]\npackages-install-path: deps\n',
        "a.sql": "select 1 as x\n",
        "schema.yml": "version: 2\nmodels:\n  - name: a\n",
        "deps/util/dbt_project.yml": "name: util\n",
        "deps/util/models/util.yml": "version: 2\nmodels:\n  - name: util_only\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    scan = scan_project(tmp_path)
    assert [m.name for m in scan.models] == ["a"]
    assert scan.todo == ()


COMPLETE_WITH_JINJA = {
    "refs": "select o.id, c.name from {{ ref('orders') }} o\n"
            "join {{ source('raw', 'customers') }} c using (id)\n"
            "where o.day <= '{{ var(\"end_date\") }}'",
    "loop": "select\n{% for col in ['a', 'b'] %}\n  sum({{ col }}) as {{ col }}_sum"
            "{% if not loop.last %},{% endif %}\n{% endfor %}\nfrom {{ ref('x') }}",
    "branches": "select * from {{ ref('x') }}\n{% if is_incremental() %}\n"
                "where d > (select max(d) from {{ this }})\n{% else %}\nwhere true\n"
                "{% endif %}",
    "spine": "with spine as (\n{{ dbt_utils.date_spine(datepart='day', "
             "start_date=\"cast('2020-01-01' as date)\", end_date='current_date') }}\n)\n"
             "select * from spine",
    "star": "select {{ dbt_utils.star(from=ref('x'), except=['y']) }} from {{ ref('x') }}",
    "set": "{% set cols = ['a', 'b'] %}\nselect {{ cols | join(', ') }} from {{ ref('x') }};",
    "trailing_comma_in_select_is_fine_in_duckdb": "select a, b, from {{ ref('x') }}",
}
UNFINISHED = {
    "ctes_only": "with a as (select 1 as x),\nb as (select * from a)",
    "dangling_comma": "with a as (\n  select * from {{ ref('x') }}\n),",
    "open_where": "select * from {{ ref('x') }} where",
    "open_select_list": "select a,\n  b,",
    "syntax_error_in_plain_sql": "select a b c d from {{ ref('x') }} where (",
    "ctes_with_jinja": "with a as (\n{% for t in ['x', 'y'] %}\nselect * from {{ ref(t) }}"
                       "\n{% endfor %}\n)",
}


@pytest.mark.parametrize("name", sorted(COMPLETE_WITH_JINJA))
def test_a_complete_model_with_jinja_stays_complete(tmp_path: Path, name: str) -> None:
    path = tmp_path / "m.sql"
    path.write_text("{{ config(materialized='table') }}\n" + COMPLETE_WITH_JINJA[name] + "\n")
    assert sql_status(path) is ModelStatus.COMPLETE


@pytest.mark.parametrize("name", sorted(UNFINISHED))
def test_sql_that_stops_mid_query_is_incomplete(tmp_path: Path, name: str) -> None:
    path = tmp_path / "m.sql"
    path.write_text(UNFINISHED[name] + "\n-- TODO: finish\n")
    assert sql_status(path) is ModelStatus.INCOMPLETE


def test_real_task_that_ships_an_unfinished_model(shared_dataset: Path) -> None:
    """mrr001's models/mrr.sql stops after its CTEs (dbt cannot compile it): the scan must
    send the agent to finish it, not list it among the complete models to leave alone."""
    scan = scan_project(shared_dataset / "examples" / "mrr001")
    status = {m.name: m.status for m in scan.models}
    assert status["mrr"] is ModelStatus.INCOMPLETE
    assert "mrr" in {m.name for m in scan.todo}
    assert status["customer_churn_month"] is ModelStatus.COMPLETE
    assert set(scan.refs("mrr")) == {"customer_revenue_by_month", "customer_churn_month"}
    assert scan.referenced_by("customer_churn_month") == ("mrr",)


def test_scan_knows_refs_siblings_vars_and_macro_bodies(tmp_path: Path) -> None:
    project = make_project(tmp_path, cfg_extra="vars:\n  shop_orders: \"{{ source('raw', "
                                               "'orders') }}\"\n")
    (project / "models" / "helper.sql").write_text("select * from {{ ref('done') }}")
    (project / "models" / "sub" / "done.sql").write_text(
        "select 1 as id, 2 as amount from {{ ref( 'pkg', \"base\" ) }}")
    scan = ProjectScan.from_json(scan_project(project).to_json())
    assert scan.refs("done") == ("base",)
    assert scan.referenced_by("done") == ("helper",)
    done = next(m for m in scan.models if m.name == "done")
    assert set(scan.siblings(done)) == {"empty_stub", "comment_stub", "config_stub", "absent"}
    assert dict(scan.vars)["shop_orders"] == "{{ source('raw', 'orders') }}"
    cents = next(m for m in scan.macros if m.name == "cents")
    assert cents.body == "{% macro cents(x) %}{{ x }} * 100{% endmacro %}"
    assert all(m.body == "" for m in scan.macros if m.package)


def test_a_scan_written_before_these_fields_still_reads(tmp_path: Path) -> None:
    old = {"models": [{"name": "a", "status": "complete", "yml": "m.yml", "sql": "a.sql",
                       "description": "", "columns": ["x"]}],
           "undeclared": [], "sources": [], "macros": [{"name": "m", "path": "macros/m.sql",
                                                         "package": None}]}
    scan = ProjectScan.from_json(__import__("json").dumps(old))
    assert scan.edges == () and scan.vars == () and scan.macros[0].body == ""


def test_models_are_parsed_in_threads_at_once_without_duckdbs_shared_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner scans several workspaces at once, each in a worker thread. DuckDB's
    module-level ``extract_statements`` shares one default connection between threads, and
    under duckdb 1.2.2 (then the pin's floor) that deadlocked the process: two ``--jobs 2`` runs
    hung for good in workspace preparation. They parse on one connection of ours, one thread at
    a time (a connection per thread broke the run under ``ulimit -v``: tests/run/test_memory.py)."""
    def shared(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("parsed with DuckDB's shared default connection")

    monkeypatch.setattr(duckdb, "extract_statements", shared)
    seen: list[tuple[bool, bool]] = []

    def scan() -> None:
        for _ in range(50):
            seen.append((unfinished("select id from orders"),
                         unfinished("with a as (select 1 as x) select x from")))

    threads = [threading.Thread(target=scan) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert seen == [(False, True)] * 200

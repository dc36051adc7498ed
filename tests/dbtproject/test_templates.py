"""``--templates``: starting files for declared models without SQL, still stubs to the scan."""

from __future__ import annotations

from pathlib import Path

from spider2local.dbtproject.inventory import ModelStatus, scan_project, sql_status
from spider2local.dbtproject.templates import templates


def project(root: Path) -> Path:
    (root / "models" / "marts").mkdir(parents=True)
    (root / "dbt_project.yml").write_text("name: p\nprofile: p\nconfig-version: 2\n")
    (root / "models" / "staging.sql").write_text("select 1 as id")
    (root / "models" / "src.yml").write_text(
        "version: 2\nsources:\n  - name: raw\n    tables:\n      - name: ad_spend\n"
        "      - name: orders\n")
    (root / "models" / "marts" / "marts.yml").write_text("""\
version: 2
models:
  - name: revenue
    description: Monthly revenue from staging, net of ad spend.
    columns:
      - name: month
      - name: customer_id
        tests:
          - relationships: {to: "ref('customers')", field: id}
      - name: revenue
  - name: customers
    columns: [{name: id}]
  - name: done
""")
    (root / "models" / "marts" / "done.sql").write_text("select 1 as x")
    return root


def test_a_template_per_missing_model_with_columns_refs_and_a_todo(tmp_path: Path) -> None:
    root = project(tmp_path)
    files = templates(scan_project(root), root)
    assert sorted(p.relative_to(root).as_posix() for p in files) == [
        "models/marts/customers.sql", "models/marts/revenue.sql"]
    text = files[root / "models" / "marts" / "revenue.sql"]
    for expected in ("--   month\n--   customer_id\n--   revenue", "{{ ref('customers') }}",
                     "{{ ref('staging') }}", "{{ source('raw', 'ad_spend') }}", "TODO"):
        assert expected in text, expected
    assert "orders" not in text
    for path, body in files.items():
        path.write_text(body)
        assert sql_status(path) is ModelStatus.STUB
    assert {m.name: m.status for m in scan_project(root).models} == {
        "revenue": "stub", "customers": "stub", "done": "complete"}

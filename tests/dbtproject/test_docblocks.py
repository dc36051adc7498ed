"""Doc blocks: ``{{ doc('...') }}`` in YML descriptions reach the scan as their ``.md`` text,
with the file named; a ``.md`` leading outside the project is never read."""

from __future__ import annotations

import json
from pathlib import Path

from spider2local.dbtproject.docblocks import DocBlock, DocIndex
from spider2local.dbtproject.inventory import ProjectScan, scan_project

SCHEMA = """\
version: 2
models:
  - name: shipments_daily
    description: '{{ doc("shipments_daily") }}'
    columns:
      - name: shipment_day
        description: The calendar day.
      - name: carrier_status
        description: >
          Last status of the day. {{ doc('carrier_status_values') }}
      - name: parcels
      - name: depot_code
        description: "{{ doc('courier_pkg', 'depot_code') }}"
      - name: ghost
        description: "{{ doc('nowhere_defined') }}"
"""

DOCS = """\
# Shipping docs

{% docs shipments_daily %}
One row per carrier per day, counting parcels handed over.
{% enddocs %}

{%- docs carrier_status_values -%}
One of: `booked`, `in_transit`, `delivered`, `returned`.
{%- enddocs -%}
"""


def make_project(root: Path) -> Path:
    (root / "models" / "marts").mkdir(parents=True)
    (root / "dbt_project.yml").write_text("name: shipping\nprofile: shipping\n")
    (root / "models" / "marts" / "schema.yml").write_text(SCHEMA)
    (root / "models" / "docs.md").write_text(DOCS)
    pkg = root / "dbt_packages" / "courier"
    (pkg / "models").mkdir(parents=True)
    (pkg / "dbt_project.yml").write_text("name: courier_pkg\nversion: '1.0'\n")
    (pkg / "models" / "pkg_docs.md").write_text(
        "{% docs depot_code %}Three-letter depot code.{% enddocs %}")
    return root


def test_doc_blocks_reach_the_scan_with_their_file_named(tmp_path: Path) -> None:
    scan = scan_project(make_project(tmp_path))
    model = scan.models[0]
    assert model.description == "One row per carrier per day, counting parcels handed over."
    assert model.description_docs == ("models/docs.md",)
    docs = {c.name: c for c in model.column_docs}
    assert list(docs) == ["shipment_day", "carrier_status", "depot_code", "ghost"]
    assert docs["shipment_day"].description == "The calendar day." and \
        docs["shipment_day"].docs == ()
    status = docs["carrier_status"]
    assert status.description == ("Last status of the day. One of: `booked`, `in_transit`, "
                                  "`delivered`, `returned`.")
    assert status.docs == ("models/docs.md",)
    assert docs["depot_code"].description == "Three-letter depot code."
    assert docs["depot_code"].docs == ("dbt_packages/courier/models/pkg_docs.md",)
    # an undefined block stays as written, and the scan says dbt will stop on it
    assert docs["ghost"].description == "{{ doc('nowhere_defined') }}"
    assert any("doc('nowhere_defined')" in p and "schema.yml" in p for p in scan.problems)
    assert ProjectScan.from_json(scan.to_json()) == scan


def test_the_prompt_shows_the_doc_text_and_names_the_file(tmp_path: Path) -> None:
    from spider2local.agents.prompts import render_scan

    text = render_scan(scan_project(make_project(tmp_path)))
    assert "description (doc block in models/docs.md): One row per carrier per day" in text
    assert "- carrier_status (doc block in models/docs.md): Last status of the day. One of: " \
           "`booked`, `in_transit`, `delivered`, `returned`." in text
    assert "{{ doc(" not in text.replace("{{ doc('nowhere_defined') }}", "")


def test_docs_paths_setting_is_where_blocks_are_read(tmp_path: Path) -> None:
    make_project(tmp_path)
    (tmp_path / "models" / "docs.md").rename(tmp_path / "notes.md")
    (tmp_path / "docs").mkdir()
    (tmp_path / "notes.md").rename(tmp_path / "docs" / "notes.md")
    assert scan_project(tmp_path).models[0].description.startswith("{{ doc(")  # not found
    (tmp_path / "dbt_project.yml").write_text(
        "name: shipping\nprofile: shipping\ndocs-paths: ['docs']\n")
    model = scan_project(tmp_path).models[0]
    assert model.description.startswith("One row per carrier")
    assert model.description_docs == ("docs/notes.md",)


def test_a_doc_file_leading_outside_the_project_is_never_read(tmp_path: Path) -> None:
    """An untrusted project (or the agent, for the live scan) links a .md, a macro file or a
    YML to a file of the runner's: nothing of it reaches the scan."""
    project = make_project(tmp_path / "project")
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "gold.md").write_text("{% docs shipments_daily %}SECRET-GOLD{% enddocs %}")
    (secret / "m.sql").write_text("{% macro leak() %}SECRET-MACRO{% endmacro %}")
    (secret / "s.yml").write_text("models:\n  - name: leaked\n    description: SECRET-YML\n")
    (project / "models" / "docs.md").unlink()
    (project / "models" / "docs.md").symlink_to(secret / "gold.md")
    (project / "macros").mkdir()
    (project / "macros" / "m.sql").symlink_to(secret / "m.sql")
    (project / "models" / "s.yml").symlink_to(secret / "s.yml")
    scan = scan_project(project)
    text = scan.to_json()
    assert "SECRET" not in text
    assert [m.name for m in scan.models] == ["shipments_daily"]
    assert any("models/s.yml: leads outside the project" in p for p in scan.problems)


def test_block_lookup_follows_dbt() -> None:
    own = DocBlock("x", "mine", "models/a.md")
    other = DocBlock("x", "theirs", "dbt_packages/p/b.md", "p")
    index = DocIndex([other, own], project_name="proj")
    assert index.find("x") is own  # the project's first
    assert index.find("x", "p") is other and index.find("x", "proj") is own
    assert index.find("x", "nope") is None
    resolved = index.resolve('a {{ doc("x") }} b {{- doc( "p" , "x" ) -}} c {{ doc("y") }}')
    assert resolved.text == 'a mine b theirs c {{ doc("y") }}'
    assert resolved.files == ("models/a.md", "dbt_packages/p/b.md")
    assert resolved.missing == ("y",)


def test_a_scan_written_before_doc_fields_still_reads() -> None:
    old = {"models": [{"name": "a", "status": "missing", "yml": "m.yml", "sql": None,
                       "description": "d", "columns": ["x"]}],
           "undeclared": [], "sources": [], "macros": []}
    model = ProjectScan.from_json(json.dumps(old)).models[0]
    assert model.column_docs == () and model.description_docs == ()

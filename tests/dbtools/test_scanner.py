"""``project_scan`` answers with the project as it is at the call (a model the agent wrote is
complete), says so, and falls back to the scan from before the agent, said to be that."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from spider2local.dbtools.query import FRESH_SCAN, STORED_SCAN, QueryLimits, QueryService
from spider2local.dbtools.tools import call_tool
from spider2local.dbtproject.inventory import scan_project
from tests.dbtools.test_query import FAKE_DATE, make_workspace

pytestmark = pytest.mark.process

SCHEMA = """\
version: 2
models:
  - name: courier_totals
    description: "{{ doc('courier_totals') }}"
    columns: [{name: courier_id}, {name: parcels}]
"""


def scanned(text: str) -> dict[str, str]:
    """Model name -> status, from a project_scan answer (its note line, then the JSON)."""
    data = json.loads(text.split("\n", 1)[1])
    return {m["name"]: m["status"] for m in data["models"]}


def test_the_scan_follows_what_the_agent_writes(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    project = ws.project_dir
    (project / "models").mkdir()
    (project / "dbt_project.yml").write_text("name: couriers\nprofile: couriers\n")
    (project / "models" / "schema.yml").write_text(SCHEMA)
    (project / "models" / "docs.md").write_text(
        "{% docs courier_totals %}One row per courier.{% enddocs %}")
    assert ws.scan_path is not None
    ws.scan_path.write_text(scan_project(project).to_json())  # as prepare leaves it
    service = QueryService.for_workspace(ws, FAKE_DATE)
    assert service.project == project

    before, before_err = anyio.run(call_tool, service, "project_scan", {})
    (project / "models" / "courier_totals.sql").write_text("select 1 as courier_id, 2 as parcels")
    after, after_err = anyio.run(call_tool, service, "project_scan", {})
    assert not before_err and not after_err
    assert before.startswith(FRESH_SCAN) and after.startswith(FRESH_SCAN)
    assert scanned(before) == {"courier_totals": "missing"}
    assert scanned(after) == {"courier_totals": "complete"}
    assert "One row per courier." in after and "models/docs.md" in after
    # the stored scan, from before the agent, is what a tool without the project answers
    service.project = None
    stored, stored_err = anyio.run(service.project_scan)
    assert not stored_err and stored.startswith(STORED_SCAN)
    assert scanned(stored) == {"courier_totals": "missing"}


def test_a_failed_fresh_scan_says_the_answer_is_the_old_one(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    service = QueryService.for_workspace(ws, FAKE_DATE, QueryLimits(timeout=0.001))
    text, is_error = anyio.run(service.project_scan)
    assert not is_error
    note = text.split("\n", 1)[0]
    assert note.startswith("Project scan taken before the session started")
    assert "(a fresh scan failed: " in note and "longer than" in note
    assert "orders_summary" in text  # the stored one


def test_a_link_the_agent_plants_towards_the_runner_s_files_brings_nothing(
        tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    ws = make_workspace(tmp_path / "ws")
    project = ws.project_dir
    (project / "models").mkdir()
    (project / "dbt_project.yml").write_text("name: couriers\nprofile: couriers\n")
    (project / "models" / "schema.yml").write_text(SCHEMA)
    secret = tmp_path / "runner-only.md"
    secret.write_text("{% docs courier_totals %}SECRET-OF-THE-RUNNER{% enddocs %}")
    (project / "models" / "docs.md").symlink_to(secret)
    text, is_error = anyio.run(QueryService.for_workspace(ws, FAKE_DATE).project_scan)
    assert not is_error and text.startswith(FRESH_SCAN)
    assert "SECRET" not in text and "courier_totals" in text

"""Shared fixtures: the real Spider2-DBT tasks in ../shared, and tiny upstream-shaped datasets."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pytest

SHARED_DATASET = Path(__file__).resolve().parents[2] / "shared" / "spider2-dbt"


@pytest.fixture
def shared_dataset() -> Path:
    """The two real tasks (playbook001, mrr001); read-only: copy before writing."""
    if not (SHARED_DATASET / "examples" / "spider2-dbt.jsonl").is_file():
        pytest.skip(f"real Spider2-DBT tasks not found at {SHARED_DATASET}")
    return SHARED_DATASET


def make_duckdb(path: Path, tables: Mapping[str, str]) -> Path:
    """Create a DuckDB file whose tables are built by the given SELECT statements."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(path))
    try:
        for name, select in tables.items():
            con.execute(f"CREATE TABLE {name} AS {select}")
    finally:
        con.close()
    return path


def write_task(root: Path, tid: str, *, instruction: str = "Build the orders model.",
               db: str = "shop", gold_tables: Mapping[str, str] | None = None,
               evaluation: dict[str, Any] | None = None, packages_yml: str | None = None,
               with_start_db: bool = True, with_gold: bool = True) -> None:
    """Add one task in upstream's layout (project, start db, eval line, gold db)."""
    project = root / "examples" / tid
    (project / "models").mkdir(parents=True, exist_ok=True)
    (project / "dbt_project.yml").write_text(
        f"name: {tid}\nprofile: {db}\nversion: '1.0'\nconfig-version: 2\n"
        "models:\n  " + tid + ":\n    materialized: table\n")
    (project / "profiles.yml").write_text(
        f"{db}:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: \"./{db}.duckdb\"\n      schema: main\n")
    (project / "models" / "schema.yml").write_text(
        "version: 2\nmodels:\n  - name: orders\n    columns:\n      - name: id\n")
    if packages_yml is not None:
        (project / "packages.yml").write_text(packages_yml)
    if with_start_db:
        make_duckdb(project / f"{db}.duckdb", {"raw_orders": "SELECT 1 AS id"})
    with (root / "examples" / "spider2-dbt.jsonl").open("a") as fh:
        fh.write(json.dumps({"instance_id": tid, "instruction": instruction, "type": "DBT"}) + "\n")
    gold_dir = root / "evaluation_suite" / "gold"
    gold_dir.mkdir(parents=True, exist_ok=True)
    ev = evaluation or {"func": "duckdb_match", "parameters": {
        "gold": f"{db}.duckdb", "condition_tabs": ["orders"], "condition_cols": [[0]],
        "ignore_orders": [True]}}
    with (gold_dir / "spider2_eval.jsonl").open("a") as fh:
        fh.write(json.dumps({"instance_id": tid, "evaluation": ev}) + "\n")
    if with_gold:
        make_duckdb(gold_dir / tid / f"{db}.duckdb",
                    gold_tables or {"orders": "SELECT 1 AS id"})


@pytest.fixture
def tiny_dataset(tmp_path: Path) -> Callable[..., Path]:
    """Factory: ``tiny_dataset("t1", "t2", ...)`` makes a valid dataset root with those tasks."""
    root = tmp_path / "spider2-dbt"

    def build(*ids: str, **kwargs: Any) -> Path:
        (root / "examples").mkdir(parents=True, exist_ok=True)
        for tid in ids:
            write_task(root, tid, **kwargs)
        return root

    return build

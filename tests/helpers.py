"""Helpers shared by tests: tiny DuckDB files and upstream-shaped tasks, built by code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

HYPOTHESIS_PROFILE = (os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI") else "dev"))
"""``dev`` (the default on a developer's machine): a few hundred property examples, for a quick
loop; ``ci`` (wherever ``CI`` is set, as in GitHub Actions and .ci/run's CI): the full plans."""
FULL_PROPERTIES = HYPOTHESIS_PROFILE == "ci"


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


@contextmanager
def hold_lock(db: Path) -> Iterator[Callable[[], None]]:
    """Hold ``db`` read-write in another process, as a running ``dbt run`` does.

    Yields ``release()`` to let go early (e.g. from a timer); the lock is gone on exit anyway.
    """
    code = ("import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
            "sys.stdin.read(); c.close()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)

    def release() -> None:
        if proc.poll() is None:
            proc.communicate("", timeout=30)

    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield release
    finally:
        release()

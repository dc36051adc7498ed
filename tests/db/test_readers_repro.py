"""Issue 19's no-agent repro: a result whose graded tables are views over the gold file, and a
``<result>.tmp -> /`` symlink beside it. DuckDB allows its temp directory even with external
access off, so the symlink put ``/`` into the allowed directories and the scorer read real gold:
the task passed. Both forms are tried through the real CLI (``spider2local score``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]


def _score(result: Path, gold: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "spider2local", "score", str(result),
                           "--gold", str(gold), "--tables", "mrr", "--json"],
                          cwd=result.parent, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.parametrize("link", [None, "/", "parent"])
def test_views_over_gold_never_score(shared_dataset: Path, tmp_path: Path,
                                     link: str | None) -> None:
    gold = shared_dataset / "evaluation_suite" / "gold" / "mrr001" / "mrr.duckdb"
    result = tmp_path / "result.duckdb"
    con = duckdb.connect(str(result))
    con.execute(f"CREATE VIEW mrr AS SELECT * FROM read_duckdb('{gold}', table_name='mrr')")
    con.close()
    if link is not None:
        os.symlink("/" if link == "/" else str(gold.parent), tmp_path / "result.duckdb.tmp")
    done = _score(result, gold)
    assert done.returncode == 1, done.stderr
    verdict = json.loads(done.stdout)
    assert verdict["passed"] is False
    table = verdict["tables"][0]
    assert table["passed"] is False and table["error"]

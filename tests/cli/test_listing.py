"""``list``: problem messages and graded tables as text and JSON, whatever the defect."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from spider2local.cli.listing import listing_json, listing_text
from spider2local.dataset.load import load_dataset
from spider2local.suite.model import Suite


def test_listing_shows_problem_messages_and_graded_tables(
        tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("good1", "nogold1")
    tiny_dataset("noeval1")
    (root / "evaluation_suite" / "gold" / "nogold1" / "shop.duckdb").unlink()
    evals = root / "evaluation_suite" / "gold" / "spider2_eval.jsonl"
    evals.write_text("".join(line + "\n" for line in evals.read_text().splitlines()
                             if "noeval1" not in line))
    data = load_dataset(Suite(root / "tasks.toml", root))
    # JSON: problems are their messages (json.dumps with no default= must accept them).
    tasks = {t["id"]: t for t in json.loads(json.dumps(listing_json(data)))["tasks"]}
    assert tasks["nogold1"]["problems"] == ["gold file gold/nogold1/shop.duckdb missing"]
    assert tasks["nogold1"]["status"] == "gold file gold/nogold1/shop.duckdb missing"
    assert tasks["nogold1"]["graded_tables"] == ["orders"] and not tasks["nogold1"]["has_gold"]
    assert tasks["noeval1"]["problems"] == ["no evaluation config in spider2_eval.jsonl"]
    assert tasks["noeval1"]["graded_tables"] == []
    assert tasks["good1"]["problems"] == [] and tasks["good1"]["has_gold"]
    rows = {line.split()[0]: line for line in listing_text(data).splitlines()[2:5]}
    assert rows["nogold1"].rstrip().endswith("orders")  # named though the gold file is gone
    assert rows["noeval1"].rstrip().endswith("-")


def test_shard_matrix_covers_the_selection_once_and_drops_empty_shards(
        tiny_dataset: Callable[..., Path]) -> None:
    from spider2local.cli.listing import shard_matrix
    from spider2local.run.selection import parse_shard, select_tasks

    root = tiny_dataset("a1", "b1", "c1", "d1", "e1")
    data = load_dataset(Suite(root / "tasks.toml", root))
    for count in (1, 2, 3, 5, 8):
        matrix = shard_matrix(data, count)
        assert set(matrix) == {"include"}  # any other key would be a matrix dimension
        rows = matrix["include"]
        assert len(rows) == min(count, 5)
        ids = [tid for row in rows for tid in row["ids"]]
        assert sorted(ids) == ["a1", "b1", "c1", "d1", "e1"]  # each task in one shard
        for row in rows:  # exactly what `run --shard` selects
            assert list(select_tasks(data, shard=parse_shard(row["shard"])).ids) == row["ids"]
            assert row["tasks"] == len(row["ids"])


def test_list_shards_json_is_one_line_a_workflow_can_read(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "spider2local", "list", "--shards", "2",
                           "--json"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert len(proc.stdout.strip().splitlines()) == 1
    assert [r["shard"] for r in json.loads(proc.stdout)["include"]] == ["1/2", "2/2"]
    bad = subprocess.run([sys.executable, "-m", "spider2local", "list", "--subset", "all"],
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--subset applies to --shards" in bad.stderr

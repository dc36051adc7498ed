"""``list``: problem messages and graded tables as text and JSON, whatever the defect."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

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


@pytest.mark.process
def test_list_shards_json_is_one_line_a_workflow_can_read(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "spider2local", "list", "--shards", "2",
                           "--json"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert len(proc.stdout.strip().splitlines()) == 1
    assert [r["shard"] for r in json.loads(proc.stdout)["include"]] == ["1/2", "2/2"]
    bad = subprocess.run([sys.executable, "-m", "spider2local", "list", "--trials", "2"],
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--trials applies to --shards" in bad.stderr


def test_list_subset_lists_the_tasks_run_would_select(tiny_dataset: Callable[..., Path]) -> None:
    """``list --subset S`` without ``--shards``: the subset's tasks (as ``run --subset S``
    selects them), in text and JSON; an unknown subset is run's one-line error (exit 2)."""
    from click.testing import CliRunner

    from spider2local.cli.app import cli

    root = tiny_dataset("a1", "b1", "c1")
    suite = root.parent / "tasks.toml"
    suite.write_text(f'schema = 1\n[dataset]\nroot = "{root.name}"\n'
                     '[subsets]\npair = ["c1", "a1"]\n')
    runner = CliRunner()
    text = runner.invoke(cli, ["--suite", str(suite), "list", "--subset", "pair"])
    assert text.exit_code == 0, text.output
    listed = [line.split()[0] for line in text.stdout.splitlines()[2:] if line.strip()]
    assert listed[:2] == ["a1", "c1"] and "b1" not in text.stdout
    assert "2 of 3 tasks in subset 'pair', 2 runnable" in text.stdout
    as_json = runner.invoke(cli, ["--suite", str(suite), "list", "--subset", "pair", "--json"])
    assert as_json.exit_code == 0, as_json.output
    listing = json.loads(as_json.stdout)
    assert [t["id"] for t in listing["tasks"]] == ["a1", "c1"] and listing["subset"] == "pair"
    everything = json.loads(runner.invoke(cli, ["--suite", str(suite), "list", "--json"]).stdout)
    assert [t["id"] for t in everything["tasks"]] == ["a1", "b1", "c1"]
    unknown = runner.invoke(cli, ["--suite", str(suite), "list", "--subset", "nope"])
    assert unknown.exit_code == 2
    assert "unknown subset 'nope'" in unknown.stderr and len(unknown.stderr.splitlines()) == 1

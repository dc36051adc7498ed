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

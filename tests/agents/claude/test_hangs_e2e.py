"""Hang, flood and re-roll attacks end to end: the real SDK and bundled CLI in the namespace
sandbox against the loopback fake API, real dbt, a dataset in upstream's layout.

Each task must end within its stage deadline plus a bounded grace, with a result saying why,
its logs under their caps with a note where cut, and nothing left running.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spider2local.core import transcript as transcript_mod
from spider2local.sandbox.probe import probe
from spider2local.testing import FakeAnthropic, reply, route_by_system, tool
from tests.agents.claude.test_sandbox import sandboxed_run

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox: "
                                                         f"{probe().reason}")]


@pytest.fixture
def three_tasks(tiny_dataset: Callable[..., Path]) -> Path:
    for tid in ("flood", "fifo", "view"):
        root = tiny_dataset(tid, instruction=f"Build the orders model for task {tid}.",
                            gold_tables={"orders": "SELECT 1 AS id"})
    return root


def test_a_flood_a_fifo_wal_and_an_endless_view_each_end_their_task(
        three_tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transcript_mod, "MAX_TRANSCRIPT", 1024 * 1024)
    right = "cat > models/orders.sql <<'EOF'\nselect 1 as id\nEOF\ndbt run 2>&1 | tail -1"
    # 12 MB onto the CLI's stderr (the CLI is PID 1 of the sandbox): the SDK hands each line
    # to the runner, which used to keep every byte in the transcript
    flood = ("head -c 12000000 /dev/zero | tr '\\0' x | fold -w 10000 > /proc/1/fd/2; "
             "echo flooded")
    fifo = "rm -f shop.duckdb.wal && mkfifo shop.duckdb.wal && ls -l shop.duckdb.wal"
    view = (f"{sys.executable} - <<'PY'\nimport duckdb\nc = duckdb.connect('shop.duckdb')\n"
            "c.execute('DROP TABLE IF EXISTS orders')\n"
            "c.execute('CREATE VIEW orders AS WITH RECURSIVE r(id) AS (SELECT 1 UNION ALL "
            "SELECT id + 1 FROM r) SELECT id FROM r')\nc.close()\nPY")
    scripts = {tid: [reply(tool("Bash", command=right)), reply(tool("Bash", command=attack)),
                     reply("done")]
               for tid, attack in (("flood", flood), ("fifo", fifo), ("view", view))}
    route = route_by_system({tid: f"for task {tid}." for tid in scripts})
    started = time.monotonic()
    with FakeAnthropic(scripts, route=route) as fake:
        outcome = sandboxed_run(fake, three_tasks, tmp_path, monkeypatch, "hangs",
                                list(scripts), jobs=3, retries=0, stage_timeout=5.0)
    assert time.monotonic() - started < 240
    results = {tid: json.loads((outcome.folder.root / tid / "result.json").read_text())
               for tid in scripts}
    # The flood: the task is scored as usual, its transcript capped with one note.
    assert results["flood"]["status"] == "passed", (results["flood"].get("error"), results["flood"].get("score"))
    log = outcome.folder.root / "flood" / "transcript.jsonl"
    assert log.stat().st_size < 1024 * 1024 + 64 * 1024
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds.count("cut") == 1 and kinds[-1] == "outcome"
    # The FIFO WAL and the endless view: failed as the agent's doing, within the deadline.
    for tid, stage, words in (("fifo", "checkpoint", "not a regular file"),
                              ("view", "score", "did not finish within its deadline of 5s")):
        r = results[tid]
        assert r["status"] == "failed" and r["passed"] is False, r
        assert r["error"]["stage"] == stage and r["error"]["kind"] == "agent", r
        assert words in r["error"]["message"], r["error"]
    assert not list(Path("/tmp").glob("spider2local-view-*")) or all(
        "hangs" not in str(p) for p in Path("/tmp").glob("spider2local-view-*"))

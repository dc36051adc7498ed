"""Hide by real path, end to end (issue 19): realistic layouts put gold where the sandbox used
to show it. Real SDK and bundled CLI against the loopback fake API, real dbt, a task in
upstream's layout, one run per place it may lie (``/opt``, ``/usr/local``, the venv):

- the dataset's ``evaluation_suite`` is a symlink to a folder elsewhere there;
- ``dbt_gold.zip`` lies beside the dataset;
- an older runs folder (earlier results with gold diagnostics) lies there too.

The agent's Bash reads each of them by its real path: nothing comes back, gold and eval stay
byte-identical, and the task is still scored (the scorer's own sandbox holds the gold).
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from spider2local.dataset import known
from spider2local.sandbox.probe import probe
from spider2local.testing import FakeAnthropic, reply, tool
from tests.agents.claude.test_sandbox import digest, sandboxed_run

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox: "
                                                         f"{probe().reason}")]
ZIP_MARKER = "GOLDZIP-MARKER-5e1"
OLD_RUN_MARKER = "OLD-RUN-GOLD-DIAGNOSTIC-77d"


@pytest.fixture(params=["/opt", "/usr/local", "venv"])
def base(request: pytest.FixtureRequest) -> Iterator[Path]:
    parent = Path(sys.prefix) if request.param == "venv" else Path(request.param)
    folder = parent / f"spider2local-test-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot write {parent}: {exc}")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.system_wide("writes")
def test_gold_elsewhere_by_symlink_zip_or_old_run_stays_out_of_reach(
        base: Path, tiny_dataset: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    built = tiny_dataset("t1", gold_tables={"orders": "SELECT 42 AS id"})
    root = base / "data" / "spider2-dbt"
    shutil.move(str(built), root)
    store = base / "gold-store"
    store.mkdir()
    shutil.move(str(root / "evaluation_suite"), store / "evaluation_suite")
    (root / "evaluation_suite").symlink_to(store / "evaluation_suite")
    zip_file = base / "data" / "dbt_gold.zip"
    zip_file.write_text(ZIP_MARKER)
    old = base / "old-runs" / "r1" / "t1"
    old.mkdir(parents=True)
    (old / "result.json").write_text(json.dumps({"diagnostic": OLD_RUN_MARKER}))
    known.remember(known.Kind.RUNS_FOLDER, old.parent.parent)  # an earlier run used it

    real_eval = store / "evaluation_suite" / "gold" / "spider2_eval.jsonl"
    real_gold = store / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    before = digest([real_eval, real_gold])
    script = "\n".join([
        f"echo '== eval'; cat {real_eval} {root}/evaluation_suite/gold/spider2_eval.jsonl",
        f"echo '== gold'; head -c 16 {real_gold} | od -c | head -2",
        f"echo '== zip'; cat {zip_file}",
        f"echo '== old run'; cat {old}/result.json",
        f"echo '== ls'; ls -A {base} {base}/data {store} {base}/old-runs",
        f"echo '== find'; find {base} 2>/dev/null",
        f"echo '== write'; echo x >> {real_eval} && echo WROTE",
        "echo '== end'",
    ])
    with FakeAnthropic({"t1": [reply(tool("Bash", command=script)), reply("done")]},
                       route=lambda body: "t1") as fake:
        outcome = sandboxed_run(fake, root, tmp_path, monkeypatch, "real-path", ["t1"],
                                jobs=1, retries=0)
        seen = "\n".join(text for r in fake.conversation_requests("t1")
                         for text in r.tool_results().values())
    assert "== end" in seen, seen  # the script ran to its end
    for secret in ("condition_tabs", ZIP_MARKER, OLD_RUN_MARKER, "D   U   C   K", "WROTE"):
        assert secret not in seen, (secret, seen)
    assert digest([real_eval, real_gold]) == before
    result = json.loads((outcome.folder.root / "t1" / "result.json").read_text())
    # scored as usual: the untouched start database lacks the graded table
    assert result["status"] == "failed" and result.get("error") is None, result
    assert result["tables_total"] == 1

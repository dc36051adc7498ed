"""Under ``--jobs 2`` in namespace mode an agent sees nothing of the other task (issue 33):
no other workspace, gateway or database-tools folder, nothing named ``spider2local-*`` that is
not its own, wherever it looks (its /tmp, its temp folder's parent, a search of the whole
tree)."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import pytest

from spider2local.sandbox.probe import probe
from tests.cli.test_run_command import cli, results

LOOK = ("sleep 6; echo \"== tmp $(ls -A /tmp | tr '\\n' ' ')\"; "
        "echo \"== parent $(ls -A \"$TMPDIR/../..\" | tr '\\n' ' ')\"; "
        "echo \"== found $(find / -xdev -maxdepth 5 -name 'spider2local-*' 2>/dev/null "
        "| tr '\\n' ' ')\"; "
        "echo \"== sockets $(find / -xdev -maxdepth 5 -type s 2>/dev/null | tr '\\n' ' ')\"")


@pytest.mark.slow
@pytest.mark.system_wide("searches")  # its find / sees names under /opt, /usr/local
@pytest.mark.skipif(not sys.platform.startswith("linux") or not probe().ok,
                    reason=f"no namespace sandbox here: {probe().reason}")
def test_two_agents_at_once_see_nothing_of_each_other(tmp_path: Path) -> None:
    proc = cli("--dataset", "sample", "run", "gym001", "fleet001", "--agent", "command",
               "--agent-command", LOOK, "--isolation", "namespace", "--jobs", "2",
               "--retries", "0", "--runs-dir", "runs", "--run-id", "t", cwd=tmp_path,
               env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "runs" / "t"
    found = results(run_dir)
    spans = [(dt.datetime.fromisoformat(str(r["started_at"])),
              dt.datetime.fromisoformat(str(r["finished_at"]))) for r in found.values()]
    assert max(s for s, _ in spans) < min(e for _, e in spans)  # they did run at once
    seen = {tid: (run_dir / tid / "agent.stdout").read_text() for tid in found}
    for tid, text in seen.items():
        other = next(t for t in seen if t != tid)
        names = [n for line in text.splitlines() if line.startswith("== ")
                 for n in line.split()[2:]]
        assert names, text
        assert not [n for n in names if other in n], (tid, text)
        assert not [n for n in names if str(tmp_path) in n], (tid, text)  # nor the runs folder
        ours = {Path(n).name for n in names if "spider2local-" in n}
        gateways = {n for n in ours if n.startswith("spider2local-tmp-gateway-")}
        assert len(gateways) == 1, (tid, text)  # its own gateway's folder, no other
        assert all(tid in n or n.startswith(("spider2local-tmp-gateway-",
                                             "spider2local-tmp-mcp-")) for n in ours), text
        mcps = {n for n in ours if n.startswith("spider2local-tmp-mcp-")}
        assert len(mcps) <= 1, (tid, text)
    folders = [{Path(n).name for n in t.split() if "spider2local-tmp-" in n}
               for t in seen.values()]
    assert not folders[0] & folders[1]  # each saw its own, not a shared one

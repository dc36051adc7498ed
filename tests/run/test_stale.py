"""The workspaces a killed run left (spider2local/run/stale.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spider2local.core.layout import WORKSPACE_PREFIX, WORKSPACE_RECORD
from spider2local.run.stale import remove_stale_workspaces
from tests.helpers import tiny_disk_prefix

_REMOVE = """
import logging, sys
from pathlib import Path
from spider2local.run.stale import remove_stale_workspaces
logging.basicConfig(level="WARNING", format="%(message)s")
print(repr([str(p) for p in remove_stale_workspaces(Path(sys.argv[1]))]))
"""


def _killed_runs_workspace(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A workspace and the trial folder that records it, as a SIGKILLed runner leaves them."""
    root = tmp_path / f"{WORKSPACE_PREFIX}{name}"
    (root / "project" / "models").mkdir(parents=True)
    (root / "project" / "models" / "orders.sql").write_text("select 1 as id\n")
    task_dir = tmp_path / "runs" / "r" / "t1"
    task_dir.mkdir(parents=True)
    (task_dir / WORKSPACE_RECORD).write_text(json.dumps({"root": str(root)}))
    return root, task_dir


@pytest.mark.process
@pytest.mark.parametrize(("name", "shown"), [
    ("t1-0123abcd", "t1-0123abcd"),
    # the record is a run folder's, untrusted: a terminal escape in the name is shown escaped
    ("t1-\x1b]0;pwned\x07\x1b[2J", "t1-\\x1b]0;pwned\\x07\\x1b[2J"),
])
def test_a_workspace_that_cannot_be_removed_is_named_and_the_next_command_removes_it(
        tmp_path: Path, name: str, shown: str) -> None:
    """A mount inside the workspace (the child's own tmpfs, as a busy mount or ``chattr +i``
    would be) makes its removal fail: said in one warning naming the folder, where it used to
    be skipped without a word. Once the mount is gone, the same call removes it."""
    root, task_dir = _killed_runs_workspace(tmp_path, name)
    busy = tiny_disk_prefix(root / "busy", "1m")
    done = subprocess.run([*busy, sys.executable, "-c", _REMOVE, str(task_dir)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
    (warning,) = done.stderr.strip().splitlines()
    assert warning.startswith(f"{root.parent}/{WORKSPACE_PREFIX}{shown}: workspace of an "
                              "interrupted run not removed (")
    assert "\x1b" not in warning and "\x07" not in warning
    assert warning.endswith("delete it by hand") and "busy" in warning.lower(), warning
    assert root.is_dir()
    # the tmpfs went with the child's namespace: nothing is in the way any more
    assert remove_stale_workspaces(task_dir) == [root]
    assert not root.exists()

"""Workspaces left behind by a run that died without cleaning up (SIGKILL, OOM, power loss).

The runner removes each workspace when its task ends, shielded from cancellation; only a kill
it cannot catch leaves one behind, with whatever was running inside it (a background dbt still
locking the database, a Claude CLI). The task's folder in the run folder names that workspace
(``workspace.json``, and each ``attempt`` line of ``transcript.jsonl``), and nothing else does:
so before that folder is cleared for a re-run, its workspaces are reaped and deleted.
"""

from __future__ import annotations

import json
from pathlib import Path

from spider2local.proc.reap import reap
from spider2local.run.layout import TRANSCRIPT, WORKSPACE_PREFIX, WORKSPACE_RECORD
from spider2local.workspace.copy import remove_tree


def recorded_workspaces(task_dir: Path) -> list[Path]:
    """Workspace roots named in ``task_dir`` (unreadable or malformed records are ignored)."""
    roots: list[str] = []
    try:
        summary = json.loads((task_dir / WORKSPACE_RECORD).read_text(encoding="utf-8"))
        roots.append(summary["root"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        lines = (task_dir / TRANSCRIPT).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            entry = json.loads(line)
            if entry.get("kind") == "attempt":
                roots.append(entry["data"]["workspace"])
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return [Path(r) for r in dict.fromkeys(roots) if isinstance(r, str) and Path(r).is_absolute()]


def remove_stale_workspaces(task_dir: Path) -> list[Path]:
    """Kill the processes working in each recorded workspace and delete it; returns those
    removed. Only real folders whose name starts with ``spider2local-`` are touched."""
    removed = []
    for root in recorded_workspaces(task_dir):
        if not root.name.startswith(WORKSPACE_PREFIX) or root.is_symlink() or not root.is_dir():
            continue
        reap(root)
        try:
            remove_tree(root)
        except OSError:
            continue
        removed.append(root)
    return removed

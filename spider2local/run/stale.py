"""Workspaces left behind by a run that died without cleaning up (SIGKILL, OOM, power loss).

The runner removes each workspace when its task ends, shielded from cancellation; only a kill
it cannot catch leaves one behind, with whatever was running inside it (a background dbt still
locking the database, a Claude CLI). The task's folder in the run folder names that workspace
(``workspace.json``, and each ``attempt`` line of ``transcript.jsonl``), and nothing else does:
so before that folder is cleared for a re-run, its workspaces are reaped and deleted.

And not only then: :func:`recover_run` does it for every unfinished task as soon as any command
takes the run's lock (``run`` resuming it, ``score RUN_DIR``), so a dbt left running by a
killed runner does not wait for a resume that may never come, nor for that task to be selected
again; it also removes the /dev/shm files the killed processes left (:mod:`..proc.shm`), the
temporary folders they owned (the sandbox's, snapshots, ``shell``'s, named by their owner:
:mod:`..proc.tempdirs`) and the temporary files of atomic writes a kill cut short.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from spider2local.core.layout import (
    HISTORY,
    RESULT,
    TRANSCRIPT,
    TRIALS,
    WORKSPACE_PREFIX,
    WORKSPACE_RECORD,
)
from spider2local.core.printable import printable
from spider2local.proc.reap import reap
from spider2local.proc.shm import remove_leftovers
from spider2local.proc.tempdirs import orphans, remove_orphans
from spider2local.workspace.copy import remove_tree

log = logging.getLogger(__name__)


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
    removed. Only real folders whose name starts with ``spider2local-`` are touched.

    One that cannot be deleted (a mount inside it, ``chattr +i``, a disk gone read-only) is
    said as a warning naming it, and the caller goes on. Its record stays where it was, for
    the next command to try again, unless the caller is a re-run: that empties the trial's
    folder, and with it the only record of the workspace. It used to be skipped without a
    word, so a re-run left a copy of the task (its databases too: hundreds of MB for some
    Spider2-DBT tasks) in the temp folder for good."""
    removed = []
    for root in recorded_workspaces(task_dir):
        if not root.name.startswith(WORKSPACE_PREFIX) or root.is_symlink() or not root.is_dir():
            continue
        reap(root)
        try:
            remove_tree(root)
        except OSError as exc:
            # the path is a run folder's record (untrusted): its controls shown escaped
            log.warning("%s: workspace of an interrupted run not removed (%s); delete it by "
                        "hand", printable(str(root)), exc.strerror or exc)
            continue
        removed.append(root)
    return removed


def _trial_dirs(run_root: Path) -> list[Path]:
    """Every trial folder of the run: ``<task>/`` and ``_trials/<k>/<task>/`` (links left out;
    the history holds no live workspace: only trials that ended are moved there)."""
    def dirs(parent: Path) -> list[Path]:
        return sorted(p for p in parent.iterdir() if p.is_dir() and not p.is_symlink())

    found = [p for p in dirs(run_root) if p.name not in (TRIALS, HISTORY)]
    trials = run_root / TRIALS
    if trials.is_dir() and not trials.is_symlink():
        found += [task for number in dirs(trials) for task in dirs(number)]
    return found


def recover_run(run_root: Path) -> list[Path]:
    """Reap and remove the workspaces of every task of the run without a result (the ones a
    killed runner was working on), then the shared-memory files killed processes left.

    Only called with the run's lock held (:func:`spider2local.run.lock.run_lock`): then no
    live invocation owns those workspaces. A finished task's workspace is left alone (it was
    removed before its result was written, or kept on purpose with ``--keep``).
    """
    removed: list[Path] = []
    try:
        task_dirs = _trial_dirs(run_root)
    except OSError:
        task_dirs = []
    for task_dir in task_dirs:
        if not (task_dir / RESULT).exists():
            removed += remove_stale_workspaces(task_dir)
    for folder in (run_root, *task_dirs):
        removed += remove_partial_writes(folder)
    for folder in orphans():  # `shell`'s scratch folder records its workspace as a run does
        removed += [ws for sub in _subfolders(folder) for ws in remove_stale_workspaces(sub)]
    removed += remove_orphans()
    remove_leftovers()
    return removed


def _subfolders(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


_PARTIAL = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")
"""What :func:`spider2local.core.results.write_text_atomic` names its temporary file
(``.run.json.k3j2_x.tmp``): one left only by a kill in the middle of a write."""


def remove_partial_writes(folder: Path) -> list[Path]:
    """Delete the temporary files of atomic writes a killed invocation left in ``folder``
    (run.json's, a result.json's, a merge's half-copied result). Only under the run's lock,
    when no live writer can own them; plain files only."""
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        partial = _PARTIAL.match(entry.name) or entry.name == f".{RESULT}.merge"
        if partial and entry.is_file() and not entry.is_symlink():
            try:
                entry.unlink()
            except OSError:
                continue
            removed.append(entry)
    return removed

"""Names that come from data and become folder names: one rule, and one way to join them.

Task ids (from spider2-dbt.jsonl, spider2_eval.jsonl and the suite's ``[tasks.<id>]`` keys) and
run ids become folders in the dataset, the run folder and the workspaces. A task id of
``../victim`` once made ``run`` empty and delete a folder outside the run folder, and exit 0.
Every stage builds such paths, so the rule lives here, below all of them: :func:`name_problem`
says whether a name is a plain folder name, and :func:`child` joins one to its parent and checks
that the result stays inside it (a symlink in the parent that leads elsewhere is refused too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from pathlib import Path

from spider2local.exceptions import UserError

PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""Letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit, at most 128
characters: every real Spider2-DBT id, and nothing a shell or a file system reads specially."""
NAME_FIX = "use letters, digits, '.', '_' and '-' only, starting with a letter or digit"


class UnsafePath(UserError):
    """A name from data would make a path outside the folder it belongs in."""


def is_within(path: Path, root: Path) -> bool:
    """``path`` is ``root`` or lies under it, compared by name (no symlink is followed: callers
    pass real paths where links matter). The one containment test; by string because
    ``root in path.parents`` builds every parent as a Path, and the sandbox plans run it over
    hundreds of hidden paths times every bound folder (2.6 s per reader sandbox, measured)."""
    p, r = str(path), str(root)
    return p == r or p.startswith(r if r.endswith("/") else r + "/")


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a folder name of ours (one phrase), or ``None`` when it can."""
    if not isinstance(name, str) or not name:
        return "is empty or not a string"
    if not PLAIN_NAME.fullmatch(name) or ".." in name:
        return f"{name!r} is not a plain folder name"
    return None


def child(parent: Path, name: str) -> Path:
    """``parent / name``, checked: ``name`` is a plain name and the path, symlinks followed,
    stays inside ``parent``. Raises :class:`UnsafePath` otherwise (never deletes or creates)."""
    problem = name_problem(name)
    if problem is not None:
        raise UnsafePath(f"id {problem}", path=parent, fix=NAME_FIX)
    path = parent / name
    try:
        inside = path.resolve().is_relative_to(parent.resolve())
    except (OSError, RuntimeError):  # unreadable, or a symlink loop
        inside = False
    if not inside:
        raise UnsafePath(f"{name} leads outside this folder (a symlink?)", path=parent,
                         fix="remove the link; nothing of ours lives outside its folder")
    return path


def links_outside(root: Path, skip: Collection[str] = ()) -> list[str]:
    """Every symlink under ``root`` that does not resolve inside ``root``, as ``"rel -> target"``
    (sorted; symlinked folders are not entered; ``skip`` names top-level entries left out). The
    rule :func:`spider2local.workspace.copy.copy_tree` enforces, asked up front by the dataset
    loader so such a task is refused before any work starts.

    A task folder is data: a link in it to ``/`` once started copying the root file system into
    a workspace, and links to files elsewhere put them into the workspace and the run artifacts.
    """
    found = []
    base = root.resolve()
    stack = [root]  # iterative: a deep tree must not exhaust the recursion limit
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if folder == root and entry.name in skip:
                continue
            path = Path(entry.path)
            if entry.is_symlink():
                if (target := _outside(path, base)) is not None:
                    found.append(f"{path.relative_to(root).as_posix()} -> {target}")
            elif entry.is_dir(follow_symlinks=False):
                stack.append(path)
    return sorted(found)


def _outside(link: Path, base: Path) -> str | None:
    """Where ``link`` leads when that is outside ``base`` (or a loop), else ``None``."""
    try:
        real = link.resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        return "a symlink loop"
    return None if real.is_relative_to(base) else str(link.readlink())

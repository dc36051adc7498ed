"""A workspace a person can walk into: its marker and its activation script.

A kept workspace (``run --keep``, ``shell --keep``) was a clock trap: ``dbt run`` typed in it ran
on today's date, and the score then differed with no word about the date. So every prepared
workspace gets:

* a marker, :data:`MARKER` in its root (outside the project): the task, its fake date, the
  project folder's name and whether the workspace was kept. ``shell --workspace PATH`` and
  ``shell RUN TASK`` open only a folder holding a valid one (:func:`open_workspace`): a path
  from a command line or a run folder is untrusted, and ``/`` or a home folder must never be
  taken for a workspace.
* an activation script, ``<project>/.spider2local/activate`` (POSIX sh, to be sourced, as a
  venv's ``bin/activate``): the dbt shim first on PATH, the task's clock variables exactly as
  the runner's dbt gets them, the user's own ``DBT_*`` variables set aside (the runner's dbt
  never sees them: :data:`spider2local.workspace.prepare.PASS_ENV` is an allow-list), the
  prompt marked, and ``deactivate`` to undo it all.

Only :data:`ACTIVATE_VARS` of the workspace environment go into the script: an allow-list of
settings the dbt shim reads, none of them secret (no API key is ever in a workspace
environment, and none could reach the script even if one were).

Both files are inside the agent's reach while it works (the whole workspace root is writable to
it), so when a workspace is kept they are written again by the runner after the agent's
processes are gone (:func:`mark_kept`): a person sources what spider2local wrote, never what the
agent left. ``shell`` never sources the script at all; it builds the environment itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spider2local.clock.faketime import (
    FAKE_DATE_ENV,
    LIBRARY_ENV,
    REAL_DBT_ENV,
    RUNS_ENV,
    TELEMETRY_ENV,
)
from spider2local.core.layout import WORKSPACE_PREFIX
from spider2local.exceptions import UserError
from spider2local.safepath import name_problem

CONTEXT_DIR = ".spider2local"
"""Inside the project: scan.json and snapshot.json for the agent (dbt ignores the folder), and
the activation script. Named here, below :mod:`.prepare`, which uses it too."""
MARKER = ".spider2local-workspace.json"
"""In the workspace root: what makes a folder a spider2local workspace (see the module doc)."""
MARKER_SCHEMA = 1
ACTIVATE = "activate"
"""In the project's ``.spider2local/`` folder: the activation script."""
ACTIVATE_VARS = (FAKE_DATE_ENV, LIBRARY_ENV, REAL_DBT_ENV, RUNS_ENV, *TELEMETRY_ENV)
"""What the script exports, when the workspace environment has it: the shim's settings and the
telemetry switches. The warm dbt server's socket is left out: the server ends with its run."""
CLOCK_VARS = ("FAKETIME", "FAKETIME_DONT_FAKE_MONOTONIC", "FAKETIME_FORCE_MONOTONIC_FIX",
              "FAKETIME_DONT_RESET", "FAKETIME_NO_CACHE", "FAKETIME_SHARED",
              "DONT_FAKE_MONOTONIC")
"""A preload inherited by the user's shell: set aside while active, as the runner strips them."""
MAX_MARKER_BYTES = 4096
WORKSPACE_FIX = "pass the folder that `run --keep` or `shell --keep` printed"


def prompt_label(task_id: str, date: dt.date) -> str:
    """``(spider2local gym001 2024-08-27)``: where you are and which day dbt sees."""
    return f"(spider2local {task_id} {date.isoformat()})"


@dataclass(frozen=True)
class KeptWorkspace:
    """A workspace found on disk through its marker (:func:`open_workspace`)."""

    root: Path
    project_dir: Path
    task_id: str
    date: dt.date
    kept: bool
    """Marked kept by the runner (or ``shell --keep``) once its processes were gone; an
    unkept workspace belongs to a live run (or to a killed one, which the next command removes)."""


# -- writing ----------------------------------------------------------------------------------
def write_marker(root: Path, *, task_id: str, date: dt.date, project: str,
                 kept: bool = False) -> Path:
    """Write (or rewrite) the marker of the workspace at ``root``."""
    data = {"schema": MARKER_SCHEMA, "task": task_id, "date": date.isoformat(),
            "project": project, "kept": kept}
    path = root / MARKER
    _write_fresh(path, json.dumps(data, indent=2) + "\n", mode=0o644)
    return path


def activation_script(env: Mapping[str, str], *, task_id: str, date: dt.date,
                      shim_dir: Path) -> str:
    """The text of ``.spider2local/activate`` for a workspace whose environment is ``env``.

    Every value is single-quoted (paths may hold anything); the names are fixed here. What the
    script saves it restores on ``deactivate``, set or unset as it was (``${X+x}`` tells them
    apart); sourcing it twice deactivates the first time before activating again.
    """
    exports = {name: env[name] for name in ACTIVATE_VARS if name in env}
    q = shlex.quote
    label = prompt_label(task_id, date)
    notice = f"spider2local: dbt here runs on {date.isoformat()} ({task_id}); deactivate to leave"
    touched = (*exports, *CLOCK_VARS, "LD_PRELOAD")
    lines = [
        "# spider2local: the environment of the runner's dbt for this workspace.",
        f"# Task {task_id}, fake date {date.isoformat()}: every dbt started here sees that",
        "# day (the shim first on PATH preloads libfaketime into dbt alone; the shell keeps",
        "# the real clock). Use it with `. .spider2local/activate` (or `source` in bash/zsh);",
        "# `deactivate` undoes it. Written by spider2local; sourcing it runs it.",
        "",
        '[ -n "${_SPIDER2LOCAL_ACTIVE:-}" ] && deactivate',
        "_SPIDER2LOCAL_ACTIVE=1",
        "_spider2local_saved() {",
        '    eval "[ -n \\"\\${_spider2local_had_$1+x}\\" ]"',
        "}",
        "_spider2local_save() {  # once per name: the value from before activation",
        '    _spider2local_saved "$1" && return 0',
        '    eval "_spider2local_had_$1=\\${$1+x}; _spider2local_old_$1=\\${$1-}"',
        "}",
        "_spider2local_restore() {  # NAME [export]: set (exported) or unset, as it was",
        '    _spider2local_saved "$1" || return 0',
        '    if eval "[ -n \\"\\${_spider2local_had_$1}\\" ]"; then',
        '        eval "$1=\\${_spider2local_old_$1}"',
        '        [ -z "${2:-}" ] || export "$1"',
        "    else",
        '        unset "$1"',
        "    fi",
        '    unset "_spider2local_had_$1" "_spider2local_old_$1"',
        "}",
        "_spider2local_save PATH",
        "_spider2local_save PS1",
        # The user's own DBT_* settings (a profiles folder, a target) would send this dbt
        # elsewhere: the runner's dbt never sees them. Names only come from `env`'s output,
        # filtered to [A-Za-z0-9_], so eval never sees anything but a plain name.
        "_SPIDER2LOCAL_DBT_VARS=$(env | sed -n 's/^\\(DBT_[A-Za-z0-9_]*\\)=.*/\\1/p' "
        "| sort -u | tr '\\n' ' ')",
        # eval: the parser splits the list in every shell (zsh does not split "$VAR" itself)
        'eval "for _spider2local_v in $_SPIDER2LOCAL_DBT_VARS; do '
        '_spider2local_save \\$_spider2local_v; unset \\$_spider2local_v; done"',
        *(f"_spider2local_save {name}" for name in touched),
        *(f"unset {name}" for name in CLOCK_VARS),
        # Only a libfaketime preload is taken out; the shim removes it from dbt's unfaked calls.
        'case "${LD_PRELOAD:-}" in *libfaketime*) unset LD_PRELOAD ;; esac',
        *(f"export {name}={q(value)}" for name, value in exports.items()),
        f"PATH={q(str(shim_dir))}:$PATH",
        "export PATH",
        f'PS1={q(label + " ")}"${{PS1-}}"',
        "deactivate() {",
        "    _spider2local_restore PATH",
        "    _spider2local_restore PS1",
        '    eval "for _spider2local_v in $_SPIDER2LOCAL_DBT_VARS ' + " ".join(touched)
        + '; do _spider2local_restore \\$_spider2local_v export; done"',
        "    unset _SPIDER2LOCAL_ACTIVE _SPIDER2LOCAL_DBT_VARS _spider2local_v",
        "    unset -f _spider2local_saved _spider2local_save _spider2local_restore deactivate",
        "    hash -r 2>/dev/null || true",
        "}",
        "hash -r 2>/dev/null || true",
        f"echo {q(notice)} >&2",
        "",
    ]
    return "\n".join(lines)


def write_activation(context: Path, env: Mapping[str, str], *, task_id: str, date: dt.date,
                     shim_dir: Path) -> Path:
    """Write ``context/activate`` (``context``: the project's ``.spider2local`` folder)."""
    path = context / ACTIVATE
    _write_fresh(path, activation_script(env, task_id=task_id, date=date, shim_dir=shim_dir),
                 mode=0o644)
    return path


def mark_kept(root: Path, project: Path, env: Mapping[str, str], *, task_id: str,
              date: dt.date, shim_dir: Path) -> Path:
    """Write the marker (kept) and the activation script again, as spider2local's own, once
    the workspace's processes are gone; returns the script's path.

    The agent could have replaced either (a symlink to a file outside, a hard link, a script
    of its own), so each is unlinked and created anew (``O_EXCL|O_NOFOLLOW``: never written
    through a link), and a ``.spider2local`` that is not a plain folder is replaced by one.
    """
    write_marker(root, task_id=task_id, date=date, project=project.name, kept=True)
    context = project / CONTEXT_DIR
    _plain_folder(context)
    return write_activation(context, env, task_id=task_id, date=date, shim_dir=shim_dir)


def _plain_folder(path: Path) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        path.mkdir()
        return
    if not stat.S_ISDIR(info.st_mode):  # a symlink (to anywhere) or a file: ours again
        path.unlink()
        path.mkdir()


def _write_fresh(path: Path, text: str, *, mode: int) -> None:
    """Create ``path`` anew with ``text``: whatever was there (a link, a hard link to a file
    elsewhere) is unlinked first, never written through."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


# -- reading ----------------------------------------------------------------------------------
def open_workspace(path: Path) -> KeptWorkspace:
    """The workspace at ``path`` (its root, or its project folder), checked through its marker.

    Raises :class:`UserError` (one line, exit 2) for anything else: a missing folder, a
    symlink, a folder not named like a workspace, no marker or a malformed one, a project
    folder that is missing or leads elsewhere.
    """
    given = Path(path)
    if not given.is_dir():
        raise UserError("no such folder", path=given, fix=WORKSPACE_FIX)
    for root in (given, given.parent):
        if (root / MARKER).exists() or (root / MARKER).is_symlink():
            break
    else:
        raise UserError(f"not a spider2local workspace (no {MARKER})", path=given,
                        fix=WORKSPACE_FIX)
    if root.is_symlink() or not root.name.startswith(WORKSPACE_PREFIX):
        raise UserError(f"not a spider2local workspace (a workspace folder is a plain folder "
                        f"named {WORKSPACE_PREFIX}<task>-...)", path=root, fix=WORKSPACE_FIX)
    root = root.resolve()
    marker = _read_marker(root / MARKER)
    project = root / marker.project
    if project.is_symlink() or not project.is_dir() \
            or project.resolve().parent != root:
        raise UserError("the workspace's project folder is missing or leads elsewhere",
                        path=project, fix=WORKSPACE_FIX)
    if given.resolve() not in (root, project.resolve()):
        raise UserError("not a spider2local workspace (its root or project folder)",
                        path=given, fix=WORKSPACE_FIX)
    return KeptWorkspace(root=root, project_dir=project, task_id=marker.task,
                         date=marker.date, kept=marker.kept)


@dataclass(frozen=True)
class _Marker:
    task: str
    project: str
    date: dt.date
    kept: bool


def _read_marker(path: Path) -> _Marker:
    def bad(problem: str) -> UserError:
        return UserError(f"not a valid spider2local workspace marker: {problem}", path=path,
                         fix=WORKSPACE_FIX)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise bad("not a plain file")
            raw = handle.read(MAX_MARKER_BYTES + 1)
    except OSError as exc:
        raise bad(exc.strerror or str(exc)) from None
    if len(raw) > MAX_MARKER_BYTES:
        raise bad("too large")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise bad("not JSON") from None
    if not isinstance(data, dict) or data.get("schema") != MARKER_SCHEMA:
        raise bad(f"not schema {MARKER_SCHEMA}")
    task, project, kept = data.get("task"), data.get("project"), data.get("kept")
    for what, value in (("task", task), ("project", project)):
        problem = name_problem(value)
        if problem is not None:
            raise bad(f"{what} {problem}")
    assert isinstance(task, str) and isinstance(project, str)  # name_problem checked both
    if not isinstance(kept, bool):
        raise bad("kept is not true or false")
    try:
        date = dt.date.fromisoformat(str(data.get("date")))
    except ValueError:
        raise bad("date is not YYYY-MM-DD") from None
    return _Marker(task=task, project=project, date=date, kept=kept)

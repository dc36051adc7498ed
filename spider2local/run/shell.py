"""``spider2local shell``: the agent's workspace, by hand.

Debugging a task means seeing exactly what the agent sees: the same fresh copy, the same
environment (the dbt shim first on PATH, the task's fake date for every dbt), the same scan and
snapshot files. ``shell TASK`` prepares the workspace with the runner's own code, then starts
``$SHELL`` in the project folder; ``shell --workspace PATH`` and ``shell RUN TASK`` open one a
run (or ``shell --keep``) kept instead, found through its marker
(:mod:`spider2local.workspace.activate`): paths from a command line or a run folder are
untrusted. ``--command`` runs one command instead and returns its exit code, which is how tests
(and scripts) use it. This is synchronous code on purpose: the shell owns the terminal, and
nothing else runs meanwhile.

Inside, the prompt says where you are (``(spider2local gym001 2024-08-27)``) and
``spider2local`` is on PATH (a wrapper running this very interpreter, in a private folder); on
exit one line says whether the workspace was deleted or kept.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from spider2local.core.layout import RESULT, WORKSPACE_RECORD
from spider2local.dataset.task import TaskSpec
from spider2local.exceptions import UserError
from spider2local.proc.reap import reap
from spider2local.proc.tempdirs import make_owned_dir
from spider2local.run.folder import RunFolder
from spider2local.run.settings import (
    RunSettings,
    resolve_capabilities,
    suite_skills,
    task_skills,
)
from spider2local.suite.model import RunDefaults
from spider2local.workspace import environment as environment_mod
from spider2local.workspace import prepare as ws_mod
from spider2local.workspace.activate import (
    KeptWorkspace,
    open_workspace,
    prompt_label,
)

WRAPPER_DIR = "bin"
"""In the shell's scratch folder: the ``spider2local`` wrapper, first on PATH after the shim."""
HOST_LOCATIONS = ("HOME", "TMPDIR", "XDG_CACHE_HOME", "SPIDER2LOCAL_CACHE")
"""What the ``spider2local`` wrapper gives back to the commands it runs: inside the shell HOME
and TMPDIR are the workspace's own, and spider2local's caches (the sample suite built once)
would be looked for there. Locations only, never a credential."""


SHELL_ENV = "SPIDER2LOCAL_SHELL"
"""Set inside ``shell`` to the prompt label: scripts (and prompts of one's own) can tell."""


class ShellError(UserError):
    """The workspace could not be prepared or opened: one line, never a traceback."""


def shell_argv(command: str | None, env: Mapping[str, str]) -> list[str]:
    shell = env.get("SHELL") or os.environ.get("SHELL") or "/bin/sh"
    return [shell, "-c", command] if command is not None else [shell]


def shell_prompt(shell: str, label: str) -> str:
    """PS1 for ``shell``: the workspace's label, then the folder where the shell can say it."""
    name = Path(shell).name
    if name == "bash":
        return f"{label} \\w \\$ "
    if name == "zsh":
        return f"{label} %~ %# "
    return f"{label} $ "


def prompt_setup(argv: list[str], env: dict[str, str], label: str,
                 scratch: Path) -> list[str]:
    """Mark the prompt of an interactive ``argv`` (``env`` is updated); returns the argv.

    PS1 in the environment alone is not enough: an interactive bash reads /etc/bash.bashrc,
    which sets its own. So bash gets ``--rcfile`` (a file setting PS1 alone: HOME is the
    workspace's empty ``.home`` anyway), zsh a ``ZDOTDIR`` with such a ``.zshrc``, and any
    other POSIX shell ``ENV``, which an interactive sh reads."""
    prompt = shell_prompt(argv[0], label)
    env["PS1"] = prompt
    rc = scratch / "shellrc"
    rc.write_text(f"PS1={shlex.quote(prompt)}\n", encoding="utf-8")
    name = Path(argv[0]).name
    if len(argv) > 1:  # -c COMMAND: no prompt
        return argv
    if name == "bash":
        return [argv[0], "--rcfile", str(rc)]
    if name == "zsh":
        (scratch / ".zshrc").write_text(f"PROMPT={shlex.quote(prompt)}\n", encoding="utf-8")
        env["ZDOTDIR"] = str(scratch)
    else:
        env["ENV"] = str(rc)
    return argv


def shell_skills(task: TaskSpec, defaults: RunDefaults, agent: str) -> tuple[str, ...]:
    """Exactly the skills ``agent`` gets for ``task`` in a run: the suite's, plus the task's
    own, minus its skip_skills (the runner's own rule, so the two cannot drift apart)."""
    caps = resolve_capabilities(agent)
    settings = RunSettings.from_defaults(defaults, suite_skills(defaults, caps), agent=agent,
                                         capabilities=caps)
    return task_skills(task, settings)


def write_wrapper(folder: Path, host: Mapping[str, str], suite: Path | None = None) -> Path:
    """``folder/spider2local``: this interpreter's spider2local, with the host's locations
    (:data:`HOST_LOCATIONS`) and, when given, the suite the shell was opened from (inside,
    the working folder is the workspace, where no tasks.toml is found)."""
    folder.mkdir(exist_ok=True)
    q = shlex.quote
    lines = ["#!/bin/sh", "# spider2local shell: this shell's spider2local (removed on exit)"]
    for name in HOST_LOCATIONS:
        lines.append(f"export {name}={q(host[name])}" if host.get(name) else f"unset {name}")
    if suite is not None:
        lines.append(f'[ -n "${{SPIDER2LOCAL_SUITE:-}}" ] || export SPIDER2LOCAL_SUITE='
                     f"{q(str(suite.resolve()))}")
    lines.append(f'exec {q(sys.executable)} -m spider2local "$@"')
    path = folder / "spider2local"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def _run(command: str | None, cwd: Path, env: Mapping[str, str], label: str,
         scratch: Path, suite: Path | None) -> int:
    """Run the shell (or ``command``) in ``cwd`` with ``env`` plus the ``spider2local``
    wrapper (after the shim on PATH) and the marked prompt; returns its exit code."""
    shell_env = dict(env)
    bindir = write_wrapper(scratch / WRAPPER_DIR, os.environ, suite).parent
    path = shell_env.get("PATH", os.defpath).split(os.pathsep)
    shell_env["PATH"] = os.pathsep.join([*path[:1], str(bindir), *path[1:]])
    shell_env[SHELL_ENV] = label
    argv = prompt_setup(shell_argv(command, shell_env), shell_env, label, scratch)
    code = subprocess.run(argv, cwd=cwd, env=shell_env, check=False).returncode
    return 128 - code if code < 0 else code


def _intro(out: TextIO, project: Path, date: dt.date, env: Mapping[str, str]) -> None:
    out.write(f"workspace: {project}\nfake date for dbt: {date} "
              f"(dbt on PATH is the shim in {env['PATH'].split(os.pathsep)[0]})\n")
    out.flush()


def open_shell(task: TaskSpec, *, skills: Sequence[str] = (), skills_dir: str | None = None,
               command: str | None = None, keep: bool = False, out: TextIO | None = None,
               suite: Path | None = None) -> int:
    """Prepare ``task``'s workspace, run the shell (or ``command``) in it, return its exit
    code (128 + N when killed by signal N). The workspace is removed afterwards unless
    ``keep`` (then marked kept, to be opened again with ``shell --workspace``); processes
    left running inside it are killed either way, and the scratch folder (the run folder of
    this one attempt) is always removed. Raises :class:`ShellError` when preparing fails."""
    out = out if out is not None else sys.stderr
    scratch = make_owned_dir("shell")
    try:
        try:
            ws = ws_mod.prepare_workspace(task, artifacts=scratch / task.id, skills=skills,
                                          skills_dir=skills_dir)
        except UserError:
            raise
        except Exception as exc:  # a reader sandbox failing, a full disk: one line, not a trace
            raise ShellError(f"cannot prepare the workspace of {task.id}: "
                             f"{type(exc).__name__}: {exc}") from exc
        _intro(out, ws.project_dir, task.date, ws.env)
        try:
            return _run(command, ws.project_dir, ws.env, prompt_label(task.id, task.date),
                        scratch, suite)
        finally:
            reap(ws.root)
            if keep:
                try:
                    ws_mod.keep_workspace(ws)
                except OSError as exc:
                    out.write(f"workspace not marked kept: {exc}\n")
                out.write(f"workspace kept: {ws.project_dir} (open it again with "
                          f"`spider2local shell --workspace {shlex.quote(str(ws.root))}`)\n")
            else:
                ws_mod.cleanup_workspace(ws)
                out.write(f"workspace deleted: {ws.root}\n")
            out.flush()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def open_kept(workspace: KeptWorkspace, *, command: str | None = None,
              out: TextIO | None = None, suite: Path | None = None) -> int:
    """Open a kept workspace (:func:`spider2local.workspace.activate.open_workspace` found it):
    the environment is built here, as :func:`spider2local.workspace.prepare.workspace_env`
    builds the agent's, never read from the workspace (the agent wrote there). The workspace
    is not this shell's: it stays, and exit says so. Returns the exit code."""
    out = out if out is not None else sys.stderr
    env = environment_mod.kept_env(workspace.date, workspace.root, workspace.project_dir)
    label = prompt_label(workspace.task_id, workspace.date)
    if not workspace.kept:
        out.write(f"note: {workspace.root} is not marked kept: a run may still be using it "
                  "(it deletes it when its task ends), or a killed one left it\n")
    scratch = make_owned_dir("shell")
    try:
        _intro(out, workspace.project_dir, workspace.date, env)
        try:
            return _run(command, workspace.project_dir, env, label, scratch, suite)
        finally:
            out.write(f"workspace kept: {workspace.project_dir} (remove it with `rm -rf "
                      f"{shlex.quote(str(workspace.root))}`)\n")
            out.flush()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def kept_workspace_of(folder: RunFolder, task_id: str, trial: int = 1) -> KeptWorkspace:
    """The workspace a run kept for ``task_id`` (trial ``trial``), from the run folder's own
    record of it (``<task>/workspace.json``), checked as ``--workspace`` checks a path.

    The task id is checked before it names a folder (:func:`spider2local.safepath.child`);
    the recorded root is data too and must lead to a marked workspace of that task."""
    task_dir = folder.trial_dir(task_id, trial)
    record = task_dir / WORKSPACE_RECORD
    try:
        root = json.loads(record.read_text(encoding="utf-8"))["root"]
        if not isinstance(root, str):
            raise TypeError("root is not a string")
    except FileNotFoundError:
        raise ShellError(f"task {task_id} has no workspace record in run {folder.run_id}",
                         path=record, fix="check the task id (`spider2local report RUN`)"
                         ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ShellError(f"unreadable workspace record ({exc})", path=record,
                         fix="pass the workspace itself with `shell --workspace PATH`") from None
    if not (task_dir / RESULT).is_file():
        raise ShellError(f"task {task_id} of run {folder.run_id} has not finished (running, "
                         "or interrupted: its workspace was not kept)", path=task_dir,
                         fix="wait for the run, or re-run the task with `run --keep`")
    if not Path(root).is_dir():
        raise ShellError(f"the workspace of {task_id} in run {folder.run_id} was not kept "
                         "(or is gone)", path=Path(root),
                         fix=f"re-run it with `spider2local run {task_id} --keep`")
    found = open_workspace(Path(root))
    if found.task_id != task_id:
        raise ShellError(f"the recorded workspace is task {found.task_id}'s, not {task_id}'s",
                         path=record, fix="pass the workspace with `shell --workspace PATH`")
    if not found.kept:
        raise ShellError(f"the workspace of {task_id} in run {folder.run_id} is not marked "
                         "kept", path=found.root,
                         fix=f"re-run it with `spider2local run {task_id} --keep`")
    return found

"""``spider2local shell TASK``: the agent's workspace, by hand.

Debugging a task means seeing exactly what the agent sees: the same fresh copy, the same
environment (the dbt shim first on PATH, the task's fake date for every dbt), the same scan and
snapshot files. This prepares the workspace with the runner's own code, then starts ``$SHELL``
in the project folder. ``--command`` runs one command instead and returns its exit code, which
is how tests (and scripts) use it. This is synchronous code on purpose: the shell owns the
terminal, and nothing else runs meanwhile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import TextIO

from spider2local.dataset.task import TaskSpec
from spider2local.proc.reap import reap
from spider2local.proc.tempdirs import make_owned_dir
from spider2local.run.settings import (
    RunSettings,
    resolve_capabilities,
    suite_skills,
    task_skills,
)
from spider2local.suite.model import RunDefaults
from spider2local.workspace import prepare as ws_mod


def shell_argv(command: str | None, env: dict[str, str]) -> list[str]:
    shell = env.get("SHELL") or os.environ.get("SHELL") or "/bin/sh"
    return [shell, "-c", command] if command is not None else [shell]


def shell_skills(task: TaskSpec, defaults: RunDefaults, agent: str) -> tuple[str, ...]:
    """Exactly the skills ``agent`` gets for ``task`` in a run: the suite's, plus the task's
    own, minus its skip_skills (the runner's own rule, so the two cannot drift apart)."""
    caps = resolve_capabilities(agent)
    settings = RunSettings.from_defaults(defaults, suite_skills(defaults, caps), agent=agent,
                                         capabilities=caps)
    return task_skills(task, settings)


def open_shell(task: TaskSpec, *, skills: Sequence[str] = (), command: str | None = None,
               keep: bool = False, out: TextIO | None = None) -> int:
    """Prepare ``task``'s workspace, run the shell (or ``command``) in it, return its exit
    code (128 + N when killed by signal N). The workspace is removed afterwards unless
    ``keep``; processes left running inside it are killed either way."""
    out = out if out is not None else sys.stderr
    scratch = make_owned_dir("shell")
    ws = ws_mod.prepare_workspace(task, artifacts=scratch / task.id, skills=skills)
    env = dict(ws.env)
    out.write(f"workspace: {ws.project_dir}\nfake date for dbt: {task.date} "
              f"(dbt on PATH is the shim in {env['PATH'].split(os.pathsep)[0]})\n")
    out.flush()
    try:
        code = subprocess.run(shell_argv(command, env), cwd=ws.project_dir, env=env,
                              check=False).returncode
    finally:
        reap(ws.root)
        if keep:
            out.write(f"workspace kept: {ws.root}\n")
        else:
            ws_mod.cleanup_workspace(ws)
            shutil.rmtree(scratch, ignore_errors=True)
    return 128 - code if code < 0 else code

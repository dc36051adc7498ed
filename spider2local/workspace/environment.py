"""The environment every process of an agent gets: an allow-list of the host's variables, the
dbt shim first on PATH with the task's fake date, HOME and TMPDIR inside the workspace."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from spider2local.clock.faketime import RUNS_ENV, Clock, find_library
from spider2local.core.layout import (
    DBT_RUNS,
)
from spider2local.dataset.task import TaskSpec
from spider2local.resources import faketime_dir
from spider2local.sandbox.spec import runtime_env
from spider2local.workspace.activate import CONTEXT_DIR

PASS_ENV = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "VIRTUAL_ENV",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
})
"""The host variables an agent's processes keep (plus every ``LC_*``): search path, locale,
time zone, terminal, and how to reach the network (proxies, CA bundles). Everything else of the
runner's environment (its own settings naming suites, runs and caches, a user's DBT_* paths,
tokens of other services) is not handed down: an allow-list, because a deny-list misses the
variable nobody thought of."""
HOME_DIR = ".home"
TMP_DIR = ".tmp"
"""Inside the workspace root: the agent's HOME and temp folder, so whatever it or its tools
leave there (the Claude CLI's ``claude-<uid>/`` included) goes with the workspace."""
START_DIR = ".start"
"""Inside the workspace root: the read-only copy of the start database (not the agent's)."""


def workspace_env(task: TaskSpec, base: Mapping[str, str], forbidden: Sequence[Path] = (),
                  root: Path | None = None) -> dict[str, str]:
    """The agent's environment: real clock, dbt shim first on PATH, the task's fake date, and
    of ``base`` only the :data:`PASS_ENV` variables (and ``LC_*``) that name no forbidden path.

    With ``root`` (the workspace root), HOME and TMPDIR point inside it.
    """
    return _dated_env(task.date, base, forbidden, root)


def _dated_env(date: dt.date, base: Mapping[str, str], forbidden: Sequence[Path],
               root: Path | None) -> dict[str, str]:
    clean = {k: v for k, v in base.items()
             if (k in PASS_ENV or k.startswith("LC_")) and not any(str(p) in v for p in forbidden)}
    if root is not None:
        clean.update(HOME=str(root / HOME_DIR), TMPDIR=str(root / TMP_DIR), **runtime_env())
    return Clock(date, find_library()).agent_env(clean, faketime_dir())


def kept_env(date: dt.date, root: Path, project: Path) -> dict[str, str]:
    """The environment of a kept workspace, built again as :func:`_fill` built it (never read
    from the workspace, which the agent could write): for ``shell --workspace``."""
    return {**_dated_env(date, os.environ, (), root),
            RUNS_ENV: str(project / CONTEXT_DIR / DBT_RUNS)}

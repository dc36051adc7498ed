"""The Claude agent's plain-Python parts: the credential variables, the CLI environment, process
sweeping and the session's verification state. No SDK import, so these are cheap to import and
test.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.agents.claude import prompts
from spider2local.proc.kill import KILL_GRACE, akill_processes
from spider2local.proc.procfs import carrying_env

CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")
MARKER_ENV = "SPIDER2LOCAL_AGENT_RUN"
"""Set in the CLI's environment and inherited by everything it starts: how the sweep finds a
session's processes (the SDK does not start the CLI in its own process group)."""

QUIET_ENV: Mapping[str, str] = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "ENABLE_TOOL_SEARCH": "false",
}
"""Offline, reproducible sessions: no update checks, telemetry or surveys; and MCP tools listed
directly in the request instead of being deferred behind a tool search (measured)."""

INFRA_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""HTTP statuses of a failing API call that a later retry can fix."""
AGENT_TOOLS = ("Agent", "Task")
"""The subagent tool's name (``Task`` in older CLIs)."""


CLAUDE_PASS_ENV = (*CREDENTIAL_VARS, "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
                   "ANTHROPIC_CUSTOM_HEADERS", "API_TIMEOUT_MS", "CLAUDE_CODE_MAX_RETRIES")
"""The runner's variables the CLI itself needs: credentials and how to reach the API."""


def cli_env(ws_env: Mapping[str, str], config_dir: Path, marker: str) -> dict[str, str]:
    """The CLI's environment: the workspace env (the allow-list of
    :func:`spider2local.workspace.prepare.workspace_env`: shim first on PATH, clock settings,
    HOME and TMPDIR inside the workspace, never LD_PRELOAD), the API settings of
    :data:`CLAUDE_PASS_ENV`, quiet switches, a private config dir and the sweep marker.

    The SDK lays ``options.env`` over our own ``os.environ``; every other variable of ours is
    therefore blanked so its value cannot come back that way (see :func:`blanked`).
    """
    env = dict.fromkeys(os.environ, "")
    env.update({key: os.environ[key] for key in CLAUDE_PASS_ENV if key in os.environ})
    env.update(ws_env)
    env.update(QUIET_ENV)
    env["CLAUDE_CONFIG_DIR"] = str(config_dir)
    if "TMPDIR" in ws_env:
        env["CLAUDE_CODE_TMPDIR"] = ws_env["TMPDIR"]  # its claude-<uid>/ (measured in the CLI)
    env[MARKER_ENV] = marker
    if os.geteuid() == 0:
        env["IS_SANDBOX"] = "1"  # bypassPermissions is refused as root without it (measured)
    return env


def blanked(env: Mapping[str, str]) -> list[str]:
    """The variables :func:`cli_env` blanked: a sandbox launcher unsets them altogether."""
    return sorted(key for key, value in env.items() if value == "" and key in os.environ)


async def sweep(marker: str, grace: float = KILL_GRACE) -> list[int]:
    """Kill every process of the session (those whose environment carries
    ``MARKER_ENV=marker``) with the one kill policy of :mod:`spider2local.proc.kill`; returns
    the pids signalled. Never stopped halfway by a cancellation."""
    result = await akill_processes(functools.partial(carrying_env, MARKER_ENV, marker),
                                   grace=grace)
    return list(result.signalled)


@dataclass
class SessionState:
    """What the session did that the runner-side guarantees depend on."""

    verifier_ran: bool = False
    last_verdict: bool | None = None
    last_report: str = ""
    error: str | None = None
    infrastructure: bool = False
    pending: frozenset[str] = frozenset()
    """tool_use ids of verifier calls whose result has not arrived yet."""

    def on_tool_use(self, tool_id: str, name: str, arguments: Mapping[str, Any]) -> None:
        if name in AGENT_TOOLS and arguments.get("subagent_type") == prompts.VERIFIER:
            self.pending = self.pending | {tool_id}

    def on_tool_result(self, tool_id: str, text: str, is_error: bool) -> None:
        if tool_id not in self.pending:
            return
        self.pending = self.pending - {tool_id}
        if not is_error:
            self.verifier_ran = True
            self.last_report = text
            self.last_verdict = prompts.parse_verdict(text)

    def on_error_result(self, subtype: str, status: int | None, text: str) -> None:
        """An error ResultMessage: classify it; a retry helps only for API-side failures."""
        if subtype == "error_max_turns":
            self.error = "the agent reached its turn limit"
        elif subtype == "error_max_budget_usd":
            self.error = "the agent reached its budget limit"
        else:
            self.infrastructure = status is not None and (status in INFRA_STATUSES
                                                          or status >= 500)
            where = f"API error {status}: " if status else f"{subtype}: "
            self.error = where + (text.strip().splitlines() or ["no details"])[0][:300]

    def on_exception(self, exc: BaseException, turns: int) -> None:
        """The SDK raised. After an error result it raises too (the CLI exits non-zero), with
        less precise text: keep the result's message and classification then. Otherwise a
        session that never finished a turn failed on our side of the API (infrastructure)."""
        if self.error is not None:
            return
        self.error = f"{type(exc).__name__}: {exc}"
        self.infrastructure = turns == 0

    def follow_up(self) -> str | None:
        """The message to send after the agent stopped, or None when the work is verified."""
        if self.error is not None:
            return None
        if not self.verifier_ran:
            return prompts.verify_request()
        if self.last_verdict is False:
            return prompts.fix_request(self.last_report)
        return None

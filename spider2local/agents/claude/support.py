"""The Claude agent's plain-Python parts: the CLI environment and the session's verification
state. No SDK import, so these are cheap to import and
test.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.agents import prompts
from spider2local.gateway.anthropic import CREDENTIAL_VARS, PLACEHOLDER
from spider2local.seal.processes import MARKER_ENV

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

CLI_MAX_RETRIES = 2
"""The CLI's own retries of a failing API call (``CLAUDE_CODE_MAX_RETRIES``; a user's value
wins). Its default retries a 429/5xx/529 about ten times over some 200 s inside the task's
deadline, so an outage scored as a timeout and the runner's retry never applied (measured);
two short retries (about 2 s) ride out a blip and leave a real outage to the runner's policy
(:mod:`spider2local.run.retry`: a fresh attempt with backoff, infrastructure if it persists)."""
BASH_TIMEOUTS: Mapping[str, str] = {
    "BASH_DEFAULT_TIMEOUT_MS": str(prompts.BASH_TIMEOUT_MS),
    "BASH_MAX_TIMEOUT_MS": str(60 * 60_000),
}
"""The CLI's Bash time limits (a user's own values win): 10 minutes unless the model asks for
more, up to an hour (the task's deadline stops everything anyway). The CLI's defaults, 2 and
10 minutes (read in its code), cut a long ``dbt run``: the work is lost and the agent tends to
run it again. A cut dbt is killed with its process group, warm or cold (docs/agents.md)."""
SYNC_SUBAGENTS: Mapping[str, str] = {"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"}
"""Subagents (the verifier) and Bash commands run in the foreground, whatever the model asks
(measured: the Agent tool then returns the report itself). A background verifier's report
comes later as a notification and background sessions have been seen never to end; the
session still reads a background report correctly (see :class:`SessionState`)."""

INFRA_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
"""HTTP statuses of a failing API call that a later retry can fix."""
AGENT_TOOLS = ("Agent", "Task")
"""The subagent tool's name (``Task`` in older CLIs)."""


CLAUDE_PASS_ENV = (*CREDENTIAL_VARS, "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN",
                   "ANTHROPIC_CUSTOM_HEADERS", "API_TIMEOUT_MS", "CLAUDE_CODE_MAX_RETRIES")
"""The runner's variables the CLI itself needs: credentials and how to reach the API (the
credentials and the base URL are then replaced by :func:`through_gateway`)."""
def through_gateway(env: dict[str, str], base_url: str) -> None:
    """Point the CLI's environment at the gateway: its base URL, placeholders for the
    credentials it had (the gateway holds the real ones), no custom headers."""
    env["ANTHROPIC_BASE_URL"] = base_url
    given = [name for name in (*CREDENTIAL_VARS, "ANTHROPIC_AUTH_TOKEN") if env.get(name)]
    for name in given:
        env[name] = PLACEHOLDER
    if not given:  # a replay (``run --replay``) needs none; the CLI refuses to start without
        env["ANTHROPIC_API_KEY"] = PLACEHOLDER
    if "ANTHROPIC_CUSTOM_HEADERS" in env:
        env["ANTHROPIC_CUSTOM_HEADERS"] = ""


def cli_env(ws_env: Mapping[str, str], config_dir: Path, marker: str, *,
            background_tasks: bool = False, sandboxed: bool = False) -> dict[str, str]:
    """The CLI's environment: the workspace env (the allow-list of
    :func:`spider2local.workspace.prepare.workspace_env`: shim first on PATH, clock settings,
    HOME and TMPDIR inside the workspace, never LD_PRELOAD), the API settings of
    :data:`CLAUDE_PASS_ENV`, quiet switches, a private config dir and the sweep marker.

    The SDK lays ``options.env`` over our own ``os.environ``; every other variable of ours is
    therefore blanked so its value cannot come back that way (see :func:`blanked`).
    ``background_tasks`` lets the CLI run subagents in the background (tests of that path).
    ``sandboxed``: the CLI runs in the namespace sandbox, where it is uid 0 of its own user
    namespace whoever runs the runner.
    """
    env = dict.fromkeys(os.environ, "")
    env.update({key: os.environ[key] for key in CLAUDE_PASS_ENV if key in os.environ})
    env.update(ws_env)
    env.update(QUIET_ENV)
    if not background_tasks:
        env.update(SYNC_SUBAGENTS)
    if not env.get("CLAUDE_CODE_MAX_RETRIES"):
        env["CLAUDE_CODE_MAX_RETRIES"] = str(CLI_MAX_RETRIES)
    for name, value in BASH_TIMEOUTS.items():
        env[name] = os.environ.get(name) or value
    env["CLAUDE_CONFIG_DIR"] = str(config_dir)
    if "TMPDIR" in ws_env:
        env["CLAUDE_CODE_TMPDIR"] = ws_env["TMPDIR"]  # its claude-<uid>/ (measured in the CLI)
    env[MARKER_ENV] = marker
    if sandboxed or os.geteuid() == 0:
        # bypassPermissions is refused as root without it (measured); in the sandbox the CLI
        # is root of its namespace, so a user's runs failed there and only there (issue 27)
        env["IS_SANDBOX"] = "1"
    return env


def blanked(env: Mapping[str, str]) -> list[str]:
    """The variables :func:`cli_env` blanked: a sandbox launcher unsets them altogether."""
    return sorted(key for key, value in env.items() if value == "" and key in os.environ)


ASYNC_LAUNCH = "Async agent launched"
"""How the CLI's tool result for a subagent started in the background begins (measured, CLI
2.1.x): an acknowledgement, not the subagent's report."""
API_ERROR_TEXT = "API Error"
"""How the CLI's text for a failed API call begins (its synthetic assistant message and the
result): a 5xx, or a malformed or truncated response it could not recover from."""


@dataclass
class SessionState:
    """What the session did that the runner-side guarantees depend on.

    The verifier's report arrives one of two ways (both measured): run synchronously, as the
    Agent tool's result; run in the background (the CLI's default for the Agent tool), the tool
    result is only "Async agent launched ..." and the report comes later in a task notification
    (``TaskNotificationMessage.summary``), after which the CLI gives the main agent one more
    turn of its own, or folds the notification into a turn still running.
    """

    verifier_ran: bool = False
    last_verdict: bool | None = None
    last_report: str = ""
    error: str | None = None
    infrastructure: bool = False
    pending: frozenset[str] = frozenset()
    """tool_use ids of verifier calls whose report has not arrived yet."""
    background: frozenset[str] = frozenset()
    """Of those, the ones the CLI runs in the background (their report comes as a notification)."""
    notified: bool = False
    """A background report arrived and the main agent has not answered since: the CLI will
    give it a turn of its own, ending in another result."""

    @property
    def verified(self) -> bool:
        """The last verifier report said PASS."""
        return self.verifier_ran and self.last_verdict is True

    def waiting(self) -> bool:
        """The session is not over at a result message: a background verifier still owes its
        report, or a report arrived that the main agent has yet to answer."""
        return self.error is None and (bool(self.background) or self.notified)

    tools_called: int = 0
    """Tool calls seen (main agent and verifier): counted as each call is announced, before
    the tool runs, so nothing the tool does can take it back."""

    def on_tool_use(self, tool_id: str, name: str, arguments: Mapping[str, Any]) -> None:
        self.tools_called += 1
        if name in AGENT_TOOLS and arguments.get("subagent_type") == prompts.VERIFIER:
            self.pending = self.pending | {tool_id}

    def on_main_answer(self) -> None:
        """The main agent answered (an API call of its own completed)."""
        self.notified = False

    def on_tool_result(self, tool_id: str, text: str, is_error: bool) -> None:
        if tool_id not in self.pending:
            return
        if not is_error and text.lstrip().startswith(ASYNC_LAUNCH):
            self.background = self.background | {tool_id}
            return
        self._report(tool_id, text, ok=not is_error)

    def on_task_notification(self, tool_id: str | None, status: str, summary: str) -> None:
        """A task ended; for a verifier call still owing its report, this is the report."""
        if tool_id is None or tool_id not in self.pending:
            return
        if tool_id in self.background:
            self.notified = True
        self._report(tool_id, summary, ok=status == "completed")

    def _report(self, tool_id: str, text: str, *, ok: bool) -> None:
        """The CLI says a verifier call ended: only the waiting ends here. What the verifier
        answered comes from the gateway (:meth:`on_verifier_report`), never from this stream,
        which the agent's code can write into."""
        self.pending = self.pending - {tool_id}
        self.background = self.background - {tool_id}

    def on_verifier_report(self, text: str) -> None:
        """The verifier's final answer, as the model's server sent it (through the gateway)."""
        self.verifier_ran = True
        self.last_report = text
        self.last_verdict = prompts.parse_verdict(text)

    def on_refusal(self, reason: str) -> None:
        """The gateway refused a request (a budget spent): that is why the session ended,
        whatever the CLI made of the refusal."""
        self.error = f"the agent reached its budget limit: {reason}"
        self.infrastructure = False

    def on_error_result(self, subtype: str, status: int | None, text: str) -> None:
        """An error ResultMessage: classify it; a retry helps only for API-side failures."""
        if subtype == "error_max_turns":
            self.error = "the agent reached its turn limit"
        elif subtype == "error_max_budget_usd":
            self.error = "the agent reached its budget limit"
        else:
            # A malformed or truncated response ends with subtype success, no status and the
            # text "API Error: ..." (measured): an API fault like a 5xx, not the agent's.
            self.infrastructure = (status is not None and (status in INFRA_STATUSES
                                                           or status >= 500)) \
                or (status is None and text.lstrip().startswith(API_ERROR_TEXT))
            where = f"API error {status}: " if status else f"{subtype}: "
            self.error = where + (text.strip().splitlines() or ["no details"])[0][:300]

    def on_sandbox_failure(self, reason: str) -> None:
        """The sandbox around the CLI could not be built: whatever the SDK made of the
        launcher's exit, it is the machine's fault (or our mount plan's), never a verdict."""
        self.error = reason
        self.infrastructure = True

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

"""The Claude agent: one Claude Code session (claude-agent-sdk + its bundled CLI) per task.

With the rest of ``agents/claude/``, the only code that imports ``claude_agent_sdk``.
Everything that does not need the SDK lives beside it: prompts (:mod:`.prompts`), usage and
cost (:mod:`.pricing`), environment, process sweep and verification state
(:mod:`.support`); the database tools are :mod:`spider2local.dbtools`'s, shared with
``spider2local mcp-server``.

Shape of a session: the CLI runs in the workspace's project folder with project settings only
(so exactly the installed skills load), a private ``CLAUDE_CONFIG_DIR`` in the workspace root,
bypassed permissions, and in-process MCP tools for read-only database access. A ``verifier``
subagent (read-only tools, its own prompt) checks the work; if the agent stops without running
it, or it said FAIL, we ask again in the same session, at most ``limits.verify_rounds`` times.
Every message goes to the transcript and the usage meter as it arrives, so a task cut at its
deadline still reports what it spent; on the way out every process of the session is swept.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import claude_agent_sdk as sdk
from claude_agent_sdk import (
    AgentDefinition,
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TaskNotificationMessage,
    ThinkingConfig,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    create_sdk_mcp_server,
    tool,
)

from spider2local.agents import prompts
from spider2local.agents.claude import apicheck
from spider2local.agents.claude.support import (
    CLAUDE_PASS_ENV,
    SessionState,
    blanked,
    cli_env,
    through_gateway,
)
from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.agents.registry import Capabilities
from spider2local.core.layout import API_RECORD
from spider2local.core.transcript import Transcript
from spider2local.dbtools.query import QueryLimits, QueryService
from spider2local.dbtools.tools import TOOLS, Tool, call_tool, tool_names
from spider2local.exceptions import AgentError
from spider2local.gateway.anthropic import CREDENTIAL_VARS, ApiUsage, claude_upstream
from spider2local.proc.run import text_file_busy
from spider2local.seal.session import Seal, is_sealed, open_seal

__all__ = ["ClaudeAgent", "cli_version"]

SERVER = "spider2"
DB_TOOLS = tuple(f"mcp__{SERVER}__{name}" for name in tool_names())
VERIFIER_TOOLS = ("Read", "Grep", "Glob", *DB_TOOLS)
"""Read-only on purpose: no Bash, Write or Edit, so the verifier can only report."""
DISALLOWED = ("WebFetch", "WebSearch")
"""Runs are offline; these tools could only fail and waste turns."""
MAX_BUFFER = 64 * 1024 * 1024
"""A tool result with a wide table can exceed the SDK's default 1 MB message buffer (measured)."""
DISCONNECT_WAIT = 15.0
CONNECT_RETRIES: tuple[float | None, ...] = (0.05, 0.2, 0.5, None)
"""Seconds before each new try to start the CLI after "Text file busy" (None: give up)."""
API_RETRY = "api_retry"
"""Subtype of the CLI's system message announcing a retry of a failed API call (measured)."""

log = logging.getLogger(__name__)
_TASK_LOG: contextvars.ContextVar[Transcript | None] = contextvars.ContextVar(
    "spider2local_claude_task_log", default=None)


class _SdkLogToTaskLog(logging.Handler):
    """Where the SDK's own log records go: the transcript of the session that caused them (the
    SDK's reader task inherits the session's context) and our log at debug, never the console.

    Why: a session cut at its deadline makes the SDK log "Fatal error in message reader:
    Command failed with exit code 143" at error level; the kill was ours and the task's result
    already says timeout, so on the console it is only noise in the progress lines."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        transcript = _TASK_LOG.get()
        if transcript is not None:
            transcript.append("sdk_log", {"level": record.levelname, "logger": record.name,
                                          "message": message})
        log.debug("%s %s: %s", record.name, record.levelname, message)


def _route_sdk_logs() -> None:
    sdk_logger = logging.getLogger("claude_agent_sdk")
    if not any(isinstance(h, _SdkLogToTaskLog) for h in sdk_logger.handlers):
        sdk_logger.addHandler(_SdkLogToTaskLog())
    sdk_logger.propagate = False


def bundled_cli() -> Path:
    return Path(sdk.__file__).parent / "_bundled" / "claude"


def cli_version() -> str:
    """The bundled Claude Code CLI's version (for ``doctor``)."""
    bundled = bundled_cli()
    if not (bundled.is_file() and os.access(bundled, os.X_OK)):
        raise AgentError(f"the Claude CLI bundled with claude-agent-sdk is missing ({bundled}); "
                         "reinstall claude-agent-sdk")
    from claude_agent_sdk._cli_version import __cli_version__

    return str(__cli_version__)


def _answer(text: str, is_error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "is_error": is_error}


def database_tools(service: QueryService) -> list[Any]:
    """The SDK tools of :data:`spider2local.dbtools.tools.TOOLS`, each answered by the same
    :func:`~spider2local.dbtools.tools.call_tool` as ``spider2local mcp-server``."""

    def wrap(spec: Tool) -> Any:
        async def handler(args: dict[str, Any]) -> dict[str, Any]:
            return _answer(*await call_tool(service, spec.name, args))

        return tool(spec.name, spec.description, dict(spec.input_schema))(handler)

    return [wrap(spec) for spec in TOOLS]


def database_server(service: QueryService) -> Any:
    """The in-process MCP server exposing :class:`QueryService` (names: ``DB_TOOLS``)."""
    return create_sdk_mcp_server(SERVER, tools=database_tools(service))


def thinking(budget: int | None) -> ThinkingConfig:
    """Extended thinking: enabled with ``budget`` tokens per reply, or explicitly off (the
    CLI's own default may change between versions; a run must say what it did)."""
    if budget is None:
        return {"type": "disabled"}
    return {"type": "enabled", "budget_tokens": budget}


def _payload(message: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return dataclasses.asdict(message)
    return {"repr": repr(message)}


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return "" if content is None else str(content)


class ClaudeAgent:
    """``make_agent("claude", **options)``; every option has a working default."""

    name = "claude"
    capabilities = Capabilities(model=True, skills=True, skills_dir=".claude/skills",
                                credentials=CREDENTIAL_VARS,
                                sandboxed=True)
    tool_version = staticmethod(cli_version)
    check_api = staticmethod(apicheck.check_api)

    def __init__(self, *, cli_path: str | Path | None = None,
                 query_limits: QueryLimits | None = None,
                 max_buffer_size: int = MAX_BUFFER, background_tasks: bool = False) -> None:
        self.cli_path = cli_path
        self.query_limits = query_limits
        self.max_buffer_size = max_buffer_size
        self.background_tasks = background_tasks
        """Let the CLI run the verifier in the background (its default; off here, see
        :data:`~.support.SYNC_SUBAGENTS`): how tests reach that path."""

    def options(self, ctx: AgentContext, service: QueryService, env: dict[str, str],
                cli_path: str | Path | None) -> ClaudeAgentOptions:
        ws, limits = ctx.workspace, ctx.limits
        verifier = AgentDefinition(
            description="Checks the built dbt models against their YML declarations and the "
                        "task (models built, columns and order, row counts, grain, filters). "
                        "Read-only; answers with problems and VERDICT: PASS or FAIL.",
            prompt=prompts.verifier_prompt(ctx.task, ws, ctx.prompts),
            tools=list(VERIFIER_TOOLS),
            model="inherit")
        return ClaudeAgentOptions(
            system_prompt=prompts.system_prompt(ctx.task, ws, ctx.prompts,
                                                max_turns=limits.max_turns,
                                                seconds=limits.timeout),
            cwd=str(ws.project_dir), permission_mode="bypassPermissions",
            setting_sources=["project"], model=limits.model, max_turns=limits.max_turns,
            max_budget_usd=limits.max_budget_usd,
            thinking=thinking(limits.thinking_budget),
            env=env,
            mcp_servers={SERVER: database_server(service)},
            agents={prompts.VERIFIER: verifier}, disallowed_tools=list(DISALLOWED),
            max_buffer_size=self.max_buffer_size, cli_path=cli_path,
            stderr=lambda line: ctx.transcript.append("cli_stderr", line))

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        """One session in its seal (:mod:`spider2local.seal`): the CLI's API calls go through
        the session's model gateway (sealed in the sandbox: the only way out), and usage,
        cost, budgets and the verifier's reports are read there, from the model's own
        answers."""
        state = SessionState()
        usage = ApiUsage(prompts.verifier_prompt(ctx.task, ctx.workspace, ctx.prompts),
                         on_change=lambda: ctx.meter.set(usage.usage()),
                         on_report=state.on_verifier_report)
        marker = uuid.uuid4().hex
        env = cli_env(ctx.workspace.env, ctx.workspace.root / "claude-config", marker,
                      background_tasks=self.background_tasks, sandboxed=is_sealed(ctx.isolation))
        async with open_seal(ctx.workspace, isolation=ctx.isolation, off_limits=ctx.off_limits,
                             transcript=ctx.transcript, upstreams=[claude_upstream(env)],
                             meter=usage, record=ctx.workspace.artifacts / API_RECORD,
                             task_budget_usd=ctx.limits.max_budget_usd, run_budget=ctx.budget,
                             date=ctx.task.date, query_limits=self.query_limits,
                             marker=marker, tape=ctx.tape) as seal:
            through_gateway(env, seal.base_urls[0])
            await self._session(ctx, state, usage, env, seal)
            if seal.gateway.refused is not None:
                state.on_refusal(seal.gateway.refused)
        ctx.meter.set(usage.usage())
        return AgentOutcome(usage=usage.usage(), error=state.error,
                            infrastructure=state.infrastructure, verified=state.verified,
                            acted=state.tools_called > 0)

    async def _session(self, ctx: AgentContext, state: SessionState, usage: ApiUsage,
                       env: dict[str, str], seal: Seal) -> None:
        _route_sdk_logs()
        _TASK_LOG.set(ctx.transcript)
        # the CLI sees its workspace, the Python environment and the system, and nothing of
        # the runner; the warm dbt server beside it gets its environment (what every Bash
        # tool and so every dbt call inherits; the marker included) minus the API settings
        program = seal.program(Path(self.cli_path or bundled_cli()),
                               services_env=services_env(env), unset_env=blanked(env))
        client = ClaudeSDKClient(self.options(ctx, seal.service, env, program.path))
        finished = False
        try:
            for wait in CONNECT_RETRIES:
                try:
                    await client.connect()
                    break
                except sdk.CLIConnectionError as exc:
                    if not text_file_busy(exc) or wait is None:
                        raise
                await anyio.sleep(wait)  # the launcher just written: see text_file_busy
                client = ClaudeSDKClient(self.options(ctx, seal.service, env, program.path))
            await self._converse(client, ctx, state)
            finished = True
        except sdk.ClaudeSDKError as exc:
            state.on_exception(exc, usage.usage().turns)
        finally:
            with anyio.CancelScope(shield=True):
                if not finished:  # cancelled or crashed: stop the CLI before waiting on it
                    await seal.sweep()
                with anyio.move_on_after(DISCONNECT_WAIT):
                    await client.disconnect()
                await seal.sweep()
                failure = seal.finish(program)
                if failure is not None:
                    state.on_sandbox_failure(failure)
                ctx.meter.set(usage.usage())

    async def _converse(self, client: ClaudeSDKClient, ctx: AgentContext,
                        state: SessionState) -> None:
        """The task, then up to ``verify_rounds`` follow-ups until the verifier said PASS."""
        await self._exchange(client, ctx, state, ctx.task.instruction.strip())
        for _ in range(ctx.limits.verify_rounds):
            follow_up = state.follow_up()
            if follow_up is None:
                return
            ctx.transcript.append("follow_up", follow_up)
            await self._exchange(client, ctx, state, follow_up)

    async def _exchange(self, client: ClaudeSDKClient, ctx: AgentContext, state: SessionState,
                        prompt: str) -> None:
        """Send ``prompt`` and read until the session rests: a result message with no
        background verifier still owing its report (see :meth:`SessionState.waiting`)."""
        ctx.transcript.append("prompt", prompt)
        await client.query(prompt)
        while True:
            async for message in client.receive_response():
                if not isinstance(message, StreamEvent):  # token deltas: counted, not logged
                    ctx.transcript.append(type(message).__name__, _payload(message))
                self._observe(message, ctx, state)
            if not state.waiting():
                return
            ctx.transcript.append("waiting", "a background verifier report is due")

    @staticmethod
    def _observe(message: Any, ctx: AgentContext, state: SessionState) -> None:
        """Progress and the session's flow only (what to wait for, whether a tool ran): usage
        and the verifier's answers come from the gateway, never from this stream."""
        if isinstance(message, AssistantMessage):
            main = message.parent_tool_use_id is None
            if main and not message.model.startswith("<"):
                state.on_main_answer()
                ctx.meter.note(None)
            for block in message.content:
                if isinstance(block, ToolUseBlock):
                    state.on_tool_use(block.id, block.name, block.input)
                    ctx.meter.last_tool = tool_label(block.name, block.input)
        elif isinstance(message, UserMessage) and isinstance(message.content, list):
            for item in message.content:
                if isinstance(item, ToolResultBlock):
                    state.on_tool_result(item.tool_use_id, _text(item.content),
                                         bool(item.is_error))
        elif isinstance(message, TaskNotificationMessage):
            state.on_task_notification(message.tool_use_id, str(message.status),
                                       message.summary or "")
        elif isinstance(message, SystemMessage) and message.subtype == API_RETRY:
            ctx.meter.note(_retry_note(message.data))
        elif isinstance(message, ResultMessage):
            ctx.meter.note(None)
            if message.is_error:
                state.on_error_result(message.subtype, message.api_error_status,
                                      message.result or "; ".join(message.errors or []))


def services_env(env: Mapping[str, str]) -> dict[str, str]:
    """What the workspace's warm dbt server starts with: the CLI's own environment (what every
    Bash tool and so every dbt call of the session inherits; the sweep marker included, so the
    session's sweep ends it too) minus its API settings (:data:`CLAUDE_PASS_ENV`: the
    gateway's URL and placeholders), which the server has no use for and the launcher script
    would then hold."""
    return {k: v for k, v in env.items() if k not in CLAUDE_PASS_ENV}


def _retry_note(data: dict[str, Any]) -> str:
    """``API 529, retry 1/2`` for the progress line: a dead API must not look like work."""
    status = data.get("error_status") or data.get("error") or "error"
    return f"API {status}, retry {data.get('attempt', '?')}/{data.get('max_retries', '?')}"



TOOL_DETAIL = {"Bash": "command", "Write": "file_path", "Edit": "file_path",
               "MultiEdit": "file_path", "Read": "file_path", "Glob": "pattern",
               "Grep": "pattern", "query": "sql", "describe_table": "table"}
"""Which input of a tool says what the call does, for the live display's row."""


def tool_label(name: str, tool_input: Any, width: int = 60) -> str:
    """``Bash: dbt run --select orders`` (whitespace folded, cut at ``width``): the call as a
    person reads it. The progress output sanitises it (it is the agent's text)."""
    short = name.removeprefix(f"mcp__{SERVER}__")
    value = tool_input.get(TOOL_DETAIL.get(short, "")) if isinstance(tool_input, dict) else None
    if not isinstance(value, str) or not value.strip():
        return short[:width]
    if TOOL_DETAIL.get(short) == "file_path":
        value = value.rsplit("/", 1)[-1]
    text = f"{short}: {' '.join(value.split())}"
    return text if len(text) <= width else text[:width - 1] + "…"

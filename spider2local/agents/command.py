"""The command agent: any command-line agent (Claude Code, Codex, Gemini CLI, mini-swe-agent,
a script of yours) run on a task under the same seal as the Claude session.

``run --agent command --agent-command '<shell command>'``, or once in the suite as
``[agents.NAME] command = "..."`` and then ``--agent NAME``. The command runs with ``sh -c`` in
the task's project folder; under ``--isolation namespace`` inside the same sandbox as the Claude
CLI (:mod:`spider2local.sandbox`: the workspace writable, the runtime read-only, the dataset,
gold, runs folder and spider2local itself absent), plus the read-only folders the agent declares
(its own install), each checked against what must stay hidden.

The contract (docs/agents.md, "Command agents"): the environment is the workspace's allow-list (the
dbt shim first on PATH, so ``dbt`` runs under the task's fake date), the variables the agent
names (``pass_env``, never the whole environment), and

- ``SPIDER2_INSTRUCTION`` (the text) and ``SPIDER2_INSTRUCTION_FILE``: the task, its date, the
  project scan and the start database, without Claude-only tool names (``prompts/command.md``);
- ``SPIDER2_SCAN_FILE``, ``SPIDER2_START_DB_FILE``: the project scan and start-database
  snapshot as JSON; ``SPIDER2_PROJECT_DIR``, ``SPIDER2_DATABASE``, ``SPIDER2_DATE``,
  ``SPIDER2_DEADLINE`` (Unix seconds) and ``SPIDER2_TIMEOUT`` (seconds);
- ``SPIDER2_USAGE_FILE``: where it may write what it spent (:mod:`.usage`);
- ``SPIDER2_MCP_CONFIG``: an MCP client config serving the governed database tools, the
  Claude session's own (:mod:`spider2local.dbtools.endpoint`: the runner serves them on a
  socket for the session's lifetime; the config starts a bridge to it, in or out of the
  sandbox).

Its exit status, stdout and stderr (the last :data:`OUTPUT_LIMIT` bytes of each) are kept in the
task folder, and the output goes into the transcript too, so the integrity scan reads it like a
Claude transcript. The runner's deadline cancels :meth:`CommandAgent.run`: the process group is
killed (the sandbox's PID namespace takes every process with it), then every process carrying
the session's marker.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import shlex
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.agents.prompts import command_instruction
from spider2local.agents.registry import Capabilities
from spider2local.agents.usage import MAX_USAGE_BYTES, READERS, read_usage
from spider2local.core.layout import (
    AGENT_EXIT,
    AGENT_STDERR,
    AGENT_STDOUT,
    AGENT_TRAJECTORY,
    API_RECORD,
)
from spider2local.core.results import Usage
from spider2local.exceptions import UserError
from spider2local.gateway.anthropic import CREDENTIAL_VARS, PLACEHOLDER, ApiUsage, claude_upstream
from spider2local.gateway.openai import OpenAiUsage
from spider2local.gateway.server import ApiCall, Upstream
from spider2local.proc.run import run_process
from spider2local.safepath import is_within
from spider2local.seal.processes import MARKER_ENV
from spider2local.seal.session import Seal, open_seal
from spider2local.suite.model import COMMAND_APIS
from spider2local.workspace.guard import is_workspace_file

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 1 << 20
"""Bytes kept of the command's stdout and of its stderr (the tail), in files and transcript."""
TRANSCRIPT_LIMIT = 64 * 1024
"""Bytes of each stream put into the transcript (the scan reads the files' tails too)."""
CONTRACT_DIR = "agent-input"
"""Folder in the workspace root (beside the project, not in it) holding the contract's files."""
STDOUT_FILE, STDERR_FILE, EXIT_FILE = AGENT_STDOUT, AGENT_STDERR, AGENT_EXIT
TRAJECTORY_FILE = AGENT_TRAJECTORY
"""The agent's own trajectory (``usage = "mini-swe-agent"``), kept to debug the task, as the
Claude session's transcript is."""
SHELL = "/bin/sh"
MAX_ENV_TEXT = 96 * 1024
"""Characters of the instruction in ``SPIDER2_INSTRUCTION``: Linux refuses to start a program
with one environment string over 128 KiB (E2BIG); the file always holds all of it."""


def _now_utc(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


OPENAI_API = "https://api.openai.com/v1"
"""OpenAI's base URL (clients append ``/chat/completions``, ``/responses``...)."""
OPENAI_URL_VARS = ("OPENAI_BASE_URL", "OPENAI_API_BASE")


@dataclass(frozen=True)
class Api:
    """One declared API: where the gateway forwards it, and the variables that point the
    agent's client at the gateway instead (base URL, placeholder credentials)."""

    kind: str
    upstream: Upstream
    credentials: tuple[str, ...]
    """The agent's credential variables, each given the placeholder (clients refuse to start
    without a key; the gateway drops it and adds the runner's)."""

    def env(self, base_url: str) -> dict[str, str]:
        """OpenAI's base URL under both names clients read (the openai SDK and litellm
        ``OPENAI_BASE_URL``, older litellm and aider ``OPENAI_API_BASE``): a user's own value
        of either, passed by name, must not lead the agent past the gateway."""
        url_vars = ("ANTHROPIC_BASE_URL",) if self.kind == "anthropic" else OPENAI_URL_VARS
        return {**dict.fromkeys(url_vars, base_url),
                **dict.fromkeys(self.credentials, PLACEHOLDER)}


def declared_apis(apis: Sequence[str], environ: Mapping[str, str] | None = None) -> list[Api]:
    """The upstreams of ``apis``, from the RUNNER's environment (the user's base URL and key;
    the agent never sees either): Anthropic as the Claude session reaches it, and OpenAI's
    API or an OpenAI-compatible server (``OPENAI_BASE_URL`` or ``OPENAI_API_BASE``,
    ``OPENAI_API_KEY``)."""
    environ = os.environ if environ is None else environ
    found: list[Api] = []
    for kind in apis:
        if kind == "anthropic":
            creds = tuple(v for v in (*CREDENTIAL_VARS, "ANTHROPIC_AUTH_TOKEN")
                          if environ.get(v, "").strip()) or ("ANTHROPIC_API_KEY",)
            found.append(Api(kind, claude_upstream(environ), creds))
        else:
            key = environ.get("OPENAI_API_KEY", "").strip()
            found.append(Api(kind, Upstream(
                base_url=next((environ[v] for v in OPENAI_URL_VARS if environ.get(v)),
                              OPENAI_API),
                headers={"authorization": f"Bearer {key}"} if key else {},
                drop=("authorization", "api-key"), paths=("/",)), ("OPENAI_API_KEY",)))
    return found


class _Meters:
    """The gateway's meter of a command agent's session, one per declared API: Anthropic's
    Messages answers are read as for the Claude session, OpenAI-compatible ones (chat
    completions, responses) by :class:`OpenAiUsage`: tokens, model and cost from the
    servers' own answers, whatever the agent reports."""

    def __init__(self, apis: Sequence[Api]) -> None:
        self.by_upstream: list[ApiUsage | OpenAiUsage] = [
            ApiUsage() if a.kind == "anthropic" else OpenAiUsage() for a in apis]
        self.statuses: list[int] = []
        """Each forwarded call's upstream status (502: unreachable), in order."""

    def begin(self, call: ApiCall) -> None:
        self.by_upstream[call.upstream].begin(call)

    def event(self, call: ApiCall, data: Mapping[str, Any]) -> None:
        self.by_upstream[call.upstream].event(call, data)

    def end(self, call: ApiCall, status: int) -> None:
        self.statuses.append(status)
        self.by_upstream[call.upstream].end(call, status)

    def outage(self) -> str | None:
        """Why the model API, not the agent, is to blame for a failed session: it called,
        and every call failed as an outage does (429, 5xx, unreachable), so no model answer
        ever reached the agent. Read from what the gateway saw upstream, which the agent's
        process cannot forge (refused routes and budget refusals never reach a meter)."""
        if not self.statuses or not all(s == 429 or 500 <= s <= 599 for s in self.statuses):
            return None
        counts = {s: self.statuses.count(s) for s in sorted(set(self.statuses))}
        said = ", ".join(f"{s} x{n}" if n > 1 else str(s) for s, n in counts.items())
        return f"every call to the model API failed ({said})"

    def cost(self) -> float | None:
        costs = [m.cost() for m in self.by_upstream]
        return None if any(c is None for c in costs) else sum(c for c in costs if c)

    def usage(self) -> Usage | None:
        """What the model servers said the session used, every API together; None when no
        call was metered (then the agent's own report, if any, is what is known). The cost is
        unknown when any API's is."""
        seen = [u for u in (m.usage() for m in self.by_upstream)
                if u.turns or u.input_tokens or u.output_tokens]
        if not seen:
            return None
        total = seen[0]
        for more in seen[1:]:
            total = total + more
        cost = self.cost()
        return dataclasses.replace(total, cost_usd_computed=cost)


class CommandAgent:
    """``make_agent("command", command="...", pass_env=[...], read_only=[...])``."""

    name = "command"
    capabilities = Capabilities(sandboxed=True)

    def __init__(self, command: str | None = None, *, pass_env: Sequence[str] = (),
                 read_only: Sequence[Path | str] = (), usage: str | None = None,
                 trajectory: str | None = None, apis: Sequence[str] = ()) -> None:
        if command is None or not command.strip():
            raise UserError("the command agent needs a command",
                            fix="pass --agent-command '<shell command>', or define it in the "
                                "suite as [agents.NAME] command = \"...\"")
        if usage is not None and usage not in READERS:
            raise UserError(f"unknown usage reader {usage!r}", fix="one of " + ", ".join(READERS))
        self.command = command
        self.pass_env = tuple(pass_env)
        self.read_only = tuple(Path(p).expanduser().absolute() for p in read_only)
        missing = [p for p in self.read_only if not p.exists()]
        if missing:
            raise UserError("a read-only folder of the command agent does not exist",
                            path=missing[0], fix="fix read_only in the suite's [agents] table")
        unknown = [a for a in apis if a not in COMMAND_APIS]
        if unknown:
            raise UserError(f"unknown API {unknown[0]!r} of the command agent",
                            fix="apis lists some of: " + ", ".join(COMMAND_APIS))
        self.apis = tuple(dict.fromkeys(apis))
        """The model APIs it calls, each through the gateway; under ``--isolation namespace``
        nothing else of the network exists for it (none declared: no network at all)."""
        self.usage = usage
        self.trajectory = trajectory
        """For ``usage = "mini-swe-agent"``: the trajectory file, relative to the project
        (default ``$SPIDER2_USAGE_FILE``'s folder ``trajectory.json``)."""

    @staticmethod
    def tool_version() -> str | None:
        return None

    def executable(self) -> str | None:
        """The program the command starts (its first word), for ``doctor``."""
        try:
            words = shlex.split(self.command)
        except ValueError:
            return None
        return words[0] if words else None

    def check_read_only(self, off_limits: Sequence[Path]) -> str | None:
        """Why a declared read-only folder cannot be shown (None: all can). A folder that IS
        or lies INSIDE something off limits would expose it (a bind over the hiding tmpfs); one
        that only contains an off-limits path is fine: the sandbox covers that path."""
        for folder in self.read_only:
            real = Path(os.path.realpath(folder))
            for hidden in off_limits:
                h = Path(os.path.realpath(hidden))
                if is_within(real, h):
                    return f"read-only folder {folder} lies in {hidden}, which must stay hidden"
            if real == Path("/"):
                return "read-only folder / would show everything"
        return None

    def contract_env(self, ctx: AgentContext, files: Mapping[str, Path], instruction: str,
                     deadline: float, marker: str,
                     gateway: Mapping[str, str] | None = None) -> dict[str, str]:
        """``gateway``: the declared APIs' variables (:meth:`Api.env`), laid over ``pass_env``
        so a key named there never reaches the agent for an API the gateway serves."""
        ws = ctx.workspace
        env = dict(ws.env)
        env.update({k: os.environ[k] for k in self.pass_env if k in os.environ})
        env.update(gateway or {})
        env.update({
            "SPIDER2_INSTRUCTION": instruction if len(instruction) <= MAX_ENV_TEXT else
            instruction[:MAX_ENV_TEXT] + "\n[cut: read $SPIDER2_INSTRUCTION_FILE]",
            "SPIDER2_INSTRUCTION_FILE": str(files["instruction"]),
            "SPIDER2_SCAN_FILE": str(files["scan"]),
            "SPIDER2_START_DB_FILE": str(files["start_db"]),
            "SPIDER2_USAGE_FILE": str(files["usage"]),
            "SPIDER2_PROJECT_DIR": str(ws.project_dir),
            "SPIDER2_DATABASE": str(ws.database),
            "SPIDER2_DATE": ctx.task.date.isoformat(),
            "SPIDER2_DEADLINE": str(int(deadline)),
            "SPIDER2_TIMEOUT": str(int(ctx.limits.timeout)),
            "SPIDER2_TASK_ID": ctx.task.id,
            MARKER_ENV: marker,
        })
        if "mcp" in files:
            env["SPIDER2_MCP_CONFIG"] = str(files["mcp"])
        if ctx.limits.model:
            env["SPIDER2_MODEL"] = ctx.limits.model
        return env

    def write_contract(self, ctx: AgentContext, deadline: float,
                       tools: Path | None = None) -> tuple[dict[str, Path], str]:
        """The contract's files in ``<workspace>/agent-input/``; returns them and the
        instruction text. ``tools``: the runner's tool socket (None: no database tools)."""
        ws = ctx.workspace
        folder = ws.root / CONTRACT_DIR
        folder.mkdir(exist_ok=True)
        instruction = command_instruction(ctx.task, ws, _now_utc(deadline), ctx.prompts)
        files = {"instruction": folder / "instruction.md", "scan": folder / "scan.json",
                 "start_db": folder / "start_db.json", "usage": folder / "usage.json"}
        files["instruction"].write_text(instruction, encoding="utf-8")
        for key, source in (("scan", ws.scan_path), ("start_db", ws.snapshot_path)):
            if source is not None and source.is_file():
                shutil.copyfile(source, files[key])
            else:
                files[key].write_text("null\n", encoding="utf-8")
        if tools is not None:
            files["mcp"] = self._mcp_config(folder, tools)
        return files, instruction

    @staticmethod
    def _mcp_config(folder: Path, tools: Path) -> Path:
        """The same config in and out of the sandbox: a bridge to the runner's socket (inside,
        the spider2local package is hidden, so nothing of it can start there)."""
        from spider2local.dbtools.endpoint import write_client_config

        return write_client_config(folder, tools)

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        """The command in its seal (:mod:`spider2local.seal`): behind its own gateway (under
        ``--isolation namespace`` the only way out of the sandbox's network), serving the APIs
        it declared, with the database tools on a socket its MCP config bridges to."""
        problem = self.check_read_only(ctx.off_limits)
        if problem is not None:
            ctx.transcript.append("error", {"read_only": problem})
            return AgentOutcome(error=f"not started: {problem}")
        apis = declared_apis(self.apis)
        meters = _Meters(apis)
        async with open_seal(ctx.workspace, isolation=ctx.isolation, off_limits=ctx.off_limits,
                             transcript=ctx.transcript, upstreams=[a.upstream for a in apis],
                             meter=meters, record=ctx.workspace.artifacts / API_RECORD,
                             task_budget_usd=ctx.limits.max_budget_usd, run_budget=ctx.budget,
                             date=ctx.task.date, serve_tools=True, tape=ctx.tape) as seal:
            variables: dict[str, str] = {}
            for api, base in zip(apis, seal.base_urls, strict=True):
                variables.update(api.env(base))
            outcome = await self._run(ctx, variables, seal, meters)
            if seal.gateway.refused is not None and outcome.error is None:
                outcome = dataclasses.replace(outcome, error=f"the gateway refused its calls: "
                                                             f"{seal.gateway.refused}")
        return outcome

    async def _run(self, ctx: AgentContext, gateway: Mapping[str, str], seal: Seal,
                   meters: _Meters) -> AgentOutcome:
        started = time.time()
        deadline = started + ctx.limits.timeout
        files, instruction = self.write_contract(ctx, deadline, seal.tools)
        env = self.contract_env(ctx, files, instruction, deadline, seal.marker, gateway)
        # sealed: the shell in the sandbox, with the agent's own install read-only and the
        # warm dbt server beside it (what the runner gives its own server outside: the
        # workspace's allow-list and the marker, never the agent's pass_env credentials)
        program = seal.program(Path(SHELL), read_only=self.read_only, die_with_runner=False)
        argv = [*program.argv, "-c", self.command]
        ctx.transcript.append("command", {"command": self.command, "cwd": str(
            ctx.workspace.project_dir), "isolation": ctx.isolation.value,
            "pass_env": [k for k in self.pass_env if k in os.environ], "apis": list(self.apis)})
        result = None
        sandbox_failure = None
        try:
            result = await run_process(argv, cwd=ctx.workspace.project_dir, env=env,
                                       timeout=ctx.limits.timeout, output_limit=OUTPUT_LIMIT)
        except OSError as exc:
            ctx.transcript.append("error", {"start": str(exc)})
            return AgentOutcome(error=f"the agent command could not start: {exc}",
                                infrastructure=True)
        finally:
            with anyio.CancelScope(shield=True):
                await seal.sweep()
                sandbox_failure = seal.finish(program)
                self._keep(ctx, result, time.time() - started)
                usage, source = self._usage(ctx, files, result.stdout if result else "")
                metered = meters.usage()
                if metered is not None:  # the model server's word beats the agent's
                    usage, source = metered, "gateway"
                if usage is not None:
                    ctx.meter.set(usage)
                ctx.transcript.append("usage", {"source": source})
        if sandbox_failure is not None:  # the command never ran: its status is mount's
            return AgentOutcome(usage=usage or ctx.meter.usage, error=sandbox_failure,
                                infrastructure=True, acted=False)
        if result.timed_out:
            return AgentOutcome(usage=usage or ctx.meter.usage, acted=True,
                                error=f"the agent command ran past {ctx.limits.timeout:.0f} s")
        error = None if result.returncode == 0 else \
            f"the agent command exited with status {result.returncode}" + (
                f": {_last_line(result.stderr)}" if result.stderr.strip() else "")
        outage = meters.outage() if error is not None else None
        if outage is not None:  # no model answer reached it: nothing it did was the model's
            ctx.transcript.append("error", {"api_outage": outage})
            return AgentOutcome(usage=usage or ctx.meter.usage, error=f"{outage}; {error}",
                                infrastructure=True, acted=False)
        return AgentOutcome(usage=usage or ctx.meter.usage, error=error, acted=True)

    def _usage(self, ctx: AgentContext, files: Mapping[str, Path], stdout: str) -> Any:
        """What the agent says it spent. Its files are read only where the workspace rule
        trusts them (:func:`~spider2local.workspace.guard.workspace_file`: no symlink, no hard
        link): the runner sees every path, and a ``usage.json -> /elsewhere/x.json`` would have
        it read (and keep) a file the agent cannot see."""
        root = ctx.workspace.root

        def trusted(path: Path) -> Path | None:
            return path if is_workspace_file(root, path) else None

        trajectory = None
        if self.usage == "mini-swe-agent":
            named = ctx.workspace.project_dir / (self.trajectory or "trajectory.json")
            trajectory = trusted(named) or trusted(files["usage"].parent / "trajectory.json")
            if trajectory is not None:
                _keep_copy(trajectory, ctx.workspace.artifacts / TRAJECTORY_FILE)
        return read_usage(self.usage, usage_file=trusted(files["usage"]), stdout=stdout,
                          trajectory=trajectory)

    def _keep(self, ctx: AgentContext, result: Any, duration: float) -> None:
        """Exit status, stdout and stderr into the task folder and the transcript."""
        artifacts = ctx.workspace.artifacts
        artifacts.mkdir(parents=True, exist_ok=True)
        stdout = result.stdout if result is not None else ""
        stderr = result.stderr if result is not None else ""
        (artifacts / STDOUT_FILE).write_text(stdout, encoding="utf-8", errors="replace")
        (artifacts / STDERR_FILE).write_text(stderr, encoding="utf-8", errors="replace")
        record = {"command": self.command, "returncode": None if result is None
                  else result.returncode, "timed_out": bool(result and result.timed_out),
                  "cancelled": result is None, "duration": round(duration, 3),
                  "stdout_truncated": bool(result and result.stdout_truncated),
                  "stderr_truncated": bool(result and result.stderr_truncated)}
        (artifacts / EXIT_FILE).write_text(json.dumps(record, indent=2) + "\n",
                                           encoding="utf-8")
        ctx.transcript.append("command_exit", record)
        ctx.transcript.append("stdout", stdout[-TRANSCRIPT_LIMIT:])
        ctx.transcript.append("stderr", stderr[-TRANSCRIPT_LIMIT:])


def _keep_copy(source: Path, target: Path) -> None:
    """Copy an agent's file (checked by the caller) into the task folder, up to the size a usage
    reader reads; a bigger one is noted as such, never a reason to fail the task."""
    try:
        size = source.stat().st_size
        target.parent.mkdir(parents=True, exist_ok=True)
        if size > MAX_USAGE_BYTES:
            target.write_text(json.dumps({"not_kept": f"{size} bytes, over "
                                          f"{MAX_USAGE_BYTES}"}) + "\n", encoding="utf-8")
            return
        target.write_bytes(source.read_bytes())
    except OSError as exc:
        log.warning("%s: not kept: %s", target, exc.strerror or exc)


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1][:300]

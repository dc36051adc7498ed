"""One sealed session for any agent that runs untrusted code: :func:`open_seal`.

Every such agent needs the same things around it, in the same order, with the same clean-up:
the model gateway (its only way out of the sandbox, charging the task's budget and the run's
cap), the database tools (one query service, in-process for the Claude SDK or on a socket for
an MCP bridge), the sandbox that hides the dataset, the run folder and every other task (or,
under ``--isolation none``, the visible fallback: the program still dies with the runner), the
warm dbt server started beside the program, and at the end the sweep of every process the
session started and the launcher's verdict on whether the sandbox was built at all. Wiring
that by hand in each agent drifted (issue 28): an agent now asks for a seal and runs its
program through it, and adding an agent is ``run(ctx)``, :func:`open_seal`, register.

The isolation mode is decided once, by the run (:mod:`spider2local.sandbox.isolation`);
:func:`is_sealed` is the one reading of it an agent's session makes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from spider2local.core.transcript import Transcript
from spider2local.dbtools.endpoint import open_tool_socket
from spider2local.dbtools.query import QueryLimits, QueryService
from spider2local.gateway.budget import Budget, Cap
from spider2local.gateway.replay import Tape
from spider2local.gateway.server import Gateway, Meter, Upstream, open_gateway
from spider2local.sandbox.isolation import IsolationMode
from spider2local.sandbox.launcher import DeathWrapper, Launcher
from spider2local.sandbox.network import NetworkSeal
from spider2local.sandbox.spec import agent_spec, warm_services
from spider2local.seal.processes import MARKER_ENV, sweep
from spider2local.workspace.model import Workspace


def is_sealed(isolation: IsolationMode) -> bool:
    """Whether a session runs in the namespace sandbox: the run chose the mode, and this is
    the one place an agent's session reads it (its gateway then listens on a private socket,
    reached through the sandbox's relay, instead of a loopback port)."""
    return isolation is IsolationMode.NAMESPACE


@dataclass
class SealedProgram:
    """A program as the seal runs it: inside the sandbox's launcher, behind the death wrapper
    (no sandbox), or as itself (no sandbox and no wrapper on this machine)."""

    program: Path
    launcher: Launcher | DeathWrapper | None

    @property
    def path(self) -> Path:
        """What to execute in the program's place (the SDK's ``cli_path``): it takes the
        program's own arguments unchanged."""
        return self.launcher.path if self.launcher is not None else self.program

    @property
    def argv(self) -> list[str]:
        """How our own code starts it (a launcher script is read by ``/bin/sh``, never
        executed: see :attr:`Launcher.argv`)."""
        if isinstance(self.launcher, Launcher):
            return list(self.launcher.argv)
        return [str(self.path)]

    def failure(self) -> str | None:
        """Why the sandbox could not be built (``sandbox could not be built: ...``), or None.
        Asked after the program ended, before :meth:`remove`."""
        return self.launcher.failure() if isinstance(self.launcher, Launcher) else None

    def remove(self) -> None:
        if self.launcher is not None:
            self.launcher.remove()


@dataclass
class Seal:
    """What :func:`open_seal` gives an agent for one session."""

    workspace: Workspace
    isolation: IsolationMode
    off_limits: tuple[Path, ...]
    transcript: Transcript
    gateway: Gateway
    base_urls: tuple[str, ...]
    """The gateway's base URL for each upstream, in the order asked."""
    service: QueryService
    """The database tools' query service (its ``start`` fingerprint taken when the seal
    opened, before the agent ran): the Claude SDK serves it in-process."""
    tools: Path | None
    """The database tools' socket (``serve_tools``), for an MCP bridge; None when not asked or
    when it could not be made (said in the transcript)."""
    marker: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The session's sweep marker: put it in the program's environment (:data:`MARKER_ENV`)."""
    socket: Path | None = None
    """The gateway's socket, which the sandbox's relay reaches (sealed sessions only)."""
    programs: list[SealedProgram] = field(default_factory=list)

    @property
    def sealed(self) -> bool:
        return is_sealed(self.isolation)

    def hidden(self) -> list[Path]:
        """What the program must not see: the run's off-limits paths (dataset, runs folder,
        other workspaces, spider2local itself) and the start database's read-only copy, which
        belongs to the query tool and is never the agent's to swap."""
        hidden = list(self.off_limits)
        if self.workspace.start_copy is not None:
            hidden.append(self.workspace.start_copy.parent)
        return hidden

    def program(self, program: Path, *, services_env: Mapping[str, str] | None = None,
                read_only: Sequence[Path] = (), unset_env: Sequence[str] = (),
                die_with_runner: bool = True) -> SealedProgram:
        """``program`` wrapped for this session. Sealed: a sandbox launcher that shows it the
        workspace (writable), the runtime and the system, ``read_only`` besides, and nothing
        of the runner; its network is cut but for the gateway's relay; the warm dbt server
        (when the runner asked for one) starts inside beside it with ``services_env`` (what
        every dbt call of the session inherits: give it the marker, never credentials).
        Unsealed: behind the death wrapper when ``die_with_runner`` (an SDK that starts the
        program gives it no death signal), else as itself."""
        if self.sealed:
            env = {MARKER_ENV: self.marker, **(services_env or self.workspace.env)}
            # by its real path: /bin is a symlink on merged-usr systems, recreated as one
            # inside, and binding the link's folder over it fails (measured)
            spec = agent_spec(Path(os.path.realpath(program)), [self.workspace.root],
                              hidden=self.hidden(),
                              read_only=(*read_only, *([self.tools] if self.tools else [])),
                              unset_env=list(unset_env),
                              network=NetworkSeal(self.socket) if self.socket else None,
                              services=warm_services(env, self.workspace.root))
            wrapped = SealedProgram(program, Launcher(spec))
        else:
            wrapped = SealedProgram(program,
                                    DeathWrapper.around(program) if die_with_runner else None)
        self.programs.append(wrapped)
        return wrapped

    async def sweep(self) -> list[int]:
        """Kill every process of the session (those carrying its marker)."""
        return await sweep(self.marker)

    def finish(self, program: SealedProgram) -> str | None:
        """The program ended: record and return why its sandbox could not be built (a fault
        of the machine or of our mount plan, never the agent's: its caller records the trial
        as infrastructure), then remove its launcher."""
        failure = program.failure()
        if failure is not None:
            self.transcript.append("error", {"sandbox": failure})
        program.remove()
        if program in self.programs:
            self.programs.remove(program)
        return failure


@contextlib.asynccontextmanager
async def open_seal(workspace: Workspace, *, isolation: IsolationMode,
                    off_limits: Sequence[Path], transcript: Transcript,
                    upstreams: Sequence[Upstream], meter: Meter, record: Path | None,
                    task_budget_usd: float | None, run_budget: Cap | None,
                    date: dt.date, query_limits: QueryLimits | None = None,
                    serve_tools: bool = False, marker: str | None = None,
                    tape: Tape | None = None) -> AsyncIterator[Seal]:
    """The session's seal while the block runs; on leaving it (shielded), every process
    carrying the session's marker is swept and every launcher still held removed.

    ``record``: where the gateway keeps its exchanges (``api.jsonl``). ``task_budget_usd``
    and ``run_budget``: the task's ``--max-budget-usd`` and the run's shared
    ``--max-cost-usd`` cap, both charged at the gateway, which refuses calls once either is
    spent. ``date``: the task's fake date (the query tools' ``current_date``). ``marker``:
    the session's sweep marker when the caller made the environment first (else a new one).
    ``tape``: the trial's recording of full exchanges, and with ``run --replay`` the recorded
    run it answers from instead of any API (:mod:`spider2local.gateway.replay`)."""
    budgets: list[Cap] = [Budget(task_budget_usd, "task"),
                          *([run_budget] if run_budget is not None else [])]
    service = QueryService.for_workspace(workspace, date, query_limits)
    async with contextlib.AsyncExitStack() as stack:
        served = await stack.enter_async_context(open_gateway(
            upstreams, meter, sealed=is_sealed(isolation), budgets=budgets, record=record,
            tape=tape))
        tools: Path | None = None
        if serve_tools:
            try:
                socket = await stack.enter_async_context(open_tool_socket(service))
            except OSError as exc:  # the agent goes on without the tools, and says so
                transcript.append("error", {"database_tools": f"not served: {exc}"})
            else:
                tools = socket.path
                stack.callback(lambda: transcript.append("database_tools", socket.summary()))
        seal = Seal(workspace, isolation, tuple(off_limits), transcript, served.gateway,
                    served.base_urls, service, tools, socket=served.socket)
        if marker is not None:  # the program's environment was made with it already
            seal.marker = marker
        try:
            yield seal
        finally:
            with anyio.CancelScope(shield=True):
                await seal.sweep()
                for program in list(seal.programs):
                    program.remove()


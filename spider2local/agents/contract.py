"""The contract between the run and an agent: what the run hands over, what it gets back.

The run prepares a workspace, hands the agent an :class:`AgentContext`, and enforces the deadline
itself; the agent only works. Usage is recorded into a mutable :class:`UsageMeter` as it happens,
so a task cut at its deadline (or crashing mid-way) still reports the turns and tokens spent so
far. The run owns these types; agents (``spider2local.agents``) implement :class:`Agent`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from spider2local.core.results import Usage
from spider2local.core.transcript import Transcript
from spider2local.dataset.task import TaskSpec
from spider2local.gateway.budget import Cap
from spider2local.gateway.replay import Tape
from spider2local.sandbox.isolation import IsolationMode
from spider2local.suite import options
from spider2local.workspace.model import Workspace


@dataclass(frozen=True)
class AgentLimits:
    """What the agent is told of the run's limits for one task (built by
    :func:`spider2local.run.settings.limits_for` from the run's settings; defaults are the
    settings table's)."""

    max_turns: int
    timeout: float
    """Seconds for the whole task; enforced by the runner, told to the agent for planning."""
    model: str | None = None
    max_budget_usd: float | None = None
    verify_rounds: int = options.default("verify_rounds")
    skills: tuple[str, ...] = ()
    thinking_budget: int | None = None
    """Extended thinking tokens per reply (None: off)."""


class UsageMeter:
    """Accumulates usage while the agent runs; the runner reads it whatever the ending."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.notice: str | None = None
        """What the agent is stuck on right now (``API 529, retry 1/2``), for the progress
        line; None while it works normally."""
        self.last_tool: str | None = None
        """The tool the agent called last (``Bash: dbt run --select orders``), for the live
        display's row; agents that cannot tell leave it None."""
        self._listeners: list[Callable[[str], None]] = []

    def set(self, usage: Usage) -> None:
        self.usage = usage

    def listen(self, listener: Callable[[str], None]) -> None:
        """Call ``listener`` with each new notice (the progress output's plain lines)."""
        self._listeners.append(listener)

    def note(self, notice: str | None) -> None:
        changed = notice != self.notice
        self.notice = notice
        if notice is not None and changed:
            for listener in self._listeners:
                listener(notice)


@dataclass
class AgentContext:
    task: TaskSpec
    workspace: Workspace
    limits: AgentLimits
    transcript: Transcript
    meter: UsageMeter = field(default_factory=UsageMeter)
    isolation: IsolationMode = IsolationMode.NONE
    """The run's isolation: ``namespace`` means the agent must start its processes inside the
    sandbox (:mod:`spider2local.sandbox`)."""
    prompts: Path | None = None
    """The prompt templates to use (``--prompts DIR``); None: the bundled ``prompts/``."""
    off_limits: tuple[Path, ...] = ()
    """What the run keeps from the agent (the dataset, the gold folder, the runs folder, the
    suite file, the cache; decided by :meth:`spider2local.integrity.guard.Watch.off_limits`):
    a sandbox hides each, also where it lies under a folder the sandbox binds."""
    budget: Cap | None = None
    """The run's spending cap (``--max-cost-usd``): the trial's :class:`~spider2local.gateway.
    budget.Share` of the one budget shared by every session of the run (the runner sets it,
    with or without a cap, so the spend is counted either way). The agent hands it to its
    model gateway, which charges it and refuses requests once it is spent."""
    tape: Tape | None = None
    """Where the agent's model gateway records the session in full (the trial's folder,
    outside the agent's view), and, for ``run --replay``, the recorded session it answers
    from instead of any API (:mod:`spider2local.gateway.replay`). The agent hands it to its
    gateway (``open_gateway(..., tape=ctx.tape)``)."""


@dataclass(frozen=True)
class AgentOutcome:
    """How the agent's work ended. Failures are data, not exceptions: ``error`` says what went
    wrong and ``infrastructure`` whether a retry could help (API overloaded, CLI crash before any
    turn)."""

    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    infrastructure: bool = False
    verified: bool | None = None
    acted: bool = False
    """The agent ran at least one tool, as the runner saw it happen: its workspace may hold work.
    Decided from what was observed before the tool ran, never from the session's own later
    report: an agent's code runs with the CLI's user id and can forge the CLI's output (an
    "API error" with zero usage, measured), which must not buy it a fresh attempt."""


class Agent(Protocol):
    """Given a prepared workspace and limits, do the work."""

    name: str

    async def run(self, ctx: AgentContext) -> AgentOutcome: ...

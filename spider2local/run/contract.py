"""The contract between the run and an agent: what the run hands over, what it gets back.

The run prepares a workspace, hands the agent an :class:`AgentContext`, and enforces the deadline
itself; the agent only works. Usage is recorded into a mutable :class:`UsageMeter` as it happens,
so a task cut at its deadline (or crashing mid-way) still reports the turns and tokens spent so
far. The run owns these types; agents (``spider2local.agents``) implement :class:`Agent`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from spider2local.dataset.task import TaskSpec
from spider2local.run.results import Usage
from spider2local.run.transcript import Transcript
from spider2local.sandbox.isolation import IsolationMode
from spider2local.workspace.prepare import Workspace


@dataclass(frozen=True)
class AgentLimits:
    max_turns: int
    timeout: float
    """Seconds for the whole task; enforced by the runner, told to the agent for planning."""
    model: str | None = None
    max_budget_usd: float | None = None
    verify_rounds: int = 2
    skills: tuple[str, ...] = ()


class UsageMeter:
    """Accumulates usage while the agent runs; the runner reads it whatever the ending."""

    def __init__(self) -> None:
        self.usage = Usage()

    def set(self, usage: Usage) -> None:
        self.usage = usage


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
    off_limits: tuple[Path, ...] = ()
    """What the run keeps from the agent (the dataset, the gold folder, the runs folder, the
    suite file, the cache; decided by :meth:`spider2local.integrity.guard.Watch.off_limits`):
    a sandbox hides each, also where it lies under a folder the sandbox binds."""


@dataclass(frozen=True)
class AgentOutcome:
    """How the agent's work ended. Failures are data, not exceptions: ``error`` says what went
    wrong and ``infrastructure`` whether a retry could help (API overloaded, CLI crash before any
    turn)."""

    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    infrastructure: bool = False
    verified: bool | None = None


class Agent(Protocol):
    """Given a prepared workspace and limits, do the work."""

    name: str

    async def run(self, ctx: AgentContext) -> AgentOutcome: ...

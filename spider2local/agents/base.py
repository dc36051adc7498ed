"""The agent protocol: one small interface between the runner and whatever does the work.

The runner prepares a workspace, hands the agent an :class:`AgentContext`, and enforces the
deadline itself; the agent only works. Usage is recorded into a mutable meter as it happens, so a
task cut at its deadline (or crashing mid-way) still reports the turns and tokens spent so far.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from spider2local.dataset import TaskSpec
from spider2local.results import Usage


@dataclass(frozen=True)
class AgentLimits:
    max_turns: int
    timeout: float
    """Seconds for the whole task; enforced by the runner, told to the agent for planning."""
    model: str | None = None
    max_budget_usd: float | None = None
    verify_rounds: int = 2
    skills: tuple[str, ...] = ()


@dataclass(frozen=True)
class Workspace:
    """A fresh copy of one task, as the agent sees it. Gold and eval config are never in it."""

    root: Path
    """The temporary folder holding everything of this attempt."""
    project_dir: Path
    """The dbt project copy: the agent's working directory."""
    database: Path
    """The task database inside the project (what dbt writes and what gets scored)."""
    env: Mapping[str, str]
    """Environment for every process the agent starts: dbt shim first on PATH, clock settings,
    telemetry off. Never preloaded with libfaketime itself."""
    artifacts: Path
    """This task's folder in the run folder (transcript, queries, dbt logs)."""
    scan_path: Path | None = None
    """JSON project scan (models declared in YML: complete / stub / missing)."""
    snapshot_path: Path | None = None
    """JSON snapshot of the start database (tables, row counts, columns and types)."""
    problems: tuple[str, ...] = ()
    """Found while preparing (packages not vendored, unparsable YML); the work may still run."""


class UsageMeter:
    """Accumulates usage while the agent runs; the runner reads it whatever the ending."""

    def __init__(self) -> None:
        self.usage = Usage()

    def set(self, usage: Usage) -> None:
        self.usage = usage


class Transcript:
    """Append-only JSON lines: each message is on disk as soon as it arrives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, kind: str, payload: Mapping[str, Any] | str) -> None:
        line = json.dumps({"t": round(time.time(), 3), "kind": kind, "data": payload},
                          default=str)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


@dataclass
class AgentContext:
    task: TaskSpec
    workspace: Workspace
    limits: AgentLimits
    transcript: Transcript
    meter: UsageMeter = field(default_factory=UsageMeter)


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

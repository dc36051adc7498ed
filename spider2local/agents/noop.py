"""The agent that changes nothing: scores the untouched start database.

A baseline that costs nothing: several Spider2-DBT tasks already hold tables equal to the gold
at the start ("free" tasks), and this agent finds them.
"""

from __future__ import annotations

from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.agents.registry import Capabilities


class NoopAgent:
    name = "noop"
    capabilities = Capabilities()

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        ctx.transcript.append("noop", {"task": ctx.task.id})
        return AgentOutcome()

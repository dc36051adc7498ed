"""The agent that applies a task's reference solution and builds it with dbt.

It proves the pipeline end to end without an API key: if the reference agent does not pass a
task, the fault is in the dataset, the clock or the scorer, never in a model.
"""

from __future__ import annotations

from collections.abc import Sequence

from spider2local.agents.applying import apply_files, build
from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.agents.registry import Capabilities


class ReferenceAgent:
    name = "reference"
    capabilities = Capabilities(needs_solution=True)

    def __init__(self, dbt_args: Sequence[str] = ("run",)) -> None:
        self.dbt_args = tuple(dbt_args)

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        solution = ctx.task.solution_dir
        if solution is None:
            ctx.transcript.append("error", {"solution": None})
            return AgentOutcome(error=f"task {ctx.task.id} has no reference solution "
                                "(solutions/<id>/ or the suite's solution setting)")
        failed = apply_files(ctx, solution)
        return failed if failed is not None else await build(ctx, self.dbt_args)

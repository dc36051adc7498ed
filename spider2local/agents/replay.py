"""The agent that replays files saved earlier (``<replay_dir>/<task id>/``) and builds them.

Use it to re-score a previous attempt's project under today's code, or to check a hand-written
solution, without spending tokens: the files are laid over the fresh project and dbt runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from spider2local.agents.applying import apply_files, build
from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.agents.registry import Capabilities
from spider2local.exceptions import UserError


class ReplayAgent:
    name = "replay"
    capabilities = Capabilities()

    def __init__(self, replay_dir: Path | str | None = None, *, run_dbt: bool = True,
                 dbt_args: Sequence[str] = ("run",)) -> None:
        if replay_dir is None:
            raise UserError("the replay agent needs a folder of files to replay",
                            fix="pass --replay-dir FOLDER, a folder holding one sub-folder "
                                "of files per task id")
        self.replay_dir = Path(replay_dir)
        if not self.replay_dir.is_dir():
            raise UserError("replay folder not found", path=self.replay_dir,
                            fix="pass --replay-dir an existing folder holding one "
                                "sub-folder of files per task id")
        self.run_dbt = run_dbt
        self.dbt_args = tuple(dbt_args)

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        failed = apply_files(ctx, self.replay_dir / ctx.task.id)
        if failed is not None:
            return failed
        return await build(ctx, self.dbt_args) if self.run_dbt else AgentOutcome()

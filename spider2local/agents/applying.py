"""What the file-applying agents share: lay files over the project, then build it with dbt.

The reference and replay agents do no thinking: they copy known SQL/YML over the workspace's
project and run ``dbt run`` exactly as an agent would (through the shim on ``ws.env``'s PATH, so
the task's fake date applies). They exercise the whole pipeline (workspace, clock, dbt,
checkpoint, scoring) without an API key, and give every task a known-good baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from spider2local.agents.contract import AgentContext, AgentOutcome
from spider2local.clock.dbt import DbtResult, decisive_line, run_dbt
from spider2local.core.faults import is_machine_failure
from spider2local.core.layout import DBT_LOGS
from spider2local.exceptions import DbtError
from spider2local.workspace.activate import CONTEXT_DIR
from spider2local.workspace.copy import copy_tree

SKIP_FILES = frozenset({"target", "logs", "dbt_packages", CONTEXT_DIR, "__pycache__"})
"""Never applied from a files folder: build output and our own context are not solutions."""


def apply_files(ctx: AgentContext, source: Path) -> AgentOutcome | None:
    """Copy ``source`` over the project and log it; an error outcome if ``source`` is unusable."""
    if not source.is_dir():
        ctx.transcript.append("error", {"missing_files": str(source)})
        return AgentOutcome(error=f"no files to apply: {source} is not a folder")
    files = sorted(str(p.relative_to(source)) for p in source.rglob("*")
                   if p.is_file() and p.relative_to(source).parts[0] not in SKIP_FILES)
    copy_tree(source, ctx.workspace.project_dir, skip=SKIP_FILES)
    ctx.transcript.append("apply", {"source": str(source), "files": files})
    return None


async def build(ctx: AgentContext, args: Sequence[str] = ("run",)) -> AgentOutcome:
    """Run ``dbt <args>`` in the workspace and turn its ending into an outcome."""
    ws = ctx.workspace
    ctx.transcript.append("dbt", {"args": list(args)})
    try:
        result = await run_dbt(ws.project_dir, list(args), env=ws.env,
                               timeout=ctx.limits.timeout, logs_dir=ws.artifacts / DBT_LOGS)
    except DbtError as exc:
        ctx.transcript.append("error", {"dbt": str(exc)})
        return AgentOutcome(error=f"dbt could not start: {exc}", infrastructure=True)
    ctx.transcript.append("dbt_result", _summary(result))
    error = describe_failure(result)
    # dbt failed because the disk is full (or memory, or file handles ran out), or could not
    # be executed at all: the machine's fault, not the solution's, so the task is re-run rather
    # than scored on a half build.
    # A timeout's kill is ours (the agent's verdict); any other SIGKILL is the kernel's.
    machine = error is not None and not result.timed_out and is_machine_failure(
        result.returncode,
        f"{error}\n{result.stderr_tail}\n{' '.join(result.error_messages())}")
    return AgentOutcome(error=error, infrastructure=machine)


def describe_failure(result: DbtResult) -> str | None:
    """One line on why a dbt invocation failed; None when it succeeded."""
    if result.timed_out:
        return f"dbt {' '.join(result.args)} timed out after {result.duration:.0f}s"
    if result.ok:
        return None
    # the decisive line of each (decisive_line): "Runtime Error in model x" alone said nothing
    failed = [line if f" {m.name} " in f" {line} " else f"{m.name}: {line}"
              for m in result.errored() for line in (m.error_line,)]
    details = failed or [decisive_line(m) for m in result.error_messages()] \
        or [decisive_line(result.stderr_tail.strip()[-300:])]
    text = "; ".join(d for d in details if d) or "no details"
    return f"dbt {' '.join(result.args)} failed (exit {result.returncode}): {text}"


def _summary(result: DbtResult) -> dict[str, object]:
    return {"returncode": result.returncode, "timed_out": result.timed_out,
            "duration": round(result.duration, 2),
            "models": {m.name: m.status for m in result.models}}

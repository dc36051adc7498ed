"""What does the command agent cost over a bare ``sh -c`` of the same command?

Per repetition, on one prepared workspace of a sample task: a bare ``sh -c 'true'`` through the
runner's one subprocess helper, then the command agent running the same command without a
sandbox and inside the namespace sandbox (contract files, environment, launcher, output kept,
usage read, marker sweep). Runs alternate so machine load drifts into every side; medians are
compared. Target: the agent in the sandbox adds under 0.5 s per task.

    .venv/bin/python benchmarks/bench_command_agent.py [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from spider2local.agents.contract import AgentContext, AgentLimits
from spider2local.agents.registry import make_agent
from spider2local.core.transcript import Transcript
from spider2local.dataset.load import load_dataset
from spider2local.proc.run import run_process
from spider2local.sandbox.isolation import IsolationMode
from spider2local.sandbox.probe import probe
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace

TARGET = 0.5
COMMAND = "true"


async def bare(project: Path) -> float:
    started = time.perf_counter()
    await run_process(["/bin/sh", "-c", COMMAND], cwd=project, timeout=60)
    return time.perf_counter() - started


async def agent(ctx: AgentContext) -> float:
    started = time.perf_counter()
    outcome = await make_agent("command", command=COMMAND).run(ctx)
    assert outcome.error is None, outcome.error
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    reps = parser.parse_args().reps
    task = load_dataset(load_suite(bundled_suite_path())).tasks[0]
    modes = [IsolationMode.NONE] + ([IsolationMode.NAMESPACE] if probe().ok else [])
    times: dict[str, list[float]] = {"bare": [], **{m.value: [] for m in modes}}
    with tempfile.TemporaryDirectory() as tmp:
        ws = prepare_workspace(task, artifacts=Path(tmp) / "artifacts", parent=Path(tmp))
        try:
            for _ in range(reps):
                times["bare"].append(anyio.run(bare, ws.project_dir))
                for mode in modes:
                    ctx = AgentContext(task=task, workspace=ws,
                                       limits=AgentLimits(max_turns=1, timeout=60),
                                       transcript=Transcript(Path(tmp) / "t.jsonl"),
                                       isolation=mode)
                    times[mode.value].append(anyio.run(agent, ctx))
        finally:
            cleanup_workspace(ws)
    base = statistics.median(times["bare"])
    print(f"bare sh -c: median {base * 1000:.0f} ms over {reps} reps")
    worst = 0.0
    for mode in modes:
        median = statistics.median(times[mode.value])
        worst = max(worst, median - base)
        print(f"command agent, isolation {mode.value}: median {median * 1000:.0f} ms, "
              f"+{(median - base) * 1000:.0f} ms over bare ({median / base:.1f}x)")
    if len(modes) == 1:
        print("(namespaces unavailable here: the sandboxed side was not measured)")
    print(f"target: under +{TARGET * 1000:.0f} ms: {'ok' if worst < TARGET else 'MISSED'}")
    return 0 if worst < TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

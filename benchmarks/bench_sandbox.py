"""What does the namespace sandbox cost per task? One whole Claude agent session (real SDK and
bundled CLI, a 1-request scripted session against the loopback fake API) on the sample's
bakery001 workspace, with isolation none vs namespace.

Sessions alternate (none, namespace, none, ...) so machine load drifts into both sides equally;
medians are compared. Target: the absolute extra time per session < 0.5 s.

    .venv/bin/python benchmarks/bench_sandbox.py [--reps 5]
"""

from __future__ import annotations

import argparse
import dataclasses
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
from spider2local.sandbox.isolation import IsolationMode
from spider2local.sandbox.probe import probe
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.suite.model import SAMPLE
from spider2local.testing import FakeAnthropic, reply
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace

TARGET_SECONDS = 0.5


def one_session(isolation: IsolationMode, parent: Path) -> float:
    data = load_dataset(load_suite(bundled_suite_path()).with_dataset(SAMPLE))
    task = next(t for t in data.tasks if t.id == "bakery001")
    with FakeAnthropic([reply("done", input_tokens=5)]) as fake:
        ws = prepare_workspace(task, artifacts=parent / "run" / task.id, parent=parent)
        try:
            ws = dataclasses.replace(ws, env={**ws.env, **fake.env()})
            ctx = AgentContext(task=task, workspace=ws,
                               limits=AgentLimits(max_turns=3, timeout=120,
                                                  model="claude-sonnet-4-5", verify_rounds=0),
                               transcript=Transcript(ws.artifacts / "transcript.jsonl"),
                               isolation=isolation)
            started = time.perf_counter()
            outcome = anyio.run(make_agent("claude").run, ctx)
            elapsed = time.perf_counter() - started
        finally:
            cleanup_workspace(ws)
    if outcome.error:
        raise SystemExit(f"session failed ({isolation}): {outcome.error}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if not probe().ok:
        print(f"no namespace sandbox here: {probe().reason}")
        return 1
    times: dict[IsolationMode, list[float]] = {IsolationMode.NONE: [],
                                               IsolationMode.NAMESPACE: []}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        one_session(IsolationMode.NONE, Path(tmp))  # warm the caches (sample build, imports)
        for _ in range(args.reps):
            for mode in times:
                times[mode].append(one_session(mode, Path(tmp)))
    plain = statistics.median(times[IsolationMode.NONE])
    boxed = statistics.median(times[IsolationMode.NAMESPACE])
    for mode, values in times.items():
        print(f"{mode.value:>10}: median {statistics.median(values):.3f}s  "
              f"({', '.join(f'{v:.2f}' for v in values)})")
    delta = boxed - plain
    print(f"sandbox overhead per session: {delta:+.3f}s (ratio {boxed / plain:.2f}); "
          f"target < {TARGET_SECONDS}s: {'ok' if delta < TARGET_SECONDS else 'MISSED'}")
    return 0 if delta < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())

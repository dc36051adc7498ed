"""What does the runner cost? The sample suite with the reference agent, serial vs --jobs 3.

Prints the wall time of the whole suite run serially (--jobs 1) and with --jobs 3 (the ratio
is the concurrency gain; on 2 cores it is bounded by dbt's CPU use), and the runner's own
overhead per task: everything but the agent stage (which holds the agent's dbt runs), i.e.
``total - agent`` from the per-stage durations each result records (prepare, checkpoint, score,
collect, cleanup). Target: median overhead under 1 s.

    .venv/bin/python benchmarks/bench_runner.py [--jobs 3] [--keep-runs]
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from spider2local.core.results import TaskResult
from spider2local.dataset.load import load_dataset
from spider2local.run.plan import execute_run, plan_run
from spider2local.run.progress import Progress
from spider2local.suite.load import bundled_suite_path, load_suite

TARGET_OVERHEAD = 1.0


def run_suite(runs_dir: Path, run_id: str, jobs: int) -> tuple[float, dict[str, TaskResult]]:
    suite = load_suite(bundled_suite_path())
    plan = plan_run(suite, load_dataset(suite), agent="reference", runs_dir=runs_dir,
                    run_id=run_id, jobs=jobs)
    started = time.monotonic()
    outcome = anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    return time.monotonic() - started, dict(outcome.ran)


def overheads(results: dict[str, TaskResult]) -> dict[str, float]:
    return {tid: r.durations["total"] - r.durations.get("agent", 0.0)
            for tid, r in sorted(results.items())}


def report(label: str, wall: float, results: dict[str, TaskResult]) -> list[float]:
    statuses = ", ".join(f"{tid}={r.status.value}" for tid, r in sorted(results.items()))
    print(f"{label}: wall {wall:6.1f}s  ({statuses})")
    values = overheads(results)
    for tid, value in values.items():
        stages = {k: v for k, v in results[tid].durations.items() if k not in ("total",)}
        print(f"    {tid:<12} overhead {value:5.2f}s  stages {stages}")
    return list(values.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--keep-runs", action="store_true")
    args = parser.parse_args()
    runs = Path(tempfile.mkdtemp(prefix="bench-runner-"))
    serial_wall, serial = run_suite(runs, "serial", 1)
    parallel_wall, parallel = run_suite(runs, "parallel", args.jobs)
    values = report("serial   (--jobs 1)", serial_wall, serial)
    values += report(f"parallel (--jobs {args.jobs})", parallel_wall, parallel)
    median = statistics.median(values)
    print(f"\nwall time serial/parallel: {serial_wall:.1f}s / {parallel_wall:.1f}s = "
          f"{serial_wall / parallel_wall:.2f}x")
    verdict = "OK" if median < TARGET_OVERHEAD else "MISSED"
    print(f"runner overhead per task: median {median:.2f}s, max {max(values):.2f}s "
          f"(target: median < {TARGET_OVERHEAD:.1f}s: {verdict})")
    if not args.keep_runs:
        shutil.rmtree(runs, ignore_errors=True)
    else:
        print(f"runs kept in {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

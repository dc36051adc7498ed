"""What does the fake clock cost? Wall time of a 4-thread `dbt run`, preloaded vs not.

The wrong libfaketime recipe made a 4-thread `dbt run` 2-4x slower (threads spinning on a
half-faked monotonic clock); the right one should cost next to nothing. Runs alternate
(real, faked, real, faked, ...) so machine load drifts into both sides equally, and medians are
compared. Target: faked/real <= 1.15.

    .venv/bin/python benchmarks/bench_clock.py [--reps 3] [--models 8]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
from pathlib import Path

import anyio

from spider2local.clock.dbt import run_dbt
from spider2local.clock.faketime import Clock, find_library, strip_fake_clock

TARGET = 1.15


def make_project(root: Path, models: int) -> Path:
    """A few table models that read the clock and do a little real work each, 4 threads."""
    (root / "models").mkdir(parents=True)
    (root / "dbt_project.yml").write_text(
        "name: bench\nversion: '1.0'\nprofile: bench\n"
        "models:\n  bench:\n    +materialized: table\n")
    (root / "profiles.yml").write_text(
        "bench:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        "      path: ./bench.duckdb\n      threads: 4\n")
    for i in range(models):
        (root / "models" / f"m{i}.sql").write_text(
            f"select current_date as d, {i} as i, count(*) as n, sum(range % 7) as s "
            "from range(2000000)\n")
    return root


async def one_run(project: Path, env: dict[str, str]) -> float:
    result = await run_dbt(project, ["run"], env=env, timeout=600)
    if not result.ok:
        sys.exit(f"dbt run failed:\n{result.stdout_tail[-3000:]}")
    return result.duration


async def main(reps: int, models: int) -> None:
    clock = Clock(datetime.date(2024, 1, 15), find_library())
    real_env = strip_fake_clock(os.environ)
    faked_env = clock.faked_env(os.environ)
    times: dict[str, list[float]] = {"real": [], "faked": []}
    with tempfile.TemporaryDirectory() as tmp:
        project = make_project(Path(tmp) / "bench", models)
        await one_run(project, real_env)  # warm-up: bytecode, page cache
        for rep in range(reps):
            for label, env in (("real", real_env), ("faked", faked_env)):
                times[label].append(await one_run(project, env))
                print(f"rep {rep + 1} {label:5s} {times[label][-1]:6.2f} s", flush=True)
    real, faked = statistics.median(times["real"]), statistics.median(times["faked"])
    ratio = faked / real
    verdict = "OK" if ratio <= TARGET else "OVER TARGET"
    print(f"median real {real:.2f} s, faked {faked:.2f} s, ratio {ratio:.3f}x "
          f"(target <= {TARGET}x): {verdict}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", type=int, default=8)
    options = parser.parse_args()
    anyio.run(main, options.reps, options.models)

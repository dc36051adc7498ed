"""What does warm dbt buy? Agent-visible wall time of dbt calls through the shim, cold vs warm.

In a prepared sample workspace (library001) and in a real task workspace (../shared's mrr001),
each of `dbt run --select <one model>`, `dbt compile`, `dbt show --inline 'select 1'` and
`dbt test` runs through faketime/dbt, cold (no server) and warm (the workspace's server),
interleaved (cold, warm, cold, warm, ...) so machine load drifts into both sides; medians are
compared. Then the reference agent's whole run of the sample suite, warm vs cold (the runner
starts no server for it by default: :func:`spider2local.run.settings.wants_warm_dbt`).
Also printed: the server's start-up time, its first warm call (which compiles dbt's mashumaro
serialisers itself, as a cold call, and reports them), what the server then compiled in its
idle time (so later calls skip it) and its resident size. Each command gets one untimed cold
and one untimed warm call first. Target: run --select >= 3x.

    .venv/bin/python benchmarks/bench_dbt.py [--reps 5] [--skip-suite | --suite-only]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from spider2local.clock import warm
from spider2local.clock.faketime import RUNS_ENV
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.resources import faketime_dir
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.suite.model import Suite
from spider2local.workspace.model import Workspace
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace

TARGET = 3.0
SHARED = Path(__file__).resolve().parents[2] / "shared" / "spider2-dbt"
SHIM = faketime_dir() / "dbt"


def calls(model: str) -> dict[str, list[str]]:
    return {f"run --select {model}": ["run", "--select", model], "compile": ["compile"],
            "show --inline 'select 1'": ["show", "--inline", "select 1"], "test": ["test"]}


def timed(ws: Workspace, args: list[str], *, hot: bool) -> float:
    env = dict(ws.env)
    if not hot:
        env.pop(warm.SOCKET_ENV)
    env.pop(RUNS_ENV, None)
    started = time.monotonic()
    subprocess.run([str(SHIM), *args], cwd=ws.project_dir, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=900, check=False)
    return time.monotonic() - started


def workspace(task: TaskSpec, tmp: Path) -> tuple[Workspace, subprocess.Popen[bytes], float]:
    ws = prepare_workspace(task, artifacts=tmp / f"art-{task.id}")
    env = warm.warm_env(ws.env, ws.root)
    ws = Workspace(ws.root, ws.project_dir, ws.database, env, ws.artifacts)
    warm.prepare_dir(ws.root)
    argv, server_env = warm.server_command(env, ws.root)
    started = time.monotonic()
    server = subprocess.Popen(argv, env=server_env, cwd=ws.root, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    if not anyio.run(warm.wait_ready, ws.root, 600.0):
        sys.exit(f"warm server did not start: {warm.log_path(ws.root).read_text()}")
    return ws, server, time.monotonic() - started


def first_model(ws: Workspace) -> str:
    models = sorted(p.stem for p in (ws.project_dir / "models").rglob("*.sql")
                    if p.read_text().strip())
    return models[0]


def bench_workspace(label: str, task: TaskSpec, tmp: Path, reps: int) -> float | None:
    ws, server, ready = workspace(task, tmp)
    found = warm.report(ws.root, None)
    print(f"\n{label} ({task.id}): server ready in {ready:.1f}s (imports "
          f"{found.get('import_seconds', 0):.1f}s, resident {found['resident_kib'] // 1024} "
          f"MiB)")
    ratio_run = None
    try:
        for n, (name, args) in enumerate(calls(first_model(ws)).items()):
            timed(ws, args, hot=False)  # warm-up: page cache, bytecode, partial parse
            first = timed(ws, args, hot=True)  # compiles what it needs, and tells the server
            if n == 0:
                print(f"  first warm call ({name}): {first:.2f}s (compiles dbt's serialisers "
                      "itself, as a cold call)")
            sides: dict[str, list[float]] = {"cold": [], "warm": []}
            for _ in range(reps):
                sides["cold"].append(timed(ws, args, hot=False))
                sides["warm"].append(timed(ws, args, hot=True))
            cold, hot = statistics.median(sides["cold"]), statistics.median(sides["warm"])
            ratio = cold / hot
            if name.startswith("run"):
                ratio_run = ratio
            print(f"  {name:28s} cold {cold:6.2f}s  warm {hot:6.2f}s  ratio {ratio:4.1f}x")
        done = warm.report(ws.root, None)
        warmed = done.get("warmed", {})
        print(f"  calls served warm: {done['calls']}; the server compiled "
              f"{warmed.get('serialisers', 0)} serialisers its children had needed and built "
              f"{warmed.get('schemas', 0)} schemas in {warmed.get('seconds', 0):.1f}s of its "
              f"idle time; resident {warmed.get('resident_kib', 0) // 1024} MiB")
    finally:
        server.kill()
        server.wait()
        cleanup_workspace(ws)
    return ratio_run


def reference_suite(warm_on: bool, runs: Path) -> float:
    from spider2local.run import runner
    from spider2local.run.plan import execute_run, plan_run
    from spider2local.run.progress import Progress

    suite = load_suite(bundled_suite_path())
    plan = plan_run(suite, load_dataset(suite), agent="reference", runs_dir=runs,
                    run_id=f"warm-{warm_on}", warm_dbt=warm_on)
    runner.wants_warm_dbt = lambda settings: settings.value("warm_dbt")  # type: ignore[assignment]
    started = time.monotonic()
    anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))
    return time.monotonic() - started


def main(reps: int, skip_suite: bool, suite_only: bool = False) -> None:
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians of "
          f"{reps} interleaved calls")
    suite = load_suite(bundled_suite_path())
    sample = {t.id: t for t in load_dataset(suite).tasks}["library001"]
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        ratio = None if suite_only else bench_workspace("sample workspace", sample, tmp, reps)
        if suite_only:
            pass
        elif SHARED.is_dir():
            real = {t.id: t for t in load_dataset(Suite(path=Path("tasks.toml"),
                                                        dataset=SHARED)).tasks}["mrr001"]
            bench_workspace("real task workspace", real, tmp, reps)
        else:
            print(f"\n(skipped the real task: {SHARED} is absent)")
        if not skip_suite:
            cold = reference_suite(False, tmp / "runs")
            hot = reference_suite(True, tmp / "runs")
            print(f"\nreference agent, whole sample suite: cold {cold:.1f}s, warm {hot:.1f}s "
                  f"(ratio {cold / hot:.2f}x)")
    if suite_only:
        return
    verdict = "PASS" if ratio is not None and ratio >= TARGET else "FAIL"
    print(f"\n{verdict}: run --select on the sample {ratio or 0:.1f}x (target >= {TARGET}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--skip-suite", action="store_true")
    parser.add_argument("--suite-only", action="store_true",
                        help="only the reference agent's whole run, warm vs cold")
    options = parser.parse_args()
    main(options.reps, options.skip_suite, options.suite_only)

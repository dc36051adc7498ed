"""``spider2local run`` / ``score`` / ``shell`` as a user runs them: real subprocesses, real dbt,
the bundled sample suite and the real Spider2-DBT tasks (skipped when absent)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spider2local.core.results import load_result, save_result
from spider2local.dataset.sample import build as sample_build
from spider2local.proc.kill import faketime_leftovers
from tests.helpers import (
    TINY_SOLVE,
    ReferenceRun,
    hold_lock,
    make_duckdb,
    tiny_disk_prefix,
)

pytestmark = pytest.mark.process

SAMPLE_SOURCES = Path(sample_build.__file__).resolve().parent
SAMPLE_IDS = ("bakery001", "fleet001", "gym001", "library001")
TINY_IDS = ("t1", "t2", "t3", "t4")


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spider2local", *args], cwd=cwd,
                          env=env or {**os.environ, "PYTHONWARNINGS": "ignore"},
                          capture_output=True, text=True, timeout=timeout, check=False)


def spawn(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    log = (cwd / "runner.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "spider2local", *args], cwd=cwd,
                            stdout=log, stderr=subprocess.STDOUT, env=env)


def results(run_dir: Path) -> dict[str, dict[str, object]]:
    return {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("*/result.json")}


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()


def alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def interrupt_both_dbt_runs(runner: subprocess.Popen[bytes],
                            signals: tuple[signal.Signals, ...]) -> tuple[set[int], int]:
    """Once both tasks' dbt run (told apart by their workspace: a fixed sleep was a guess),
    send ``signals`` 50 ms apart (a second Ctrl-C lands during the shutdown); returns the
    runner's processes at that moment and its exit code."""
    try:
        wait_for(lambda: len(dbt_workspaces(runner.pid)) == 2, 120, "a dbt child per task")
        children = descendants(runner.pid)
        for sig in signals:
            runner.send_signal(sig)
            time.sleep(0.05)
        return children, runner.wait(30)
    finally:
        if runner.poll() is None:
            runner.kill()


def sigkill(runner: subprocess.Popen[bytes]) -> set[int]:
    """kill -9 the runner; returns its processes (taken before and after the kill: what the
    next command must find and reap)."""
    left = descendants(runner.pid)
    if runner.poll() is None:
        runner.send_signal(signal.SIGKILL)
        runner.wait(10)
    return left | descendants(runner.pid)


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (children start their own sessions: walk ppids)."""
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and fields[0] != "Z":
            parent[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def dbt_workspaces(root: int) -> set[str]:
    """The working folders of the dbt processes below ``root``: one per task running dbt."""
    found = set()
    for pid in descendants(root):
        if "dbt" in cmdline(pid):
            try:
                found.add(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                continue
    return found


BASELINE_MODULE = "spider2local.sandbox.scoring"
"""The reader child that scores every start database before any agent (the free passes)."""


def in_free_passes(root: int, log: Path) -> bool:
    """The run is scoring its start databases: that child runs and no task has started."""
    started = log.exists() and ": started" in log.read_text()
    return not started and any(BASELINE_MODULE in cmdline(p) for p in descendants(root))


def wait_for(predicate: object, limit: float, what: str, poll: float = 0.1) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what}")


# -- fast: no dbt ---------------------------------------------------------------------------
@pytest.mark.in_process_readers  # its subject is not the readers
def test_noop_fails_every_sample_task_that_needs_work(tmp_path: Path) -> None:
    proc = cli("run", "--agent", "noop", "--runs-dir", "runs", "--run-id", "n", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = results(tmp_path / "runs" / "n")
    assert sorted(found) == list(SAMPLE_IDS)
    assert {r["status"] for r in found.values()} == {"failed"}
    assert "passed 0/4 (0.0% [0.0%, 60.2%]) official, with gold, runnable, attempted and " \
           "selected" in proc.stdout
    manifest = json.loads((tmp_path / "runs" / "n" / "run.json").read_text())
    assert manifest["agent"] == "noop" and manifest["model"] is None
    assert manifest["suite"]["sha256"] and manifest["versions"]["dbt-duckdb"]
    assert [t["id"] for t in manifest["tasks"]] == list(SAMPLE_IDS)
    assert manifest["interrupted"] is False


@pytest.mark.in_process_readers  # its subject is not the readers
def test_noop_passes_both_real_tasks(shared_dataset: Path, tmp_path: Path) -> None:
    # Both real tasks are "free": their start databases already hold gold-equal tables.
    proc = cli("run", "--dataset", str(shared_dataset), "--agent", "noop", "--runs-dir", "runs",
               "--run-id", "real", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["rates"]["tasks_passed"] == 2 == report["rates"]["tasks_total"]
    assert {r["status"] for r in results(tmp_path / "runs" / "real").values()} == {"passed"}


def test_reference_without_any_solution_is_refused(shared_dataset: Path, tmp_path: Path) -> None:
    # The real tasks ship no reference solution: scoring their untouched databases would be
    # reported as a reference "pass" that proves nothing, and skipping every task made a run
    # that tested nothing and exited 0 (issue 23). One line, exit 2, no run folder.
    proc = cli("run", "--dataset", str(shared_dataset), "--agent", "reference", "--runs-dir",
               "runs", "--run-id", "ref", "--json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "none of the 2 selected tasks has a reference solution" in lines[0]
    assert not (tmp_path / "runs" / "ref" / "run.json").exists()


@pytest.mark.parametrize("args, fragment", [
    (["nosuch001"], "unknown task id(s) in the command line: nosuch001"),
    (["--subset", "nosuch"], "unknown subset 'nosuch'"),
    (["--shard", "5/4"], "--shard 5/4"),
    (["--agent", "replay"], "replay agent needs a folder"),
    (["--agent", "noop", "--replay-dir", "."], "--replay-dir does not apply to --agent noop"),
    (["--run-id", "../up"], "--run-id '../up' is not a plain folder name"),
    (["--runs-dir", "/proc/spider2local-x"], "cannot write the run folder"),
    (["--prompts", "nosuch"], "--prompts: not a prompts folder"),
    (["--prompts", "."], "--prompts: not a prompts folder (missing agent.md"),
    (["--skills", "nosuch"], "--skills: not a skills folder"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                          fragment: str) -> None:
    proc = cli("run", "--agent", "noop", *args, cwd=tmp_path) if "--agent" not in args \
        else cli("run", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_missing_libfaketime_fails_once_before_anything(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "SPIDER2LOCAL_LIBFAKETIME": str(tmp_path / "missing.so")}
    proc = cli("run", "--agent", "noop", "--run-id", "x", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "libfaketime library not found" in proc.stderr
    assert not (tmp_path / "runs" / "x").exists()


def test_claude_without_credentials_fails_before_anything(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}
    proc = cli("run", "--agent", "claude", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "ANTHROPIC_API_KEY" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_unknown_skill_in_the_suite_fails_before_anything(tmp_path: Path) -> None:
    # Found at prepare time instead, it failed every task, exited 0 and blocked a resume.
    (tmp_path / "tasks.toml").write_text('[dataset]\nroot = "sample"\n[run]\nagent = "claude"\n'
                                         '[tasks.gym001]\nskills = ["no-such-skill"]\n')
    proc = cli("run", "--runs-dir", "runs", cwd=tmp_path,
               env={**os.environ, "ANTHROPIC_API_KEY": "test",
                    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"})  # never a real API
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "tasks.toml: tasks.gym001.skills: unknown skill(s) 'no-such-skill'" in line
    assert "dbt-project-workflow" in line and "\n" not in line
    assert not (tmp_path / "runs").exists()


def test_ctrl_c_before_the_run_starts_is_exit_130_without_traceback(tmp_path: Path) -> None:
    # The CLI is held before any run starts (as it can be while a sample suite is built on
    # first use) and gets Ctrl-C there. A FIFO as the suite used to hold it; the suite is now
    # opened non-blocking and refused, so a sitecustomize makes loading the suite wait on a
    # FIFO nobody writes.
    hold = tmp_path / "hold"
    os.mkfifo(hold)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import os\n"
        "import spider2local.suite.load as load\n"
        "real = load.load_suite\n"
        "def held(path):\n"
        "    with open(os.environ['HOLD_FIFO']) as fh:\n"
        "        fh.read()\n"
        "    return real(path)\n"
        "load.load_suite = held\n")
    env = {**os.environ, "HOLD_FIFO": str(hold),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "site"),
                                                       os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "spider2local", "run", "--agent", "noop"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        wait_for(lambda: "partner" in Path(f"/proc/{proc.pid}/wchan").read_text()
                 or "fifo" in Path(f"/proc/{proc.pid}/wchan").read_text(), 60,
                 "the CLI to block on the suite file")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip() == "spider2local: interrupted" and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.in_process_readers  # its subject is not the readers
def test_keep_prints_the_workspace_and_leaves_it(tmp_path: Path) -> None:
    proc = cli("run", "bakery001", "--agent", "noop", "--keep", "--runs-dir", "runs",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "workspace kept:" in x)
    kept = Path(line.split("workspace kept:", 1)[1].split(" (", 1)[0].strip())
    assert "2024-09-15" in line and ".spider2local/activate" in line  # the clock, said
    try:
        assert (kept / "dbt_project.yml").is_file()
    finally:
        subprocess.run(["rm", "-rf", str(kept.parent)], check=True)


def test_shell_command_runs_in_the_agents_environment(tmp_path: Path) -> None:
    proc = cli("shell", "gym001", "--agent", "noop", "--command",
               'echo "date=$SPIDER2LOCAL_FAKE_DATE dbt=$(command -v dbt) pwd=$PWD"; exit 3',
               cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    out = proc.stdout.strip()
    assert "date=2024-08-27" in out and "/faketime/dbt" in out
    workspace = Path(out.split("pwd=", 1)[1])
    assert workspace.name == "gym001" and not workspace.exists()  # removed afterwards


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow  # four CLI runs (~4 s)
def test_score_run_dir_exits_1_when_nothing_could_be_rescored(tmp_path: Path) -> None:
    for run_id, keep in (("plain", ()), ("kept", ("--keep-db",))):
        proc = cli("run", "bakery001", "--agent", "noop", "--runs-dir", "runs", "--run-id",
                   run_id, *keep, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    plain = cli("score", "runs/plain", cwd=tmp_path)
    assert plain.returncode == 1, plain.stderr
    assert "bakery001: not re-scorable: no kept database" in plain.stderr
    assert "nothing re-scored: no task of" in plain.stderr
    # the report is still printed
    assert re.search(r"0/1 \(0\.0% \[[^]]*\]\) attempted and selected", plain.stdout)
    kept = cli("score", "runs/kept", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert "nothing re-scored" not in kept.stderr


def test_shell_gets_the_tasks_own_skills(tmp_path: Path) -> None:
    (tmp_path / "tasks.toml").write_text(
        '[dataset]\nroot = "sample"\n[run]\nagent = "claude"\n'
        'skills = ["dbt-project-workflow", "duckdb-dialect"]\n'
        '[tasks.gym001]\nskills = ["fixed-clock-dates"]\nskip_skills = ["duckdb-dialect"]\n')
    proc = cli("shell", "gym001", "--command", "ls .claude/skills", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["dbt-project-workflow", "fixed-clock-dates"]
    noop = cli("shell", "gym001", "--agent", "noop", "--command", "ls -a", cwd=tmp_path)
    assert noop.returncode == 0 and ".claude" not in noop.stdout.split(), noop.stderr


# -- slow: real dbt -------------------------------------------------------------------------
@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_reference_passes_every_sample_task_and_score_rebuilds_verdicts(
        reference_run: ReferenceRun, tmp_path: Path) -> None:
    """The session's `run --agent reference --jobs 2 --keep-db` (tests/conftest.py) as a user
    sees it, then `score` on a copy of its folder (the run itself is shared: never changed)."""
    proc = reference_run.outcome
    assert proc.returncode == 0, proc.stderr
    assert "passed 4/4 (100.0% [39.8%, 100.0%]) official, with gold, runnable, attempted and " \
           "selected" in proc.stdout
    rows = {cells[0]: tuple(cells[1:4]) for cells in map(str.split, proc.stdout.splitlines())
            if cells[:1] and cells[0] in SAMPLE_IDS}  # task, status, verdict, tables
    assert {tid: row[:2] for tid, row in rows.items()} == dict.fromkeys(SAMPLE_IDS,
                                                                        ("passed", "pass"))
    found = results(reference_run.run_dir)
    assert {tid: r["status"] for tid, r in found.items()} == dict.fromkeys(SAMPLE_IDS, "passed")
    for tid in SAMPLE_IDS:
        task_dir = reference_run.run_dir / tid
        assert list((task_dir / "dbt").glob("*run_results.json")), tid
        assert (task_dir / "result.duckdb").is_file()
        assert list((task_dir / "project" / "models").glob("*.sql"))
        # Stage durations: dbt ran inside the agent stage, which lies within the task's total,
        # which lies within the command's own wall time (the transcript rounds to 10 ms).
        durations = found[tid]["durations"]
        assert isinstance(durations, dict)
        events = [json.loads(x) for x in (task_dir / "transcript.jsonl").read_text().splitlines()]
        dbt = next(e["data"]["duration"] for e in events if e["kind"] == "dbt_result")
        assert 0 < dbt <= durations["agent"] + 0.01, (dbt, durations)
        assert durations["agent"] <= durations["total"] <= proc.seconds, durations
        assert rows[tid][2] == f"{found[tid]['tables_passed']}/{found[tid]['tables_total']}"
    # Tamper with one verdict and drop a kept database: score rebuilds from the databases.
    run_dir = tmp_path / "runs" / "ref"
    shutil.copytree(reference_run.run_dir, run_dir)
    path = run_dir / "gym001" / "result.json"
    old = load_result(path)
    assert old is not None
    save_result(path, old.__class__(**{**old.__dict__, "passed": False, "tables_passed": 0}))
    (run_dir / "fleet001" / "result.duckdb").unlink()
    rescored = cli("score", str(run_dir), cwd=tmp_path)
    assert rescored.returncode == 0, rescored.stderr
    assert "fleet001: not re-scorable: no kept database" in rescored.stderr
    again = load_result(path)
    assert again is not None and again.passed and again.tables_passed == 2
    assert again.started_at == old.started_at
    one = cli("score", str(run_dir / "gym001" / "result.duckdb"), "--task", "gym001",
              cwd=tmp_path)
    assert one.returncode == 0, one.stdout + one.stderr


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_sabotage_replay_fails_with_the_column_diagnostic(tmp_path: Path) -> None:
    solution = SAMPLE_SOURCES / "solutions" / "fleet001" / "models"
    wrong = tmp_path / "replay" / "fleet001" / "models"
    wrong.mkdir(parents=True)
    sql = (solution / "vehicle_performance.sql").read_text()
    assert "}}, 2)" in sql
    (wrong / "vehicle_performance.sql").write_text(sql.replace("}}, 2)", "}}, 0)"))
    proc = cli("run", "fleet001", "--agent", "replay", "--replay-dir", str(tmp_path / "replay"),
               "--runs-dir", "runs", "--run-id", "sab", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = results(tmp_path / "runs" / "sab")["fleet001"]
    assert result["status"] == "failed" and result["error"] is None
    table = result["score"]["tables"][0]  # type: ignore[index]
    assert [c["gold_column"] for c in table["columns"]] == ["fare_per_km"]


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_sabotage_replay_on_a_real_task(shared_dataset: Path, tmp_path: Path) -> None:
    model = shared_dataset / "examples" / "playbook001" / "models" / "attribution_touches.sql"
    wrong = tmp_path / "replay" / "playbook001" / "models"
    wrong.mkdir(parents=True)
    sql = model.read_text()
    assert "revenue * (1.0 / total_sessions)" in sql
    (wrong / model.name).write_text(sql.replace("revenue * (1.0 / total_sessions)",
                                                "revenue * (2.0 / total_sessions)"))
    proc = cli("run", "playbook001", "--dataset", str(shared_dataset), "--agent", "replay",
               "--replay-dir", str(tmp_path / "replay"), "--runs-dir", "runs", "--run-id", "s",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = results(tmp_path / "runs" / "s")["playbook001"]
    assert result["status"] == "failed"
    columns = result["score"]["tables"][0]["columns"]  # type: ignore[index]
    assert [c["gold_column"] for c in columns] == ["linear_revenue"]


@pytest.mark.slow
def test_sigkill_then_resume_scores_every_task_exactly_once(tmp_path: Path,
                                                            kill_leftovers: set[int]) -> None:
    args = ("run", "bakery001", "fleet001", "--agent", "reference", "--jobs", "1",
            "--runs-dir", "runs", "--run-id", "k")
    run_dir = tmp_path / "runs" / "k"
    runner = spawn(*args, cwd=tmp_path)
    try:
        wait_for(lambda: (run_dir / "bakery001" / "result.json").is_file(), 180, "bakery001")
        # Killed with fleet001's dbt running: the resume must find it and reap it.
        wait_for(lambda: any("fleet001" in w for w in dbt_workspaces(runner.pid)), 60,
                 "fleet001's dbt")
    finally:
        kill_leftovers |= sigkill(runner)
    first = results(run_dir)
    assert list(first) == ["bakery001"]
    attempt = json.loads((run_dir / "fleet001" / "transcript.jsonl").read_text().splitlines()[0])
    stale = Path(attempt["data"]["workspace"])
    assert stale.is_dir()
    proc = cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # The resume reaped what the killed run left running in its workspace, and removed it.
    assert not stale.exists()
    assert not [cmdline(p) for p in kill_leftovers if alive(p)]
    final = results(run_dir)
    assert {t: r["status"] for t, r in final.items()} == {"bakery001": "passed",
                                                         "fleet001": "passed"}
    assert final["bakery001"] == first["bakery001"]  # untouched, same started_at
    for tid in ("bakery001", "fleet001"):
        lines = (run_dir / tid / "transcript.jsonl").read_text().splitlines()
        assert sum(json.loads(x)["kind"] == "attempt" for x in lines) == 1, tid
    manifest = json.loads((run_dir / "run.json").read_text())
    assert len(manifest["sessions"]) == 2 and manifest["interrupted"] is False


@pytest.mark.slow
def test_sigint_kills_every_child_and_exits_130(tmp_path: Path) -> None:
    runner = spawn("run", "bakery001", "library001", "--agent", "reference", "--jobs", "2",
                   "--runs-dir", "runs", "--run-id", "i", cwd=tmp_path)
    children, code = interrupt_both_dbt_runs(runner, (signal.SIGINT,))
    log = (tmp_path / "runner.log").read_text()
    assert code == 130, log
    assert children and not [p for p in children if alive(p)], \
        [cmdline(p) for p in children if alive(p)]
    manifest = json.loads((tmp_path / "runs" / "i" / "run.json").read_text())
    assert manifest["interrupted"] is True
    assert results(tmp_path / "runs" / "i") == {}
    assert "--run-id i to resume" in log


@pytest.mark.in_process_readers  # its subject is not the readers
def test_run_warns_once_about_clock_reading_tasks_at_the_default_date(
        shared_dataset: Path, tmp_path: Path) -> None:
    # The bundled suite records no date for mrr001, whose util_months reads the clock: the run
    # uses the suite default, and says so before it starts (list does too).
    proc = cli("run", "mrr001", "playbook001", "--dataset", str(shared_dataset), "--agent",
               "noop", "--runs-dir", "runs", "--run-id", "w", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "read the clock" in line]
    assert len(warnings) == 1 and "mrr001" in warnings[0] and "playbook001" not in warnings[0]
    assert "suite default 2024-09-15" in warnings[0] and "derive-dates" in warnings[0]
    manifest = json.loads((tmp_path / "runs" / "w" / "run.json").read_text())
    assert {t["id"]: t["fake_date"] for t in manifest["tasks"]}["mrr001"] == "2024-09-15"


@pytest.mark.slow
def test_full_disk_and_locked_gold_are_infrastructure_then_resume_scores_4_of_4(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """Tiny tasks whose start database already holds gold's table, run by the noop agent: the
    subject is the machine's faults and the resume, not the build (a cold dbt is 4 s of CPU a
    trial). Not a command agent: unsealed, it would turn the witness on, which scores a private
    copy of gold taken before the lock below."""
    sample = tiny_dataset(*TINY_IDS)
    for tid in TINY_IDS:
        make_duckdb(sample / "examples" / tid / "shop.duckdb", {"orders": "SELECT 1 AS id"})
    args = ("run", "--agent", "noop", "--jobs", "2", "--dataset", str(sample),
            "--runs-dir", "runs", "--run-id", "f", "--retries", "0")
    run_dir = tmp_path / "runs" / "f"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    # 1. Workspaces on a 64 KiB disk: every copy of a task fails with ENOSPC.
    tiny = tmp_path / "tiny"
    full = subprocess.run([*tiny_disk_prefix(tiny, "64k"), sys.executable, "-m", "spider2local",
                           *args], cwd=tmp_path, env={**env, "TMPDIR": str(tiny)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert full.returncode == 0, full.stderr
    assert "Traceback" not in full.stderr
    first = results(run_dir)
    assert sorted(first) == sorted(TINY_IDS)
    for tid, result in first.items():
        assert result["status"] == "error" and result["passed"] is None, tid
        assert result["error"]["kind"] == "infrastructure", tid  # type: ignore[index]
        assert "No space left on device" in result["error"]["message"], tid  # type: ignore[index]
    # 2. Space is back, but another process holds one task's gold database.
    gold = next((sample / "evaluation_suite" / "gold" / "t3").glob("*.duckdb"))
    with hold_lock(gold):
        locked = cli(*args, cwd=tmp_path)
    assert locked.returncode == 0, locked.stderr
    second = results(run_dir)
    assert {t: r["status"] for t, r in second.items()} == {
        "t1": "passed", "t2": "passed", "t3": "error", "t4": "passed"}
    assert second["t3"]["error"]["kind"] == "infrastructure"  # type: ignore[index]
    assert "t3" in locked.stderr and "a resume re-runs it" in locked.stderr
    # 3. The fault is gone: the resume re-runs t3 only, and the run scores 4/4.
    final = cli(*args, cwd=tmp_path)
    assert final.returncode == 0, final.stderr
    third = results(run_dir)
    assert {r["status"] for r in third.values()} == {"passed"}
    assert {t: third[t] for t in ("t1", "t2", "t4")} == {t: second[t] for t in ("t1", "t2", "t4")}


@pytest.mark.slow
@pytest.mark.parametrize("signals", [(signal.SIGHUP,), (signal.SIGINT, signal.SIGINT)],
                         ids=["sighup", "ctrl-c-twice"])
def test_a_hangup_or_a_double_ctrl_c_is_one_clean_shutdown(
        tmp_path: Path, signals: tuple[signal.Signals, ...]) -> None:
    runner = spawn("run", "bakery001", "library001", "--agent", "reference", "--jobs", "2",
                   "--runs-dir", "runs", "--run-id", "h", cwd=tmp_path)
    children, code = interrupt_both_dbt_runs(runner, signals)
    log = (tmp_path / "runner.log").read_text()
    assert code == 130, log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log
    assert children and not [cmdline(p) for p in children if alive(p)]
    manifest = json.loads((tmp_path / "runs" / "h" / "run.json").read_text())
    assert manifest["interrupted"] is True and manifest["finished_at"]
    assert "--run-id h to resume" in log


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["free-pass", "prepare", "dbt", "score"])
def test_kill_9_at_any_moment_leaves_nothing_once_the_run_is_used_again(
        tmp_path: Path, kill_leftovers: set[int], moment: str,
        tiny_dataset: Callable[..., Path]) -> None:
    """Killed with dbt running, the sample's reference agent; at every other moment, tiny
    tasks a sandboxed command agent solves without dbt (the subject there is the runner's
    own children, workspaces and records, and a cold dbt costs 4 s of CPU a trial)."""
    workspaces = tmp_path / "ws"
    workspaces.mkdir()
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TMPDIR": str(workspaces)}
    ids = ("bakery001", "fleet001") if moment == "dbt" else ("t1", "t2")
    agent = ("--agent", "reference") if moment == "dbt" else \
        ("--dataset", str(tiny_dataset(*ids)), "--agent", "command", "--agent-command", TINY_SOLVE)
    args = ("run", *ids, *agent, "--jobs", "1", "--keep-db", "--runs-dir", "runs",
            "--run-id", "k")
    log = tmp_path / "runner.log"
    runner = spawn(*args, cwd=tmp_path, env=env)
    def leaked() -> list[Path]:  # the tasks' workspaces (other temp folders are not recorded)
        return [p for tid in ids for p in workspaces.glob(f"spider2local-{tid}-*")]

    reached = {"free-pass": lambda: in_free_passes(runner.pid, log),
               "prepare": lambda: bool(leaked()),
               "dbt": lambda: bool(dbt_workspaces(runner.pid)),
               "score": lambda: ": score" in log.read_text()}[moment]
    try:
        wait_for(reached, 120, moment, poll=0.005)
    finally:
        kill_leftovers |= sigkill(runner)
    shm = {p for pid in kill_leftovers for p in faketime_leftovers(pid)}
    time.sleep(1.0)  # /dev/shm files younger than a second are never removed (proc.shm)
    # 1. The next command on the run, whichever it is (here: re-scoring it), cleans up.
    cli("score", "runs/k", cwd=tmp_path, env=env)
    assert leaked() == [], moment
    assert not [cmdline(p) for p in kill_leftovers if alive(p)], moment
    assert not [p for p in shm if p.exists()], moment
    # 2. The resume finishes and scores every task once.
    proc = cli(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    final = results(tmp_path / "runs" / "k")
    assert {t: r["status"] for t, r in final.items()} == dict.fromkeys(ids, "passed")
    for tid in final:
        lines = (tmp_path / "runs" / "k" / tid / "transcript.jsonl").read_text().splitlines()
        assert sum(json.loads(x)["kind"] == "attempt" for x in lines) == 1, tid
    assert leaked() == []


@pytest.mark.slow
def test_sigterm_during_the_free_passes_is_one_clean_shutdown_and_the_run_resumes(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """The moment before any agent (the run scoring its start databases in a reader child)
    holds like every other: SIGTERM ends the run as interrupted, its child dies, nothing is
    half-written, and a resume finishes it. Tiny tasks a command agent solves without dbt:
    the subject is the moment before any agent."""
    args = ("run", "t1", "t2", "--dataset", str(tiny_dataset("t1", "t2")), "--agent",
            "command", "--agent-command", TINY_SOLVE, "--jobs", "2",
            "--runs-dir", "runs", "--run-id", "ft")
    log = tmp_path / "runner.log"
    runner = spawn(*args, cwd=tmp_path, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        wait_for(lambda: in_free_passes(runner.pid, log), 120, "the free passes", poll=0.005)
        children = descendants(runner.pid)
        runner.send_signal(signal.SIGTERM)
        code = runner.wait(60)
    finally:
        if runner.poll() is None:
            runner.kill()
    text = log.read_text()
    assert code != 0 and "Traceback" not in text, text
    deadline = time.monotonic() + 10
    while [p for p in children if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [cmdline(p) for p in children if alive(p)]
    assert code == 130 and text.strip().splitlines()[-1] == "spider2local: interrupted", text
    run_dir = tmp_path / "runs" / "ft"
    manifest = run_dir / "run.json"  # before the plan is written, or marked interrupted
    assert not manifest.exists() or json.loads(manifest.read_text())["interrupted"] is True
    assert results(run_dir) == {}  # no agent had started: nothing to keep
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert {t: r["status"] for t, r in results(run_dir).items()} == {"t1": "passed",
                                                                    "t2": "passed"}


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_run_id_alone_resumes_with_the_options_the_run_recorded(tmp_path: Path) -> None:
    """`run --run-id X` with no other option: the run's dataset, suite, agent, shard, limits
    and --keep-db come from its run.json (not the suite's defaults, which would start the
    claude agent on every task of the sample); an option given must still match."""
    from tests.helpers import write_task

    root = tmp_path / "data"
    (root / "examples").mkdir(parents=True)
    for tid in ("t1", "t2", "t3"):
        write_task(root, tid)
    first = cli("--dataset", str(root), "run", "--agent", "noop", "--shard", "1/2",
                "--keep-db", "--timeout", "77", "--jobs", "1", "--runs-dir", "runs",
                "--run-id", "r", "--warm-dbt", "off", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    run_dir = tmp_path / "runs" / "r"
    assert sorted(results(run_dir)) == ["t1", "t3"]
    (run_dir / "t3" / "result.json").unlink()  # as if the run had been cut there
    shutil.rmtree(run_dir / "t3")
    env = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")}
    again = cli("run", "--run-id", "r", "--runs-dir", "runs", cwd=tmp_path,
                env={**env, "PYTHONWARNINGS": "ignore"})
    assert again.returncode == 0, again.stderr
    assert sorted(results(run_dir)) == ["t1", "t3"]  # t3 ran again, t2 (shard 2) did not
    assert (run_dir / "t3" / "result.duckdb").is_file()  # --keep-db remembered
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["agent"] == "noop" and manifest["settings"]["timeout"] == 77
    assert manifest["settings"]["warm_dbt"] is False  # --warm-dbt off remembered too
    assert manifest["dataset"] == str(root)
    assert manifest["selection"]["ids"] == ["t1", "t3"]
    assert [s["argv"] for s in manifest["sessions"]][1] == ["run", "--run-id", "r",
                                                            "--runs-dir", "runs"]
    changed = cli("run", "--run-id", "r", "--runs-dir", "runs", "--timeout", "78",
                  cwd=tmp_path)
    assert changed.returncode == 2
    assert "timeout 78.0 (run made with 77.0)" in changed.stderr


def venv_with_unexecutable_dbt(root: Path) -> Path:
    """A venv of this interpreter and site-packages whose ``bin/dbt`` cannot be executed: its
    interpreter is a file without execute permission (the shim's ``exec`` exits 126,
    "Permission denied"), as when the venv's interpreter is unreadable for the user. Returns
    its python, which the runner takes the real dbt beside."""
    real = Path(sys.prefix)
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text((real / "pyvenv.cfg").read_text())
    (root / "lib").symlink_to(real / "lib")
    python = root / "bin" / "python"
    python.symlink_to(Path(sys.executable).resolve())
    locked = root / "bin" / "python-locked"
    locked.write_bytes(b"")
    locked.chmod(0o644)
    dbt = root / "bin" / "dbt"
    dbt.write_text(f"#!{locked}\n")
    dbt.chmod(0o755)
    return python


def test_dbt_that_cannot_be_executed_is_infrastructure_not_a_verdict(tmp_path: Path) -> None:
    python = venv_with_unexecutable_dbt(tmp_path / "venv")
    proc = subprocess.run([str(python), "-m", "spider2local", "run", "bakery001", "--agent",
                           "reference", "--runs-dir", "runs", "--run-id", "x", "--retries", "0"],
                          cwd=tmp_path, env={**os.environ, "PYTHONWARNINGS": "ignore"},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    found = results(tmp_path / "runs" / "x")["bakery001"]
    assert found["status"] == "error" and found["passed"] is None, found
    error = found["error"]
    assert isinstance(error, dict) and error["kind"] == "infrastructure", error
    assert "exit 126" in error["message"] and "Permission denied" in error["message"]


@pytest.mark.slow  # a run of one task, then three re-scores
def test_score_run_dir_keeps_the_verdict_of_a_damaged_kept_database(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """A tiny task solved without dbt: the subject is re-scoring a damaged kept database."""
    proc = cli("--dataset", str(tiny_dataset("t1")), "run", "t1", "--agent", "command",
               "--agent-command", TINY_SOLVE, "--keep-db", "--runs-dir", "runs", "--run-id", "k",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    kept = tmp_path / "runs" / "k" / "t1" / "result.duckdb"
    before = (kept.parent / "result.json").read_text()
    assert json.loads(before)["status"] == "passed"
    good = kept.read_bytes()
    for damage, named in ((b"not a database at all" * 1000, "is not a DuckDB file"),
                          (good[:12288] + b"\0" * (len(good) - 12288), "kept database damaged"),
                          (good[:len(good) // 2 + 1], "is truncated")):
        kept.write_bytes(damage)
        score = cli("score", "runs/k", cwd=tmp_path)
        assert score.returncode == 1 and "Traceback" not in score.stderr, score.stderr
        assert "t1: not re-scorable: kept database damaged: " in score.stderr
        assert named in score.stderr and "the recorded verdict stays" in score.stderr
        assert (kept.parent / "result.json").read_text() == before

"""Fingerprints of gold, evaluation records and scorer sources, and their re-check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.integrity import guard
from spider2local.suite.model import Suite


@pytest.fixture
def task(tiny_dataset: Callable[..., Path], tmp_path: Path) -> TaskSpec:
    root = tiny_dataset("t1", "t2")
    return load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks[0]


def test_untouched_files_pass_and_the_record_round_trips(task: TaskSpec) -> None:
    taken = guard.take([task])
    assert set(taken.tasks) == {"t1"} and taken.tasks["t1"].wal is None
    assert "evaluation/score.py" in taken.sources and "integrity/guard.py" in taken.sources
    again = guard.Fingerprints.from_json(json.loads(json.dumps(taken.to_json())))
    assert again == taken
    check = guard.changes(again, task)
    assert check.changed == () and guard.gold_moved(check, task) is None
    assert guard.Fingerprints.from_json(None) is None  # a run made before fingerprints
    assert guard.Fingerprints.from_json({"version": 1, "tasks": 3}) is None


def test_a_table_added_to_gold_is_named(task: TaskSpec) -> None:
    taken = guard.take([task])
    assert task.gold is not None
    con = duckdb.connect(str(task.gold.db))
    con.execute("CREATE TABLE extra AS SELECT 1 AS x")
    con.close()
    (changed,) = guard.changes(taken, task).changed
    assert changed.startswith(f"gold file {task.gold.db} changed (sha256 ")


def test_a_gold_wal_that_appears_is_a_change(task: TaskSpec) -> None:
    taken = guard.take([task])
    assert task.gold is not None
    task.gold.db.with_name(task.gold.db.name + ".wal").write_bytes(b"committed rows")
    (changed,) = guard.changes(taken, task).changed
    assert "gold .wal" in changed and "absent ->" in changed


def test_an_edited_evaluation_record_is_named_but_other_lines_do_not_matter(
        task: TaskSpec) -> None:
    taken = guard.take([task])
    lines = task.eval_file.read_text().splitlines()
    other = json.loads(lines[1])
    other["evaluation"]["parameters"]["condition_tabs"] = ["x"]
    mine = json.loads(lines[0])
    task.eval_file.write_text("\n".join([json.dumps(mine, indent=None, sort_keys=True),
                                         json.dumps(other)]) + "\n")
    assert guard.changes(taken, task).changed == ()  # same parameters, other task edited
    mine["evaluation"]["parameters"]["condition_tabs"] = ["orders", "customers"]
    mine["evaluation"]["parameters"]["condition_cols"] = [[0], []]
    mine["evaluation"]["parameters"]["ignore_orders"] = [True, True]
    task.eval_file.write_text(json.dumps(mine) + "\n" + json.dumps(other) + "\n")
    (changed,) = guard.changes(taken, task).changed
    assert changed.startswith("evaluation record changed") and "customers" in changed
    task.eval_file.write_text("not json at all\n")
    assert "-> absent" in guard.changes(taken, task).changed[0]


def test_an_edited_scorer_source_is_named(task: TaskSpec, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """On a copy of the package: a test never edits the real one."""
    copy = tmp_path / "pkg"
    shutil.copytree(guard.SOURCE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(guard, "SOURCE_ROOT", copy)
    taken = guard.take([task])
    score = copy / "evaluation" / "score.py"
    score.write_text(score.read_text() + "\npassed = True\n")
    (changed,) = guard.changes(taken, task).changed
    assert changed == "scorer source changed: evaluation/score.py"


def test_gold_written_during_scoring_is_caught_by_its_metadata(task: TaskSpec) -> None:
    taken = guard.take([task])
    check = guard.changes(taken, task)
    assert task.gold is not None
    task.gold.db.open("rb").close()  # reading (as the scorer does) changes nothing
    assert guard.gold_moved(check, task) is None
    task.gold.db.touch()  # any write, even one that keeps the content, moves ctime
    assert guard.gold_moved(check, task) == f"gold file {task.gold.db} changed while it was scored"


@pytest.mark.process
def test_fingerprints_load_no_scorer_into_the_runner() -> None:
    """The runner's process never scores an agent's database (sandboxed children do, loading
    the fingerprinted files), so taking fingerprints imports neither the scorer nor pandas:
    importing them here cost every run 1.5 s and guarded nothing."""
    import subprocess
    import sys

    code = ("import sys; from spider2local.integrity import guard; guard.take([]); "
            "print(sorted(m for m in ('spider2local.evaluation.compare', 'pandas') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_off_limits_is_one_list_for_the_sandbox_and_the_scan(task: TaskSpec,
                                                            tmp_path: Path) -> None:
    """What the sandbox hides and what the scan calls suspect come from one decision: every
    folder the watch puts off limits is one the scan flags when an agent names it."""
    runs, suite = tmp_path / "runs", tmp_path / "tasks.toml"
    watch = guard.Watch(guard.Fingerprints({}), runs_dir=runs, suite_file=suite)
    limits = watch.off_limits(task)
    assert task.dataset_root in limits and runs in limits and suite in limits
    assert task.gold is not None and task.gold.db.parent in limits
    ws = tmp_path / "ws"
    ws.mkdir()
    assert not any(ws == p or p in ws.parents for p in limits)
    prot = watch.protected(task, ws, ws, runs / "r" / task.id)
    for folder in limits:
        assert prot.outside(str(folder / "x.duckdb")), folder


@pytest.mark.process
def test_a_copy_of_the_dataset_elsewhere_keeps_the_gold_a_run_used_out_of_reach(
        tiny_dataset: Callable[..., Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two copies of Spider2-DBT on one machine (``/opt/spider2`` and a checkout): a run on the
    first remembers its gold folder, and every later run's agent, on any copy, has it hidden
    (the sandbox) and is suspect when it names it (the scan)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPIDER2LOCAL_CACHE", str(cache))
    first = tiny_dataset("t1")
    second = tmp_path / "elsewhere" / "spider2-dbt"
    shutil.copytree(first, second)
    done = subprocess.run([sys.executable, "-m", "spider2local", "--dataset", str(first), "run",
                           "--agent", "noop", "--isolation", "none", "--runs-dir",
                           str(tmp_path / "runs")], capture_output=True, text=True,
                          timeout=300, check=False, stdin=subprocess.DEVNULL,
                          env={**os.environ, "SPIDER2LOCAL_CACHE": str(cache)})
    assert done.returncode == 0, done.stderr[-2000:]
    task = load_dataset(Suite(tmp_path / "tasks.toml", second)).tasks[0]
    watch = guard.Watch(guard.Fingerprints({}), runs_dir=tmp_path / "runs2",
                        suite_file=tmp_path / "tasks.toml")
    limits = watch.off_limits(task)
    used = Path(os.path.realpath(first / "evaluation_suite" / "gold"))
    assert used in limits
    assert not any(p == second or second in p.parents for p in limits
                   if p not in (task.dataset_root, task.gold.db.parent if task.gold else None))
    ws = tmp_path / "ws"
    ws.mkdir()
    prot = watch.protected(task, ws, ws, tmp_path / "runs2" / "r" / task.id)
    assert prot.outside(str(used / "t1" / "shop.duckdb"))


def test_poisoned_bytecode_and_planted_startup_hooks_are_changes(
        task: TaskSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ``.py`` files were fingerprinted: bytecode whose header claims the unchanged source
    (Python loads it instead), or a ``.pth`` in site-packages, made later runs pass unnoticed."""
    import importlib.util
    import py_compile

    from spider2local.integrity import startup
    copy = tmp_path / "pkg"
    shutil.copytree(guard.SOURCE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(guard, "SOURCE_ROOT", copy)
    site_dir = tmp_path / "site-packages"
    site_dir.mkdir()
    monkeypatch.setattr(startup, "site_dirs", lambda: [site_dir])
    score = copy / "evaluation" / "score.py"
    py_compile.compile(str(score), doraise=True)  # honest bytecode: no change
    taken = guard.take([task])
    assert guard.changes(taken, task).changed == ()
    # the agent's bytecode, stamped with the real source's mtime and size
    evil = tmp_path / "evil.py"
    evil.write_text(score.read_text() + "\npassed = True\n")
    pyc = Path(importlib.util.cache_from_source(str(score)))
    stat = score.stat()
    code = compile(evil.read_text(), str(score), "exec")
    from importlib._bootstrap_external import _code_to_timestamp_pyc  # type: ignore[attr-defined]
    pyc.write_bytes(bytes(_code_to_timestamp_pyc(code, int(stat.st_mtime), stat.st_size)))
    (changed,) = guard.changes(taken, task).changed
    assert changed == "scorer source changed: evaluation/score.py (bytecode)"
    pyc.unlink()
    (site_dir / "evil.pth").write_text("import os; os.environ['PASS'] = '1'\n")
    (changed,) = guard.changes(taken, task).changed
    assert changed == f"scorer source changed: site:{site_dir / 'evil.pth'}"

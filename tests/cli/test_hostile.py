"""Hostile input as a user's command line meets it: real subprocesses, one-line errors (exit 2),
nothing outside the run touched, the dataset byte-identical after a real run (issue 12)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from spider2local.cli.app import SettingType
from spider2local.exceptions import UserError
from spider2local.suite import options
from tests.cli.test_app import assert_one_line_error, run_cli
from tests.helpers import write_task

Build = Callable[..., Path]


def tree_digest(root: Path) -> str:
    """Content, mode and mtime of every file: any write to the dataset changes it."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        h.update(f"{path.relative_to(root)}|{st.st_mode}|{st.st_mtime_ns}".encode())
        if path.is_file() and not path.is_symlink():
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def noop_run(root: Path, cwd: Path, *extra: str) -> tuple[int, str, Path]:
    proc = run_cli("--dataset", str(root), "run", "--agent", "noop", "--runs-dir",
                   str(cwd / "runs"), "--run-id", "r1", *extra, cwd=cwd)
    return proc.returncode, proc.stderr, cwd / "runs" / "r1"


def test_task_id_with_dotdot_deletes_nothing_outside_the_run(tiny_dataset: Build,
                                                             tmp_path: Path) -> None:
    root = tiny_dataset("ok001")
    write_task(root, "../victim")
    victim = tmp_path / "runs" / "victim"
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("important")
    code, stderr, run_dir = noop_run(root, tmp_path)
    assert code == 0, stderr
    assert (victim / "keep.txt").read_text() == "important"
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert [p.name for p in run_dir.iterdir() if p.is_dir()] == ["ok001"]
    # run shows the dataset's warnings as list does (once each, on stderr)
    listed = run_cli("--dataset", str(root), "list", cwd=tmp_path).stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == listed.strip().splitlines()
    assert len(warnings) == 2 and all("'../victim' is not a plain folder name" in w
                                      for w in warnings)


def test_timeout_nan_is_refused_before_anything_is_written(tiny_dataset: Build,
                                                          tmp_path: Path) -> None:
    root = tiny_dataset("ok001")
    code, stderr, run_dir = noop_run(root, tmp_path, "--timeout=nan")
    assert code == 2 and "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        "spider2local: error: --timeout: must be positive and finite, not nan "
        "(see `spider2local run --help` for --timeout)"]
    assert not run_dir.exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "x"])
def test_positive_finite_refuses_nan_inf_and_non_positive(value: str) -> None:
    timeout = SettingType(options.setting("timeout"))
    with pytest.raises(UserError, match=r"^--timeout: must be"):
        timeout.convert(value, None, None)
    assert timeout.convert("2.5", None, None) == 2.5


@pytest.fixture
def finished_run(tiny_dataset: Build, tmp_path: Path) -> tuple[Path, Path]:
    root = tiny_dataset("a001", "b001")
    code, stderr, run_dir = noop_run(root, tmp_path)
    assert code == 0, stderr
    return root, run_dir


@pytest.mark.parametrize(("text", "problem"), [
    ('{"tasks": [{"id": "a001", "tables": "x"}]}', "tasks entry 1: 'tables' is str, not int"),
    ('{"run_id": "r1", "tasks": [', "not valid JSON"),
])
def test_score_on_a_broken_run_json_is_one_line_naming_it(
        finished_run: tuple[Path, Path], text: str, problem: str) -> None:
    root, run_dir = finished_run
    (run_dir / "run.json").write_text(text)
    for command in (["score", str(run_dir)],
                    ["run", "--agent", "noop", "--runs-dir", str(run_dir.parent),
                     "--run-id", "r1"]):
        proc = run_cli("--dataset", str(root), *command, cwd=run_dir.parent)
        assert_one_line_error(proc, f"{run_dir / 'run.json'}: not a usable run.json: {problem}")


@pytest.mark.slow
@pytest.mark.parametrize("corrupt", [
    '{"schema_version": 2, "task_id": "a001", "status": "failed", "agent": "noop", '
    '"fake_date": "2024-09-15", "started_at": "x", "finished_at": "x", "durations": "x"}',
    '{"schema_version": 2, "task_id": 5, "status": "failed", "agent": "noop", '
    '"fake_date": "2024-09-15", "started_at": "x", "finished_at": "x"}',
    '{"schema_version": 2, "task_id": "a001", "status": "failed", "agent": "noop", '
    '"fake_date": "2024-09-15", "started_at": "x", "finished_at": "x", "tables_total": "1"}',
    '{"schema_version": 2, "task_id": "b001", "status": "failed", "agent": "noop", '
    '"fake_date": "2024-09-15", "started_at": "x", "finished_at": "x"}',
    "{",
])
def test_corrupt_result_json_of_one_task_is_rerun_and_spares_the_others(
        finished_run: tuple[Path, Path], corrupt: str) -> None:
    """Decision: a result.json no reader can use (bad JSON, wrong types, another task's id)
    counts as unfinished: `score` and reports leave it out, resume runs that task again."""
    root, run_dir = finished_run
    (run_dir / "a001" / "result.json").write_text(corrupt)
    before = (run_dir / "b001" / "result.json").read_text()
    score = run_cli("--dataset", str(root), "score", str(run_dir), cwd=run_dir.parent)
    assert score.returncode in (0, 1) and "Traceback" not in score.stderr, score.stderr
    resumed = run_cli("--dataset", str(root), "run", "--agent", "noop", "--runs-dir",
                      str(run_dir.parent), "--run-id", "r1", cwd=run_dir.parent)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    assert json.loads((run_dir / "a001" / "result.json").read_text())["task_id"] == "a001"
    assert (run_dir / "b001" / "result.json").read_text() == before


@pytest.mark.slow
def test_absolute_profile_path_never_writes_the_dataset(tiny_dataset: Build,
                                                        tmp_path: Path) -> None:
    """The reference agent runs real dbt in the workspace: with the profile naming the
    dataset's own start database absolutely, dbt used to write into the dataset."""
    root = tiny_dataset("abs001")
    project = root / "examples" / "abs001"
    (project / "profiles.yml").write_text(
        "shop:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: \"{project / 'shop.duckdb'}\"\n      schema: main\n")
    solution = root / "solutions" / "abs001" / "models"
    solution.mkdir(parents=True)
    (solution / "orders.sql").write_text("select id from raw_orders\n")
    before = tree_digest(root)
    proc = run_cli("--dataset", str(root), "run", "--agent", "reference", "--runs-dir",
                   str(tmp_path / "runs"), "--run-id", "r1", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "runs" / "r1" / "abs001" / "result.json").read_text())
    assert result["passed"] is True, result  # dbt built orders: in the workspace's copy
    assert tree_digest(root) == before

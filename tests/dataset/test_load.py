"""The dataset loader: the upstream layout becomes task specs; defects become per-task problems
or warnings, never an aborted load."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spider2local.dataset.load import load_dataset
from spider2local.dataset.problems import Problem, ProblemKind
from spider2local.db.header import max_storage_version
from spider2local.evaluation.params import EvalConfigError, parse_eval
from spider2local.exceptions import DatasetError
from spider2local.suite.load import load_suite
from spider2local.suite.model import Suite


def suite_for(root: Path, tmp_path: Path, extra: str = "") -> Suite:
    path = tmp_path / "suite.toml"
    path.write_text(f'schema = 1\n[dataset]\nroot = "{root}"\n{extra}')
    return load_suite(path)


def problems(root: Path, tmp_path: Path) -> dict[str, tuple[str, ...]]:
    """Each task's problem messages, as listings print them."""
    return {t.id: tuple(str(p) for p in t.problems)
            for t in load_dataset(suite_for(root, tmp_path)).tasks}


def kinds(root: Path, tmp_path: Path) -> dict[str, tuple[ProblemKind, ...]]:
    return {t.id: tuple(p.kind for p in t.problems)
            for t in load_dataset(suite_for(root, tmp_path)).tasks}


def test_valid_task_is_runnable(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    data = load_dataset(suite_for(root, tmp_path, "[tasks.t1]\ndate = 2024-08-27\n"))
    (task,) = data.tasks
    assert task.runnable and task.has_gold and task.status == "runnable"
    assert task.start_db == root / "examples" / "t1" / "shop.duckdb"
    assert task.gold is not None and task.gold.params.condition_tabs == ("orders",)
    assert task.gold.db == root / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    assert task.graded_tables == ("orders",)
    assert str(task.date) == "2024-08-27"
    assert data.warnings == ()


def test_real_tasks_are_runnable(shared_dataset: Path, tmp_path: Path) -> None:
    data = load_dataset(suite_for(shared_dataset, tmp_path))
    assert {t.id: t.runnable for t in data.tasks} == {"playbook001": True, "mrr001": True}
    mrr = data.get("mrr001")
    assert mrr is not None and mrr.gold is not None and mrr.gold.params.condition_cols[0][-1] == 11


def test_missing_root_and_task_list(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="dataset root not found"):
        load_dataset(suite_for(tmp_path / "absent", tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"no examples/spider2-dbt.jsonl here"):
        load_dataset(suite_for(tmp_path / "empty", tmp_path))


def test_malformed_jsonl_line_is_a_warning(tiny_dataset: Callable[..., Path],
                                           tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    with (root / "examples" / "spider2-dbt.jsonl").open("a") as fh:
        fh.write("{not json\n")
    data = load_dataset(suite_for(root, tmp_path))
    assert data.ids() == ("t1",)
    assert any("spider2-dbt.jsonl:2: not valid JSON" in w for w in data.warnings)


def test_unequal_eval_lists(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    ev = {"func": "duckdb_match", "parameters": {"gold": "shop.duckdb",
          "condition_tabs": ["a", "b"], "condition_cols": [[0]], "ignore_orders": [True, True]}}
    root = tiny_dataset("t1", evaluation=ev)
    assert problems(root, tmp_path)["t1"] == (
        "evaluation config: condition_tabs, condition_cols and ignore_orders have unequal "
        "lengths (2, 1, 2)",)


@pytest.mark.parametrize(("params", "expected"), [
    ({"gold": "g.duckdb", "condition_tabs": ["a"], "condition_cols": [["0"]],
      "ignore_orders": [True]}, "condition_cols must be lists of integer column positions"),
    ({"gold": "g.duckdb", "condition_tabs": ["a"], "condition_cols": [[True]],
      "ignore_orders": [True]}, "condition_cols must be lists of integer column positions"),
    ({"gold": "g.duckdb", "condition_tabs": [], "condition_cols": [], "ignore_orders": []},
     "condition_tabs must be a non-empty list"),
    ({"condition_tabs": ["a"]}, "parameters.gold missing"),
])
def test_eval_params_checked(params: dict[str, object], expected: str) -> None:
    with pytest.raises(EvalConfigError) as caught:
        parse_eval({"func": "duckdb_match", "parameters": params})
    assert expected in caught.value.reason and not caught.value.reason.startswith("evaluation")


def test_missing_gold_names_the_file_found_instead(tiny_dataset: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    gold = root / "evaluation_suite" / "gold" / "t1"
    (gold / "shop.duckdb").rename(gold / "other.duckdb")
    assert problems(root, tmp_path)["t1"] == (
        "gold file gold/t1/shop.duckdb missing (found other.duckdb instead)",)


def test_missing_start_db(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", with_start_db=False)
    assert problems(root, tmp_path)["t1"] == (
        "start database shop.duckdb missing (profiles.yml points at it)",)


def test_missing_package(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", packages_yml="packages:\n  - package: dbt-labs/dbt_utils\n"
                                           "    version: 1.1.1\n")
    assert problems(root, tmp_path)["t1"] == (
        "package dbt-labs/dbt_utils not in dbt_packages (dbt deps needs the network)",)
    vendored = root / "examples" / "t1" / "dbt_packages" / "dbt_utils"
    vendored.mkdir(parents=True)
    (vendored / "dbt_project.yml").write_text("name: dbt_utils\nversion: 1.1.1\n")
    assert problems(root, tmp_path)["t1"] == ()


def test_eval_without_task_is_a_warning(tiny_dataset: Callable[..., Path],
                                        tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    with (root / "evaluation_suite" / "gold" / "spider2_eval.jsonl").open("a") as fh:
        fh.write(json.dumps({"instance_id": "ghost", "evaluation": {}}) + "\n")
    data = load_dataset(suite_for(root, tmp_path))
    assert any("ghost has an evaluation but is not in" in w for w in data.warnings)


def test_duplicate_id(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    with (root / "examples" / "spider2-dbt.jsonl").open("a") as fh:
        fh.write(json.dumps({"instance_id": "t1", "instruction": "again"}) + "\n")
    data = load_dataset(suite_for(root, tmp_path))
    assert [t.problems for t in data.tasks] == [
        (), (Problem(ProblemKind.DUPLICATE, "duplicate id in spider2-dbt.jsonl (line 2)"),)]


def test_unreadable_duckdb_file(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    (root / "examples" / "t1" / "shop.duckdb").write_bytes(b"this is not a database at all")
    assert problems(root, tmp_path)["t1"] == ("start database shop.duckdb is not a DuckDB file",)


def test_no_eval_config_and_exclusion(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", "t2")
    lines = (root / "evaluation_suite" / "gold" / "spider2_eval.jsonl").read_text().splitlines()
    (root / "evaluation_suite" / "gold" / "spider2_eval.jsonl").write_text(lines[0] + "\n")
    data = load_dataset(suite_for(root, tmp_path, '[tasks.t1]\nexclude = "flaky gold"\n'))
    t1, t2 = data.tasks
    assert not t1.runnable and t1.status == "excluded: flaky gold"
    assert t2.problems == (Problem(ProblemKind.EVAL, "no evaluation config in spider2_eval.jsonl"),)
    assert not t2.has_gold and t2.gold is None and t2.graded_tables == ()


@pytest.mark.parametrize(("content", "expected"), [
    (None, "dbt_project.yml missing"),
    ("name: [unclosed\n", "dbt_project.yml unparsable (line 2, column 1:"),
    ("- just a list\n", "dbt_project.yml unparsable (not a mapping)"),
])
def test_broken_dbt_project_yml_is_not_runnable(tiny_dataset: Callable[..., Path],
                                                 tmp_path: Path, content: str | None,
                                                 expected: str) -> None:
    root = tiny_dataset("t1")
    cfg = root / "examples" / "t1" / "dbt_project.yml"
    if content is None:
        cfg.unlink()
    else:
        cfg.write_text(content)
    (found,) = problems(root, tmp_path)["t1"]
    assert found.startswith(expected)


@pytest.mark.parametrize(("content", "expected"), [
    ("shop: [unclosed\n", "profiles.yml unparsable (line 2, column 1:"),
    ("other:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n      path: x.duckdb\n",
     "profiles.yml has no duckdb path for profile shop"),
    ("shop:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n",
     "profiles.yml has no duckdb path for profile shop"),
])
def test_broken_profiles_yml_never_falls_back_to_any_duckdb(
        tiny_dataset: Callable[..., Path], tmp_path: Path, content: str, expected: str) -> None:
    root = tiny_dataset("t1")  # shop.duckdb is present: a glob would find it
    (root / "examples" / "t1" / "profiles.yml").write_text(content)
    (task,) = load_dataset(suite_for(root, tmp_path)).tasks
    assert task.start_db is None and len(task.problems) == 1
    assert task.problems[0].kind is ProblemKind.PROFILE
    assert task.problems[0].message.startswith(expected)


def test_without_profiles_yml_the_lone_duckdb_file_is_used(tiny_dataset: Callable[..., Path],
                                                           tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    (root / "examples" / "t1" / "profiles.yml").unlink()
    (task,) = load_dataset(suite_for(root, tmp_path)).tasks
    assert task.start_db == root / "examples" / "t1" / "shop.duckdb" and task.runnable


@pytest.mark.parametrize(("content", "expected"), [
    ("packages: 5\n", "packages.yml malformed (packages must be a list, not a number)"),
    ("packages:\n  - 3\n", "packages.yml malformed (package entry 1 names no package, git,"),
    ("packages:\n  - version: 1.0.0\n", "packages.yml malformed (package entry 1 names no"),
    ("packages: [unclosed\n", "packages.yml malformed (line 2, column 1:"),
    ("- package: a/b\n", "packages.yml malformed (the top level must be a mapping, not a list)"),
])
def test_malformed_packages_yml_is_a_problem(tiny_dataset: Callable[..., Path], tmp_path: Path,
                                             content: str, expected: str) -> None:
    root = tiny_dataset("t1", packages_yml=content)
    (found,) = problems(root, tmp_path)["t1"]
    assert found.startswith(expected), found


def test_empty_packages_yml_declares_nothing(tiny_dataset: Callable[..., Path],
                                             tmp_path: Path) -> None:
    root = tiny_dataset("t1", packages_yml="")
    assert problems(root, tmp_path)["t1"] == ()


def test_gold_written_by_a_newer_duckdb(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    gold = root / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    data = bytearray(gold.read_bytes())
    struct.pack_into("<Q", data, 12, max_storage_version() + 1)
    gold.write_bytes(bytes(data))
    (task,) = load_dataset(suite_for(root, tmp_path)).tasks
    assert task.gold is None and task.graded_tables == ("orders",)
    assert tuple(str(p) for p in task.problems) == (
        f"gold database shop.duckdb was written by a newer DuckDB (storage version "
        f"{max_storage_version() + 1}); this spider2local reads up to {max_storage_version()}",)


def _rewrite_jsonl(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    for entry in entries:
        change(entry)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))


_EXAMPLES = Path("examples")
_GOLD = Path("evaluation_suite") / "gold"
DEFECTS: dict[str, tuple[Callable[[Path], None], ProblemKind]] = {
    "project folder gone": (lambda r: shutil.rmtree(r / _EXAMPLES / "t1"), ProblemKind.PROJECT),
    "dbt_project.yml gone": (lambda r: (r / _EXAMPLES / "t1" / "dbt_project.yml").unlink(),
                             ProblemKind.PROJECT),
    "profiles.yml broken": (lambda r: (r / _EXAMPLES / "t1" / "profiles.yml").write_text("[x"),
                            ProblemKind.PROFILE),
    "start db gone": (lambda r: (r / _EXAMPLES / "t1" / "shop.duckdb").unlink(),
                      ProblemKind.START_DB),
    "packages.yml malformed": (lambda r: (r / _EXAMPLES / "t1" / "packages.yml").write_text(
        "packages: 5\n"), ProblemKind.PACKAGE),
    "package not vendored": (lambda r: (r / _EXAMPLES / "t1" / "packages.yml").write_text(
        "packages:\n  - package: dbt-labs/dbt_utils\n    version: 1.1.1\n"), ProblemKind.PACKAGE),
    "no instruction": (lambda r: _rewrite_jsonl(r / _EXAMPLES / "spider2-dbt.jsonl",
                                                lambda e: e.update(instruction=" ")),
                       ProblemKind.INSTRUCTION),
    "eval not duckdb_match": (lambda r: _rewrite_jsonl(
        r / _GOLD / "spider2_eval.jsonl", lambda e: e["evaluation"].update(func="other")),
        ProblemKind.EVAL),
    "eval line gone": (lambda r: (r / _GOLD / "spider2_eval.jsonl").write_text(""),
                       ProblemKind.EVAL),
    "gold file gone": (lambda r: (r / _GOLD / "t1" / "shop.duckdb").unlink(), ProblemKind.GOLD),
    "gold file corrupt": (lambda r: (r / _GOLD / "t1" / "shop.duckdb").write_bytes(b"x" * 64),
                          ProblemKind.GOLD),
}


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_each_defect_is_a_problem_of_its_kind(tiny_dataset: Callable[..., Path],
                                              tmp_path: Path, defect: str) -> None:
    """The kind is decided where the defect is found; the message is what listings show."""
    root = tiny_dataset("t1")
    damage, kind = DEFECTS[defect]
    damage(root)
    (task,) = load_dataset(suite_for(root, tmp_path)).tasks
    assert [p.kind for p in task.problems] == [kind], task.problems
    assert not task.runnable and task.status == task.problems[0].message == str(task.problems[0])
    assert (task.gold is None) == (kind in (ProblemKind.EVAL, ProblemKind.GOLD))


def test_missing_gold_file_keeps_the_graded_tables(tiny_dataset: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    """Without a gold database there is no Gold, yet the graded table names stay known."""
    root = tiny_dataset("t1", with_gold=False)
    (task,) = load_dataset(suite_for(root, tmp_path)).tasks
    assert task.gold is None and not task.has_gold and task.graded_tables == ("orders",)
    assert task.problems == (Problem(ProblemKind.GOLD, "gold file gold/t1/shop.duckdb missing"),)

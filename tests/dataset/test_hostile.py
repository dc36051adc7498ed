"""Hostile task folders and task lists: each is refused with one exact line, or made harmless,
and the rest of the dataset still loads (issue 12, "Inputs that reach outside the run")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset
from spider2local.exceptions import SuiteError
from spider2local.suite.load import load_suite
from spider2local.workspace.copy import LinkOutside, copy_tree
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace
from tests.helpers import write_task

Build = Callable[..., Path]
NAME_FIX = "use letters, digits, '.', '_' and '-' only, starting with a letter or digit"


def load(root: Path, suite_text: str = "") -> Dataset:
    path = root.parent / "suite.toml"
    path.write_text(f'schema = 1\n[dataset]\nroot = "{root}"\n{suite_text}')
    return load_dataset(load_suite(path))


def problems(data: Dataset) -> dict[str, tuple[str, ...]]:
    return {t.id: tuple(str(p) for p in t.problems) for t in data.tasks}


# --- task ids ---------------------------------------------------------------------------------

@pytest.mark.parametrize("tid", ["../victim", "a/b", "/abs", ".hidden", "x..y", "..", "-rf",
                                 "a b", "a" * 129, "ta\u0308sk"])
def test_unsafe_task_id_is_a_skipped_line_naming_the_file_and_line(tiny_dataset: Build,
                                                                   tid: str) -> None:
    root = tiny_dataset("ok001")
    write_task(root, tid, with_start_db=False, with_gold=False)
    data = load(root)
    assert data.ids() == ("ok001",)
    tasks_file, eval_file = root / "examples/spider2-dbt.jsonl", \
        root / "evaluation_suite/gold/spider2_eval.jsonl"
    assert list(data.warnings) == [
        f"{tasks_file}:2: instance_id {tid!r} is not a plain folder name; line skipped "
        f"({NAME_FIX})",
        f"{eval_file}:2: instance_id {tid!r} is not a plain folder name; line skipped "
        f"({NAME_FIX})"]


def test_unsafe_id_in_the_suite_file_is_a_suite_error(tiny_dataset: Build) -> None:
    root = tiny_dataset("ok001")
    with pytest.raises(SuiteError) as info:
        load(root, '[tasks."../ok001"]\nexclude = "x"\n')
    assert str(info.value).endswith(
        "suite.toml: tasks.../ok001: task id '../ok001' is not a plain folder name "
        f"({NAME_FIX})")


def test_task_folder_that_is_a_symlink_out_of_the_dataset_is_a_task_problem(
        tiny_dataset: Build, tmp_path: Path) -> None:
    root = tiny_dataset("ok001", "away001")
    outside = tmp_path / "elsewhere"
    (root / "examples" / "away001").rename(outside)
    (root / "examples" / "away001").symlink_to(outside)
    got = problems(load(root))
    assert got["ok001"] == ()
    assert got["away001"][0] == ("project folder away001: away001 leads outside this folder "
                                 "(a symlink?)")


# --- byte-order marks -------------------------------------------------------------------------

def test_byte_order_marks_do_not_drop_the_first_task(tiny_dataset: Build) -> None:
    root = tiny_dataset("first001", "second001")
    for name in ("examples/spider2-dbt.jsonl", "evaluation_suite/gold/spider2_eval.jsonl"):
        path = root / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    suite = root.parent / "bom.toml"
    suite.write_bytes(b"\xef\xbb\xbf" + f'schema = 1\n[dataset]\nroot = "{root}"\n'.encode())
    data = load_dataset(load_suite(suite))
    assert data.ids() == ("first001", "second001")
    assert data.warnings == ()
    assert all(t.runnable for t in data.tasks)


# --- symlinks in a task folder ----------------------------------------------------------------

@pytest.mark.parametrize(("name", "target", "shown"), [
    ("root", "/", "root -> /"),
    ("models/secret.sql", "/etc/hostname", "models/secret.sql -> /etc/hostname"),
    ("gold.duckdb", "../../evaluation_suite/gold/bad001/shop.duckdb",
     "gold.duckdb -> ../../evaluation_suite/gold/bad001/shop.duckdb"),
    ("loop", "loop", "loop -> a symlink loop"),
])
def test_symlink_leading_outside_refuses_only_that_task(tiny_dataset: Build, name: str,
                                                        target: str, shown: str) -> None:
    root = tiny_dataset("bad001", "ok001")
    (root / "examples" / "bad001" / name).symlink_to(target)
    got = problems(load(root))
    assert got["ok001"] == ()
    assert got["bad001"] == (f"symlink leads outside the task folder: examples/bad001/{shown} "
                             "(replace it with the file it points at)",)


def test_copy_tree_refuses_a_link_outside_before_copying(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "f.sql").write_text("select 1")
    (src / "z").symlink_to("/")
    with pytest.raises(LinkOutside, match=r"symlink leads outside the folder: z -> /"):
        copy_tree(src, tmp_path / "dst")
    assert not (tmp_path / "dst").exists()  # nothing copied, the root file system least of all


def test_copy_tree_follows_links_inside_once_and_never_loops(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "models").mkdir(parents=True)
    (src / "models" / "m.sql").write_text("select 1")
    (src / "models" / "again").symlink_to("..")  # a link to an ancestor: inside, but a cycle
    (src / "alias.sql").symlink_to("models/m.sql")
    files, _ = copy_tree(src, tmp_path / "dst")
    assert (tmp_path / "dst" / "alias.sql").read_text() == "select 1"
    assert files == 2


# --- profiles.yml paths -----------------------------------------------------------------------

def _profile(root: Path, tid: str, path: str) -> None:
    (root / "examples" / tid / "profiles.yml").write_text(
        f"shop:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: \"{path}\"\n")


@pytest.mark.parametrize("path", ["/tmp/elsewhere.duckdb", "../ok001/shop.duckdb",
                                  "~/shop.duckdb"])
def test_profile_path_outside_the_project_refuses_the_task(tiny_dataset: Build,
                                                           path: str) -> None:
    root = tiny_dataset("bad001", "ok001")
    _profile(root, "bad001", path)
    got = problems(load(root))
    assert got["ok001"] == ()
    assert got["bad001"] == (f"profiles.yml path {path!r} is outside the project (use a path "
                             "relative to the project, such as ./<name>.duckdb)",)


def test_attach_outside_the_project_refuses_the_task(tiny_dataset: Build) -> None:
    root = tiny_dataset("bad001")
    gold = root / "evaluation_suite/gold/bad001/shop.duckdb"
    (root / "examples/bad001/profiles.yml").write_text(
        "shop:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: ./shop.duckdb\n      attach:\n        - path: {gold}\n")
    assert problems(load(root))["bad001"][0].startswith(f"profiles.yml path '{gold}' is outside")


@pytest.mark.parametrize("template", ["{{{{ env_var('SHOP_DB', '{path}') }}}}",
                                      "{{% if true %}}{path}{{% endif %}}"])
def test_attach_path_made_by_jinja_refuses_the_task(tiny_dataset: Build, template: str) -> None:
    # dbt renders profiles.yml as Jinja: "{{ env_var('X', '/abs/gold') }}" reads as a relative
    # path to a plain check (its first part is "{{ env_var('X', '"), but dbt attaches the gold
    root = tiny_dataset("bad001", "ok001")
    gold = root / "evaluation_suite/gold/bad001/shop.duckdb"
    value = template.format(path=gold)
    (root / "examples/bad001/profiles.yml").write_text(
        "shop:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: ./shop.duckdb\n      attach:\n        - path: \"{value}\"\n")
    got = problems(load(root))
    assert got["ok001"] == ()
    assert got["bad001"] and "Jinja" in got["bad001"][0] and repr(value) in got["bad001"][0]


@pytest.mark.process
def test_absolute_profile_path_to_the_own_start_db_is_rewritten_in_the_workspace(
        tiny_dataset: Build, tmp_path: Path) -> None:
    root = tiny_dataset("abs001")
    start = root / "examples" / "abs001" / "shop.duckdb"
    _profile(root, "abs001", str(start))
    task = load(root).tasks[0]
    assert task.runnable and task.start_db == start
    ws = prepare_workspace(task, artifacts=tmp_path / "art", parent=tmp_path)
    try:
        text = (ws.project_dir / "profiles.yml").read_text()
        assert "path: ./shop.duckdb" in text and str(start) not in text
    finally:
        cleanup_workspace(ws)


# --- truncated databases ----------------------------------------------------------------------

@pytest.mark.parametrize("cut", ["4k", "half"])
def test_truncated_start_database_is_a_dataset_problem(tiny_dataset: Build, cut: str) -> None:
    root = tiny_dataset("cut001", "ok001")
    db = root / "examples" / "cut001" / "shop.duckdb"
    data = db.read_bytes()
    size = 4096 if cut == "4k" else len(data) // 2
    db.write_bytes(data[:size])
    got = problems(load(root))
    assert got["ok001"] == ()
    expected = ("shorter than DuckDB's headers" if cut == "4k"
                else f"its header needs at least {len(data)}")
    assert got["cut001"] == (f"start database shop.duckdb is truncated ({size} bytes"
                             + ("," if cut == "4k" else ";") + f" {expected})",)


def test_truncated_gold_is_a_gold_problem(tiny_dataset: Build) -> None:
    root = tiny_dataset("cut001")
    gold = root / "evaluation_suite/gold/cut001/shop.duckdb"
    gold.write_bytes(gold.read_bytes()[:-4096])
    assert problems(load(root))["cut001"][0].startswith("gold database shop.duckdb is truncated")


def test_real_start_and_gold_databases_are_not_truncated(shared_dataset: Path,
                                                        tmp_path: Path) -> None:
    suite = tmp_path / "suite.toml"
    suite.write_text(f'schema = 1\n[dataset]\nroot = "{shared_dataset}"\n')
    data = load_dataset(load_suite(suite))
    assert all(t.runnable for t in data.tasks), problems(data)

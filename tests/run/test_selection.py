"""Task selection: ids, subsets, shards, limits, and tasks that cannot run."""

from __future__ import annotations

import pytest

from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset
from spider2local.exceptions import UserError
from spider2local.run.selection import Shard, parse_shard, select_tasks
from spider2local.suite.model import DateSource, Suite, TaskSettings
from tests.helpers import write_task

IDS = ("t05", "t01", "t03", "t02", "t04", "t06", "t07")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    root = tmp_path_factory.mktemp("sel") / "spider2-dbt"
    (root / "examples").mkdir(parents=True)
    for tid in IDS:
        write_task(root, tid)
    suite = Suite(root.parent / "tasks.toml", root,
                  tasks={"t04": TaskSettings(exclude="gold is wrong upstream")},
                  subsets={"pair": ("t03", "t01"), "ghost": ("t01", "nope")})
    return load_dataset(suite)


def test_default_is_every_task_sorted_with_unrunnable_skipped(data: Dataset) -> None:
    sel = select_tasks(data)
    assert [t.id for t in sel.tasks] == sorted(set(IDS) - {"t04"})
    assert sel.skipped == (("t04", "excluded: gold is wrong upstream"),)
    assert sel.ids == tuple(sorted(IDS))


def test_graded_tables_are_known_for_skipped_tasks_too(data: Dataset) -> None:
    sel = select_tasks(data, ["t01", "t04"])
    assert sel.skipped[0][0] == "t04"
    assert dict(sel.graded) == {"t01": 1, "t04": 1}


def test_explicit_ids_and_suite_subset(data: Dataset) -> None:
    assert [t.id for t in select_tasks(data, ["t02", "t01", "t02"]).tasks] == ["t01", "t02"]
    assert [t.id for t in select_tasks(data, subset="pair").tasks] == ["t01", "t03"]
    explicit = select_tasks(data, ["t04"])
    assert explicit.tasks == () and explicit.skipped[0][0] == "t04"


def test_builtin_subsets(data: Dataset) -> None:
    assert "t04" not in [t.id for t in select_tasks(data, subset="runnable").tasks]
    assert select_tasks(data, subset="runnable").skipped == ()
    assert select_tasks(data, subset="has-gold").ids == tuple(sorted(IDS))


@pytest.mark.parametrize("kwargs, fragment", [
    ({"ids": ["t01", "zz9"]}, "unknown task id(s) in the command line: zz9"),
    ({"subset": "nosuch"}, "unknown subset 'nosuch'"),
    ({"subset": "ghost"}, "unknown task id(s) in subset 'ghost': nope"),
    ({"ids": ["t01"], "subset": "pair"}, "not both"),
    ({"limit": 0}, "--limit 0"),
])
def test_bad_selection_is_one_line_user_error(data: Dataset, kwargs: dict[str, object],
                                              fragment: str) -> None:
    ids = kwargs.pop("ids", ())
    with pytest.raises(UserError) as info:
        select_tasks(data, ids, **kwargs)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_shards_partition_the_selection_stably(data: Dataset) -> None:
    everything = select_tasks(data).ids
    shards = [select_tasks(data, shard=Shard(k, 3)).ids for k in (1, 2, 3)]
    assert sorted(sum(shards, ())) == sorted(everything)
    assert all(not set(a) & set(b) for a in shards for b in shards if a is not b)
    # Round-robin over sorted ids: documented, so CI matrices can rely on it.
    assert shards[0] == ("t01", "t04", "t07")
    assert select_tasks(data, shard=Shard(1, 3)).ids == shards[0]


def test_limit_applies_after_shard(data: Dataset) -> None:
    assert select_tasks(data, shard=Shard(2, 2), limit=2).ids == ("t02", "t04")
    assert select_tasks(data, limit=3).ids == ("t01", "t02", "t03")


@pytest.mark.parametrize("text, expected", [("1/4", Shard(1, 4)), (" 3 / 3 ", Shard(3, 3))])
def test_parse_shard(text: str, expected: Shard) -> None:
    assert parse_shard(text) == expected
    assert str(expected) == f"{expected.index}/{expected.count}"


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "a/b", "2", "1/2/3"])
def test_parse_shard_rejects(text: str) -> None:
    with pytest.raises(UserError, match="--shard"):
        parse_shard(text)


def test_twenty_thousand_ids_keep_order_duplicates_and_shards(tmp_path_factory:
                                                              pytest.TempPathFactory) -> None:
    """Behaviour on a big input (the speed is measured in benchmarks/bench_selection.py: the
    old lookup scanned the task list per id, 27 s for 20,000 ids)."""
    import datetime as dt
    from pathlib import Path

    from spider2local.dataset.task import TaskSpec

    ids = [f"t{i:05d}" for i in range(20_000)]
    tasks = tuple(TaskSpec(id=tid, instruction="x", project_dir=Path("/none"), start_db=None,
                           gold=None, settings=TaskSettings(), date=dt.date(2024, 9, 15),
                           date_source=DateSource.DEFAULT)
                  for tid in reversed(ids))
    dup = TaskSpec(id=ids[5], instruction="second", project_dir=Path("/none"), start_db=None,
                   gold=None, settings=TaskSettings(), date=dt.date(2024, 9, 15),
                   date_source=DateSource.DEFAULT)
    big = Dataset(Path("/none"), Suite(Path("s.toml"), "sample"), (*tasks, dup))
    assert big.get(ids[5]) is tasks[len(ids) - 6]  # the first of duplicates, as before
    everything = select_tasks(big, [*ids, *ids[:100]])  # repeated ids select once
    assert everything.ids == tuple(ids)
    shards = [select_tasks(big, shard=Shard(k, 7)).ids for k in range(1, 8)]
    assert sorted(tid for shard in shards for tid in shard) == ids
    assert shards[2][:2] == (ids[2], ids[9])
    assert select_tasks(big, shard=Shard(3, 7), limit=3).ids == (ids[2], ids[9], ids[16])


def test_shell_style_globs_select_task_ids(data: Dataset) -> None:
    """``'t0*'`` and ``'t0[12]'`` select by pattern (main refused them as unknown ids); a
    pattern matching nothing is one line naming it; a plain id is still exact."""
    assert [t.id for t in select_tasks(data, ["t0[12]"]).tasks] == ["t01", "t02"]
    assert select_tasks(data, ["t0*"]).ids == tuple(sorted(IDS))
    assert [t.id for t in select_tasks(data, ["t0?", "t01"], limit=2).tasks] == ["t01", "t02"]
    with pytest.raises(UserError, match="no task id matches 'gym\\*'"):
        select_tasks(data, ["gym*"])
    with pytest.raises(UserError, match="unknown task id"):
        select_tasks(data, ["t0"])

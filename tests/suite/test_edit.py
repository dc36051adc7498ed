"""Suite edits: tomlkit edits keep comments and other keys, and are validated before writing."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from spider2local.exceptions import SuiteError
from spider2local.suite.edit import (
    DateRecord,
    set_subsets,
    set_task_dates,
    unified_diff,
    write_suite,
)
from spider2local.suite.load import load_suite
from spider2local.suite.model import Confidence, DateMethod

SUITE = """# curated by hand
schema = 1

[dataset]
root = "sample"

[tasks.a001]
# excluded for a reason that must survive
exclude = "broken gold"
date = 2024-01-01
date_method = "date-spine"
date_confidence = "low"

[tasks.m001]
date = 2024-02-02
date_method = "manual"

[subsets]
smoke = ["a001"]
"""


def _path(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.toml"
    path.write_text(SUITE)
    return path


def test_dates_are_replaced_others_kept_and_new_tasks_added(tmp_path: Path) -> None:
    path = _path(tmp_path)
    new = set_task_dates(SUITE, [
        DateRecord("a001", dt.date(2024, 8, 27), DateMethod.VERIFIED, "rebuilt", Confidence.HIGH),
        DateRecord("n001", None, DateMethod.CLOCK_INDEPENDENT, "no clock reads",
                   Confidence.HIGH),
    ], path)
    assert "# excluded for a reason that must survive" in new
    assert "# curated by hand" in new
    write_suite(path, new)
    suite = load_suite(path)
    a = suite.settings("a001")
    assert (a.date, a.date_method, a.date_evidence, a.exclude) == (
        dt.date(2024, 8, 27), "verified", "rebuilt", "broken gold")
    n = suite.settings("n001")
    assert (n.date, n.date_method) == (None, "clock-independent")
    assert suite.subsets["smoke"] == ("a001",)


def test_none_fields_are_removed(tmp_path: Path) -> None:
    new = set_task_dates(SUITE, [DateRecord("a001", None, None, "no evidence", None)],
                         _path(tmp_path))
    table = new.split("[tasks.a001]")[1].split("[tasks.m001]")[0]
    assert "date =" not in table and "date_method" not in table
    assert 'date_evidence = "no evidence"' in table


def test_manual_dates_survive_unless_verified(tmp_path: Path) -> None:
    path = _path(tmp_path)
    guess = set_task_dates(SUITE, [DateRecord("m001", dt.date(2024, 3, 3),
                                              DateMethod.DATE_SPINE, "x", Confidence.MEDIUM)],
                           path)
    assert guess == SUITE
    verified = set_task_dates(SUITE, [DateRecord("m001", dt.date(2024, 3, 3),
                                                 DateMethod.VERIFIED, "x", Confidence.HIGH)],
                              path)
    assert "date = 2024-03-03" in verified


def test_subsets_written_and_builtins_refused(tmp_path: Path) -> None:
    path = _path(tmp_path)
    new = set_subsets(SUITE, {"free": ["b", "a"]}, path)
    write_suite(path, new)
    assert load_suite(path).subsets == {"smoke": ("a001",), "free": ("a", "b")}
    with pytest.raises(SuiteError, match="built-in"):
        set_subsets(SUITE, {"runnable": ["a"]}, path)


def test_invalid_result_never_reaches_the_file(tmp_path: Path) -> None:
    path = _path(tmp_path)
    guessed: Any = "guessed"  # deliberately not a DateMethod: the strict parser must catch it
    bad = set_task_dates(SUITE, [DateRecord("a001", None, guessed, None, None)], path)
    with pytest.raises(SuiteError, match="date_method"):
        write_suite(path, bad)
    assert path.read_text() == SUITE
    assert not list(tmp_path.glob("*.partial"))


def test_unified_diff_names_the_file(tmp_path: Path) -> None:
    path = _path(tmp_path)
    new = set_task_dates(SUITE, [DateRecord("a001", dt.date(2024, 1, 2), DateMethod.DATE_SPINE,
                                            "e", Confidence.MEDIUM)], path)
    diff = unified_diff(SUITE, new, path)
    assert diff.startswith(f"--- {path} (current)")
    assert "-date = 2024-01-01\n+date = 2024-01-02" in diff
    assert unified_diff(SUITE, SUITE, path) == ""


def test_new_keys_go_before_the_comments_that_introduce_the_next_table(tmp_path: Path) -> None:
    text = ('schema = 1\n\n[tasks.a001]\ndate_method = "date-spine"\n\n'
            "# ---- next section ----\n\n[tasks.b001]\nexclude = \"x\"\n")
    new = set_task_dates(text, [DateRecord("a001", None, DateMethod.CLOCK_INDEPENDENT, "none",
                                           Confidence.HIGH)], _path(tmp_path))
    head, tail = new.split("# ---- next section ----")
    assert 'date_evidence = "none"' in head and "date_evidence" not in tail


def test_edits_of_the_bundled_suite_go_to_a_new_local_file(tmp_path: Path) -> None:
    from spider2local.suite.edit import write_target
    from spider2local.suite.load import bundled_suite_path

    bundled = load_suite(bundled_suite_path())
    before = bundled_suite_path().read_bytes()
    target, text = write_target(bundled.with_dataset(str(tmp_path / "data")), tmp_path)
    assert target == (tmp_path / "tasks.toml").resolve()
    write_suite(target, text)
    assert load_suite(target).dataset == tmp_path / "data"
    assert bundled_suite_path().read_bytes() == before
    # Once a local file exists it is not silently replaced: the user must name it.
    with pytest.raises(SuiteError, match=r"pass --suite tasks\.toml"):
        write_target(bundled, tmp_path)
    mine = load_suite(target)
    assert write_target(mine, tmp_path / "elsewhere")[0] == target

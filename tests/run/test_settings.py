"""Run settings: suite defaults under command-line overrides, per-task skills, skill checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.exceptions import UserError
from spider2local.run.settings import RunSettings, available_skills, check_skills, task_skills
from spider2local.suite.model import RunDefaults, Suite, TaskSettings


@pytest.fixture
def task(tiny_dataset: Callable[..., Path], tmp_path: Path) -> TaskSpec:
    root = tiny_dataset("t1")
    return load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks[0]


def with_skills(task: TaskSpec, **kw: tuple[str, ...]) -> TaskSpec:
    return dataclasses.replace(task, settings=TaskSettings(**kw))  # type: ignore[arg-type]


def test_task_skills_add_the_tasks_own_and_drop_its_skips(task: TaskSpec) -> None:
    run = RunSettings(agent="claude", skills=("a", "b", "c"))
    merged = with_skills(task, skills=("d", "b"), skip_skills=("c", "d2"))
    assert task_skills(merged, run) == ("a", "b", "d")  # run order, then the task's; no repeats
    assert task_skills(with_skills(task, skip_skills=("a", "b", "c")), run) == ()
    assert task_skills(task, run) == ("a", "b", "c")
    # Only the Claude agent reads skills: others get a workspace without them.
    assert task_skills(merged, RunSettings(agent="noop", skills=("a",))) == ()


def test_command_line_over_suite_defaults_and_no_model_without_an_llm() -> None:
    defaults = RunDefaults(jobs=4, timeout=60.0, model="claude-a")
    claude = RunSettings.from_defaults(defaults, ("s",), agent="claude", jobs=None, timeout=9.0)
    assert (claude.jobs, claude.timeout, claude.model, claude.skills) == (4, 9.0, "claude-a",
                                                                          ("s",))
    assert RunSettings.from_defaults(defaults, (), agent="claude", model="claude-b").model == \
        "claude-b"
    # A non-LLM agent has no model: a run.json naming one would describe a model never used.
    assert RunSettings.from_defaults(defaults, (), agent="noop").model is None
    assert RunSettings.from_defaults(defaults, (), agent="noop", model="claude-b").model is None


def test_installed_skills_are_listed() -> None:
    assert "dbt-project-workflow" in available_skills()


@pytest.mark.parametrize("run_skills, task_kw, key", [
    (("nope",), {}, "run.skills"),
    ((), {"skills": ("dbt-model-writing", "nosuch")}, "tasks.t1.skills"),
    ((), {"skip_skills": ("typo",)}, "tasks.t1.skip_skills"),
])
def test_unknown_skills_name_the_suite_key_and_the_choices(
        task: TaskSpec, tmp_path: Path, run_skills: tuple[str, ...],
        task_kw: dict[str, tuple[str, ...]], key: str) -> None:
    settings = RunSettings(agent="claude", skills=run_skills)
    with pytest.raises(UserError) as info:
        check_skills([with_skills(task, **task_kw)], settings, tmp_path / "tasks.toml")
    text = str(info.value)
    assert text.startswith(f"{tmp_path / 'tasks.toml'}: {key}: unknown skill")
    assert "dbt-project-workflow" in text and "\n" not in text


def test_known_skills_pass_and_other_agents_ignore_skills(task: TaskSpec,
                                                          tmp_path: Path) -> None:
    good = RunSettings(agent="claude", skills=("dbt-project-workflow",))
    check_skills([with_skills(task, skip_skills=("duckdb-dialect",))], good, tmp_path)
    check_skills([with_skills(task, skills=("nosuch",))], RunSettings(agent="noop"), tmp_path)

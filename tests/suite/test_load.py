"""The suite file parser: valid files load; every kind of mistake is one line naming the key."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from spider2local.exceptions import SuiteError
from spider2local.suite.load import bundled_suite_path, default_suite_path, load_suite
from spider2local.suite.model import SAMPLE, Confidence, DateMethod


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tasks.toml"
    path.write_text(text)
    return path


def test_full_file_parses(tmp_path: Path) -> None:
    path = write(tmp_path, """
schema = 1
[dataset]
root = "data/spider2-dbt"
[run]
jobs = 2
timeout = 600
max_turns = 40
model = "claude-x"
date = 2024-09-01
skills = ["dbt-workflow"]
[tasks.a001]
date = "2024-08-27"
date_method = "verified"
date_evidence = "dim_dates ends at 2024-08-27"
date_confidence = "high"
skills = ["dates"]
[tasks.b001]
exclude = "no gold upstream"
[subsets]
smoke = ["a001"]
""")
    suite = load_suite(path)
    assert suite.dataset == (tmp_path / "data" / "spider2-dbt").resolve()
    assert suite.defaults.get("jobs") == 2 and suite.defaults.get("timeout") == 600.0
    assert suite.defaults.date == dt.date(2024, 9, 1)
    assert suite.defaults.skills == ("dbt-workflow",)
    assert suite.settings("a001").date == dt.date(2024, 8, 27)
    assert suite.settings("a001").date_method is DateMethod.VERIFIED
    assert suite.settings("a001").date_confidence is Confidence.HIGH
    assert suite.settings("b001").exclude == "no gold upstream"
    assert suite.settings("zzz").date is None
    assert suite.subsets == {"smoke": ("a001",)}
    assert len(suite.sha256) == 64


def test_defaults_and_dataset_override(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, "schema = 1\n"))
    assert suite.dataset == SAMPLE
    assert suite.defaults.get("jobs") == 3
    assert suite.with_dataset(str(tmp_path)).dataset == tmp_path
    assert suite.with_dataset("sample").dataset == SAMPLE


@pytest.mark.parametrize(("text", "expected"), [
    ("jobs = [", "not valid TOML"),
    ("[run]\njbos = 3\n", "run.jbos: unknown key"),
    ("[run]\njobs = '3'\n", "run.jobs: must be an integer, not a string"),
    ("[run]\njobs = 0\n", "run.jobs: must be positive"),
    ("[run]\ntimeout = nan\n", "run.timeout: must be positive and finite, not nan"),
    ("[run]\ntimeout = inf\n", "run.timeout: must be positive and finite, not inf"),
    ("[run]\nmax_budget_usd = nan\n", "run.max_budget_usd: must be positive and finite"),
    ("[run]\nmax_budget_usd = -1\n", "run.max_budget_usd: must be positive and finite"),
    ("[tasks.t1]\ntimeout = -inf\n", "tasks.t1.timeout: must be positive and finite"),
    ("[run]\njobs = true\n", "run.jobs: must be an integer, not true or false"),
    ("[run]\nretries = -3\n", "run.retries: must be 0 or more, not -3"),
    ("[run]\nverify_rounds = -1\n", "run.verify_rounds: must be 0 or more, not -1"),
    ("schema = 1\n[tasks.x]\ndate = 2024-13-01\n",
     "tasks.x.date: bad date 2024-13-01 (line 3) (write it as YYYY-MM-DD"),
    ("[tasks.x]\n  date=2024-02-30 # typo\n", "tasks.x.date: bad date 2024-02-30 (line 2)"),
    ("[run]\ndate = 2024-9-1\n", "run.date: bad date 2024-9-1 (line 2)"),
    ('[run]\nmodel = "a\n', "not valid TOML at run.model: Illegal character"),
    ("[tasks.x]\ndate = '2024-13-01'\n", "tasks.x.date: bad date '2024-13-01'"),
    ("[tasks.x]\ndate = 2024-01-01T10:00:00\n", "tasks.x.date: must be a date, not a date-time"),
    ("[tasks.x]\ndate_method = 'guess'\n", "tasks.x.date_method: 'guess' is not one of verified, "
     "date-spine, month-spine, age-column, manual, clock-independent"),
    ("[tasks.x]\ndate_confidence = 'sure'\n",
     "tasks.x.date_confidence: 'sure' is not one of high, medium, low"),
    ("[tasks.x]\ndate_method = 'VERIFIED'\n", "tasks.x.date_method: 'VERIFIED' is not one of"),
    ("[tasks.x]\nexclud = 'typo'\n", "tasks.x.exclud: unknown key"),
    ("tasks = 3\n", "tasks: must be a table"),
    ("[subsets]\nall = ['a']\n", "subsets.all: shadows a built-in subset"),
    ("[subsets]\nsmoke = 'a'\n", "subsets.smoke: must be a list of task ids"),
    ("schema = 2\n", "schema: unsupported schema 2"),
    ("colour = 'blue'\n", "colour: unknown key"),
    ("[run]\nisolation = 'docker'\n", "run.isolation: 'docker' is not one of auto, namespace, "
     "none"),
    ("[run]\nisolation = true\n", "run.isolation: must be a string"),
    ("[run]\nwarm_dbt = 'off'\n", "run.warm_dbt: must be true or false, not a string"),
    ("[run]\nthinking_budget = 100\n", "run.thinking_budget: must be at least 1024 tokens"),
    ("[run]\nthinking_budget = '4k'\n", "run.thinking_budget: must be an integer"),
    ("[tasks.x]\nthinking_budget = 0\n", "tasks.x.thinking_budget: must be at least 1024"),
    ("[tasks.x]\nthinkng_budget = 2048\n", "tasks.x.thinkng_budget: unknown key"),
])
def test_malformed_suite_is_one_line_naming_file_and_key(tmp_path: Path, text: str,
                                                         expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    message = str(info.value)
    assert expected in message
    assert message.startswith(str(path))
    assert "\n" not in message


def test_isolation_defaults_to_auto_and_is_read(tmp_path: Path) -> None:
    from spider2local.suite.options import Isolation

    assert load_suite(write(tmp_path, "")).defaults.isolation is Isolation.AUTO
    suite = load_suite(write(tmp_path, "[run]\nisolation = 'namespace'\n"))
    assert suite.defaults.isolation is Isolation.NAMESPACE


def test_zero_retries_and_verify_rounds_are_allowed(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, "[run]\nretries = 0\nverify_rounds = 0\n"))
    assert (suite.defaults.get("retries"), suite.defaults.get("verify_rounds")) == (0, 0)


def test_missing_suite_file(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="suite file not found"):
        load_suite(tmp_path / "nope.toml")


def test_default_suite_prefers_local_tasks_toml(tmp_path: Path) -> None:
    assert default_suite_path(tmp_path) == bundled_suite_path()
    local = write(tmp_path, "schema = 1\n")
    assert default_suite_path(tmp_path) == local


def test_warm_dbt_is_on_unless_the_suite_or_the_command_line_turns_it_off(
        tmp_path: Path) -> None:
    """And only agents that call a model or run its commands get a server (the offline
    agents run one dbt call)."""
    from spider2local.run.settings import RunSettings, wants_warm_dbt

    assert load_suite(write(tmp_path, "schema = 1\n")).defaults.get("warm_dbt") is True
    off = load_suite(write(tmp_path, "[run]\nwarm_dbt = false\n")).defaults
    assert off.get("warm_dbt") is False
    assert RunSettings.from_defaults(off, (), agent="claude").value("warm_dbt") is False
    on = RunSettings.from_defaults(off, (), agent="claude", warm_dbt=True)
    assert on.value("warm_dbt") is True and wants_warm_dbt(on)
    assert not wants_warm_dbt(RunSettings.from_defaults(off, (), agent="reference",
                                                        warm_dbt=True))
    # a command agent runs a model's commands (many dbt calls) in its sandbox: it gets one too
    assert wants_warm_dbt(RunSettings.from_defaults(off, (), agent="command", warm_dbt=True))


def test_the_nearest_tasks_toml_upward_is_the_suite(tmp_path: Path) -> None:
    """From a subfolder the project's suite one or more levels up is used, as pytest, dbt and
    git search upward (main fell back to the bundled sample suite and ran the wrong tasks);
    the nearest one wins."""
    deep = tmp_path / "project" / "models" / "staging"
    deep.mkdir(parents=True)
    assert default_suite_path(deep) == bundled_suite_path()
    top = write(tmp_path, "schema = 1\n")
    assert default_suite_path(deep) == top
    nearer = tmp_path / "project" / "tasks.toml"
    nearer.write_text("schema = 1\n")
    assert default_suite_path(deep) == nearer


def test_thinking_budget_and_max_turns_per_run_and_per_task(tmp_path: Path) -> None:
    """Extended thinking is off unless asked for; real runs took up to 300 turns, the default; a
    task's own setting wins over the run's (what the runner hands the agent)."""
    from spider2local.run.settings import RunSettings, limits_for

    default = load_suite(write(tmp_path, "schema = 1\n"))
    assert default.defaults.get("thinking_budget") is None
    assert default.defaults.get("max_turns") == 300
    assert load_suite(bundled_suite_path()).defaults.get("max_turns") == 300
    suite = load_suite(write(tmp_path, "[run]\nthinking_budget = 2048\n"
                                       "[tasks.big]\nthinking_budget = 8000\nmax_turns = 400\n"))
    settings = RunSettings.from_defaults(suite.defaults, (), agent="noop")
    assert settings.thinking_budget == 2048 and settings.to_json()["thinking_budget"] == 2048

    class Task:  # only the field limits_for reads
        settings = suite.settings("big")

    limits = limits_for(Task(), settings)  # type: ignore[arg-type]
    assert (limits.thinking_budget, limits.max_turns) == (8000, 400)
    Task.settings = suite.settings("other")
    limits = limits_for(Task(), settings)  # type: ignore[arg-type]
    assert (limits.thinking_budget, limits.max_turns) == (2048, 300)

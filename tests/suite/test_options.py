"""The settings table: one declaration per setting is its flag, its suite key and its resume
rule; its parsers refuse the same values from the command line and from a suite file."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from spider2local.cli.app import setting_options
from spider2local.exceptions import SuiteError
from spider2local.run.manifest import RunManifest
from spider2local.run.resume import check_resumable, differences, must_match, remembered
from spider2local.run.settings import RunSettings
from spider2local.suite import options
from spider2local.suite.load import load_suite
from spider2local.suite.model import RunDefaults

WARMUP = options.Setting("warmup_rounds", options.Integer(), 4, "Rounds of warm-up.",
                         options.Resume.MUST_MATCH)
FREE = options.Setting("colour", options.Text(), "blue", "A free setting.", options.Resume.FREE)


@pytest.fixture
def extended(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(options, "SETTINGS", (*options.SETTINGS, WARMUP, FREE))


def suite_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tasks.toml"
    path.write_text(text)
    return path


@pytest.mark.usefixtures("extended")
def test_a_setting_added_to_the_table_is_a_suite_key_a_flag_and_a_resume_rule(
        tmp_path: Path) -> None:
    # a suite key, parsed by the table's parser
    suite = load_suite(suite_file(tmp_path, "[run]\nwarmup_rounds = 7\n"))
    assert suite.defaults.get("warmup_rounds") == 7
    assert RunDefaults().get("warmup_rounds") == 4  # the table's default when the suite is silent
    with pytest.raises(SuiteError, match=r"run\.warmup_rounds: must be positive, not 0"):
        load_suite(suite_file(tmp_path, "[run]\nwarmup_rounds = 0\n"))
    # a flag (the same decorator builds `run`'s options)
    seen: dict[str, Any] = {}
    command = click.command()(setting_options(lambda **kw: seen.update(kw)))
    result = CliRunner().invoke(command, ["--warmup-rounds", "5"])
    assert result.exit_code == 0, result.output
    assert seen["warmup_rounds"] == 5 and seen["colour"] is None
    # a run setting, recorded in run.json
    settings = RunSettings.from_defaults(suite.defaults, (), agent="noop", warmup_rounds=None)
    assert settings.value("warmup_rounds") == 7 and settings.to_json()["warmup_rounds"] == 7
    given = RunSettings.from_defaults(suite.defaults, (), agent="noop", warmup_rounds=9)
    assert given.value("warmup_rounds") == 9
    # a resume rule: remembered when left out, compared because it must match
    manifest = RunManifest(agent="noop", settings=settings.to_json())
    assert remembered(manifest)["warmup_rounds"] == 7
    assert "colour" not in remembered(manifest)  # free: each invocation chooses
    assert "warmup_rounds" in [name for name, _ in must_match()]
    changed = replace(manifest, settings=given.to_json())
    assert differences(manifest, changed) == ["warmup_rounds 9 (run made with 7)"]
    with pytest.raises(Exception, match="cannot be resumed with different settings"):
        from spider2local.run.folder import RunFolder

        check_resumable(manifest, changed, RunFolder.at(tmp_path, "r"))
    # a run made before the setting existed ran with its default: resumable with it
    older = RunManifest(agent="noop")
    assert differences(older, RunManifest(agent="noop", settings={"warmup_rounds": 4})) == []


@pytest.mark.process
def test_a_setting_added_before_the_cli_loads_is_a_real_flag_of_run() -> None:
    """The real `run` command, built after a table with one more setting: the flag exists,
    and a bad value is one line naming it, exit 2."""
    code = ("import sys; from spider2local.suite import options as o; "
            "o.SETTINGS = (*o.SETTINGS, o.Setting('warmup_rounds', o.Integer(), 4, "
            "'Rounds of warm-up.')); from spider2local.cli.app import main; "
            "sys.argv = ['spider2local', *sys.argv[1:]]; main()")
    shown = subprocess.run([sys.executable, "-c", code, "run", "--help"], capture_output=True,
                           text=True, check=False)
    assert shown.returncode == 0 and "--warmup-rounds" in shown.stdout
    bad = subprocess.run([sys.executable, "-c", code, "run", "--warmup-rounds", "0"],
                         capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "spider2local: error: --warmup-rounds: must be positive, not 0 "
        "(see `spider2local run --help` for --warmup-rounds)"]


@pytest.mark.parametrize(("name", "text", "toml", "problem"), [
    ("jobs", "0", "0", "must be positive, not 0"),
    ("jobs", "2.5", "2.5", "must be an integer, not "),
    ("jobs", "x", '"x"', "must be an integer, not "),
    ("max_budget_usd", "nan", "nan", "must be positive and finite, not nan"),
    ("max_budget_usd", "-1", "-1", "must be positive and finite, not -1.0"),
    ("timeout", "nan", "nan", "must be positive and finite, not nan"),
    ("timeout", "inf", "inf", "must be positive and finite, not inf"),
    ("retries", "-1", "-1", "must be 0 or more, not -1"),
    ("thinking_budget", "5", "5", "must be at least 1024 tokens, not 5"),
])
def test_flag_and_suite_key_refuse_the_same_values_with_the_same_phrase(
        tmp_path: Path, name: str, text: str, toml: str, problem: str) -> None:
    setting = options.setting(name)
    with pytest.raises(ValueError, match=problem.replace(".", r"\.")):
        setting.parse(text, text=True)
    with pytest.raises(SuiteError) as info:
        load_suite(suite_file(tmp_path, f"[run]\n{name} = {toml}\n"))
    assert f"run.{name}: " in str(info.value) and "must be" in str(info.value)
    assert "\n" not in str(info.value)


def test_good_values_parse_from_text_and_toml() -> None:
    assert options.setting("jobs").parse("3", text=True) == 3
    assert options.setting("jobs").parse(3, text=False) == 3
    assert options.setting("max_budget_usd").parse("2.5", text=True) == 2.5
    assert options.setting("max_budget_usd").parse(2, text=False) == 2.0
    with pytest.raises(ValueError, match="must be an integer, not true or false"):
        options.setting("jobs").parse(True, text=False)  # TOML true is no count


def test_every_setting_has_a_rule_a_help_and_a_parseable_default() -> None:
    names = [s.name for s in options.settings()]
    assert len(names) == len(set(names))
    for s in options.settings():
        assert s.help and isinstance(s.resume, options.Resume)
        if s.default is not None:
            assert s.parse(s.default, text=False) == s.default, s.name
    flags = [s.option for s in options.flags()]
    assert len(flags) == len(set(flags)) and "--jobs" in flags and "--prompts" in flags


@pytest.mark.parametrize("text, seconds", [
    ("90", 90.0), ("90s", 90.0), ("10m", 600.0), ("1h30m", 5400.0), ("1.5h", 5400.0),
    (" 2m30s ", 150.0), ("1e3", 1000.0),
])
def test_timeout_takes_durations(text: str, seconds: float) -> None:
    """``--timeout 10m`` was refused (issue 23); the flag and the suite key take units."""
    timeout = next(s for s in options.SETTINGS if s.name == "timeout")
    assert timeout.parse(text, text=True) == seconds
    assert timeout.parse(text, text=False) == seconds  # `timeout = "10m"` in a suite


@pytest.mark.parametrize("text, phrase", [
    ("nan", "positive and finite"), ("0", "positive and finite"), ("-5", "positive and finite"),
    ("10x", "a duration such as"), ("h", "a duration such as"), ("", "a duration such as"),
])
def test_bad_durations_are_refused_with_the_rule(text: str, phrase: str) -> None:
    timeout = next(s for s in options.SETTINGS if s.name == "timeout")
    with pytest.raises(ValueError, match=phrase):
        timeout.parse(text, text=True)


def test_agent_apis_are_known_names_once_each_in_order() -> None:
    parse = options.setting("agent_apis").parse
    assert parse("openai", text=True) == ("openai",)  # one per --agent-api
    assert parse(["openai", "anthropic", "openai"], text=False) == ("openai", "anthropic")
    for bad, phrase in ((["gemini"], "'gemini' is not one of anthropic, openai"),
                        (3, "must be a list of API names"), ([1], "must be a list")):
        with pytest.raises(ValueError, match=phrase):
            parse(bad, text=False)
    # run.json keeps a list; a run from before the setting declared none
    compared = options.setting("agent_apis").compare_value
    assert compared(["openai"]) == ("openai",) and compared(None) == compared([]) == ()

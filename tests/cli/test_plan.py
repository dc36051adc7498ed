"""``spider2local plan``: the figures the issue asks for in --json, garbage options refused in
one line, and docs/statistics.md's table is what the command prints."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from spider2local.cli.app import cli

DOCS = Path(__file__).resolve().parents[2] / "docs" / "statistics.md"


def test_plan_json_has_both_designs_with_the_issues_fields() -> None:
    result = CliRunner().invoke(cli, ["plan", "--tasks", "64", "--flip-rate", "0.2",
                                      "--difference", "10", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for design in ("fixed", "sequential"):
        assert {"power", "false_positive_rate", "expected_trials", "trials_p10",
                "trials_p90"} <= set(data[design])
    seq, fixed = data["sequential"], data["fixed"]
    assert seq["false_positive_rate"] <= 0.05 and seq["false_positive_interval"][0] <= 0.05
    assert seq["power"] >= fixed["power"]
    assert seq["expected_trials"] <= fixed["expected_trials"] / 2


def test_the_docs_table_is_what_plan_prints() -> None:
    result = CliRunner().invoke(cli, ["plan", "--tasks", "64", "--flip-rate", "20%",
                                      "--difference", "10"])
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line.startswith("|")]
    assert len(table) == 4
    assert "\n".join(table) in DOCS.read_text(encoding="utf-8")


def test_garbage_options_are_one_line_and_exit_2() -> None:
    runner = CliRunner()
    for args, words in ((["--flip-rate", "60%"], "outside 0-33%"),
                        (["--flip-rate", "nan"], "outside"),
                        (["--difference", "ten"], "not a number"),
                        (["--difference", "-10"], "between 0 and 100"),
                        (["--min-difference", "inf"], "between 0 and 100"),
                        (["--tasks", "0"], "0")):
        result = runner.invoke(cli, ["plan", *args])
        assert result.exit_code == 2, (args, result.output)
        assert words in result.output
        assert "Traceback" not in result.output

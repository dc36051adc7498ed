"""TOML syntax errors name the key on the offending line (the suite loader's messages)."""

from __future__ import annotations

import tomllib

import pytest

from spider2local.suite.tomlerror import DATE_FIX, SYNTAX_FIX, describe


def error_for(text: str) -> tuple[str, str]:
    with pytest.raises(tomllib.TOMLDecodeError) as info:
        tomllib.loads(text)
    return describe(text, info.value)


def test_bad_date_in_an_inline_table_names_the_inner_key() -> None:
    assert error_for('[tasks]\nx = { date = 2024-13-01 }\n') == (
        "tasks.date: bad date 2024-13-01 (line 2)", DATE_FIX)


def test_quoted_table_and_key_names_are_unquoted() -> None:
    message, fix = error_for('[tasks."a-b"]\n"date" = 2024-00-10\n')
    assert (message, fix) == ('tasks.a-b.date: bad date 2024-00-10 (line 2)', DATE_FIX)


def test_errors_without_a_key_keep_the_parser_message() -> None:
    message, fix = error_for("[run\n")
    assert message.startswith("not valid TOML: ") and "line 1" in message and fix == SYNTAX_FIX
    message, _ = error_for("jobs = [")
    assert message.startswith("not valid TOML: ")

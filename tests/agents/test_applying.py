"""describe_failure: the one line result.json keeps of a failed dbt build, from real dbt."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from spider2local.agents.applying import describe_failure
from spider2local.clock.dbt import run_dbt
from spider2local.clock.faketime import Clock, find_library
from tests.clock.test_dbt import DBT_LIMIT, FAKE_DATE, make_project

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _failure(tmp_path: Path, models: dict[str, str]) -> str:
    project = make_project(tmp_path / "p", models)
    env = Clock(FAKE_DATE, find_library()).faked_env(os.environ)
    with anyio.fail_after(DBT_LIMIT):
        result = await run_dbt(project, ["run"], env=env, timeout=DBT_LIMIT)
    error = describe_failure(result)
    assert error is not None
    return error


async def test_a_syntax_error_keeps_duckdbs_own_line(tmp_path: Path) -> None:
    error = await _failure(tmp_path, {"daily_revenue": "select 1 as a group by by",
                                      "fine": "select 1 as b"})
    # the header alone ("Runtime Error in model daily_revenue") was all it kept before
    assert error.startswith("dbt run failed (exit 1): Runtime Error in model daily_revenue")
    assert 'Parser Error: syntax error at or near "by"' in error
    assert "\n" not in error and "\x1b" not in error and "LINE " not in error
    assert error.count("daily_revenue (") == 1  # the model is named once


async def test_a_compile_error_keeps_its_detail(tmp_path: Path) -> None:
    error = await _failure(tmp_path, {"bad": "select * from {{ ref('missing') }}"})
    assert "Encountered an error" not in error
    assert "Compilation Error" in error and "depends on a node named 'missing'" in error
    assert "\n" not in error

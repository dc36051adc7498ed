"""A dbt run the CLI's Bash tool cuts at its time limit, through the warm dbt server: what is
left behind (the measurement behind the Bash time limits of docs/kit-notes.md)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pytest

from spider2local.agents.claude.support import BASH_TIMEOUTS
from spider2local.agents.contract import AgentContext
from spider2local.clock import warm
from spider2local.dataset.task import TaskSpec
from spider2local.testing import FakeAnthropic, reply, tool
from tests.agents.claude.test_session import (
    ROUTE,
    run_agent_warm,
    sample_task,  # noqa: F401 (fixture)
    with_warm_dbt,
    workspace,  # noqa: F401 (fixture)
)

SLOW_MODEL = """\
def model(dbt, session):
    import time
    time.sleep(120)
    return session.sql("select 1 as x")
"""


def in_project(project: Path) -> list[int]:
    """Processes (other than the CLI) working in ``project``: the cut dbt, if it lives on."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd == str(project) and "claude" not in cmd:
            found.append(int(entry.name))
    return found


def locked(database: Path) -> bool:
    try:
        duckdb.connect(str(database), read_only=True).close()
    except duckdb.IOException:
        return True
    return False


@pytest.mark.slow
def test_a_dbt_run_cut_by_the_bash_time_limit_leaves_nothing_running(
        sample_task: Callable[[str], TaskSpec],  # noqa: F811
        workspace: Callable[..., AgentContext]) -> None:  # noqa: F811
    task = sample_task("bakery001")
    seen: dict[str, Any] = {}
    with FakeAnthropic({"main": []}, route=ROUTE) as fake:
        ctx = with_warm_dbt(workspace(task, fake.env(), verify_rounds=0))
        project, database = ctx.workspace.project_dir, ctx.workspace.database

        def after_the_cut(_body: Mapping[str, Any]) -> Any:
            seen["left"] = in_project(project)
            seen["locked"] = locked(database)
            start = time.monotonic()
            while (in_project(project) or locked(database)) and time.monotonic() - start < 30:
                time.sleep(0.2)
            seen["gone_after"] = time.monotonic() - start
            seen["log"] = (ctx.workspace.root / warm.WARM_DIR / warm.LOG_NAME).read_text()
            return reply("Stopping.")

        def once_the_server_listens(_body: Mapping[str, Any]) -> Any:
            socket = warm.socket_path(ctx.workspace.root)
            start = time.monotonic()
            while not socket.is_socket() and time.monotonic() - start < warm.START_WAIT:
                time.sleep(0.2)
            return reply(tool("Bash", command="dbt run --select slow_model", timeout=8000))

        fake.conversations["main"] = [
            reply(tool("Write", file_path=str(project / "models" / "slow_model.py"),
                       content=SLOW_MODEL)),
            once_the_server_listens,
            after_the_cut,
        ]
        started = time.monotonic()
        outcome = run_agent_warm(ctx)
        took = time.monotonic() - started
        main = fake.conversation_requests("main")
    bash_result = " ".join(main[2].tool_results().values())
    print(f"\nBash result: {bash_result[-300:]!r}\nleft at the next turn: {seen}, "
          f"session {took:.1f} s; defaults {dict(BASH_TIMEOUTS)}")
    assert outcome.error is None
    assert "Command timed out" in bash_result
    served = warm.report(ctx.workspace.root, warm.runs_dir(ctx.workspace.env))
    assert "cold_note" not in served, served
    # the warm server's child got the CLI's TERM (forwarded by the client) and ended
    assert re.search(r"call \d+: exit -15\n", seen["log"]), seen["log"]
    assert took < 200  # the model sleeps 120 s: the cut happened
    assert seen["gone_after"] < 10, seen  # nothing of the cut dbt holds the database for long

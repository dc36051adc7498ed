"""``spider2local mcp-server`` through a real MCP client (the ``mcp`` package's stdio client):
the same answers as the Claude session's in-process tools, the same refusals, one query log."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from spider2local.dbtools.config import ToolConfig
from spider2local.dbtools.query import QueryLimits, QueryService
from spider2local.dbtools.tools import TOOLS, tool_names
from spider2local.exceptions import UserError
from spider2local.workspace.model import Workspace
from tests.dbtools.test_query import FAKE_DATE, audit_lines, make_workspace

ALLOWED: list[tuple[str, dict[str, str]]] = [
    ("query", {"sql": "SELECT current_date AS today"}),
    ("query", {"sql": "SELECT id, amount FROM orders ORDER BY id"}),
    ("query", {"sql": "SELECT * REPLACE (amount * 10 AS amount) FROM orders ORDER BY id"}),
    ("query", {"sql": "SELECT count(*) AS n FROM start.orders"}),
    ("query", {"sql": "SELECT * FROM missing_table"}),  # an error, answered alike
    ("list_tables", {}),
    ("describe_table", {"table": "staging.big_orders"}),
    ("describe_table", {"table": "nope"}),
    ("project_scan", {}),
]


def refused(secret: Path, gold: Path) -> list[tuple[str, dict[str, str]]]:
    """Every kind of write, ATTACH and file read the in-process tools refuse."""
    return [("query", {"sql": sql}) for sql in [
        "DELETE FROM orders",
        "INSERT INTO orders VALUES (99, 99)",
        "DROP TABLE orders",
        "CREATE TABLE x AS SELECT 1",
        "UPDATE orders SET amount = 0",
        "WITH x AS (SELECT 1) DELETE FROM orders",
        f"ATTACH '{gold}' AS g (READ_ONLY)",
        f"SELECT * FROM read_csv('{secret}')",
        f"SELECT * FROM '{secret}'",
        f"COPY orders TO '{secret}.out'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "PRAGMA enable_external_access",
        "SELECT 1; DELETE FROM orders",
        "EXPLAIN ANALYZE DELETE FROM orders",
        "INSERT INTO start.orders SELECT * FROM start.orders",
        "CALL pragma_version()",
        "EXPORT DATABASE '/tmp/x'",
    ]] + [("no_such_tool", {})]


def with_start(tmp_path: Path) -> Workspace:
    ws = make_workspace(tmp_path, rows=6)
    start = tmp_path / "start" / ws.database.name
    start.parent.mkdir()
    shutil.copyfile(ws.database, start)
    return Workspace(root=ws.root, project_dir=ws.project_dir, database=ws.database, env=ws.env,
                     artifacts=ws.artifacts, scan_path=ws.scan_path, start_copy=start)


def server_command(config: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "spider2local", "mcp-server", "--config",
                                       str(config)])


async def over_mcp(config: Path, calls: list[tuple[str, dict[str, str]]]
                   ) -> tuple[list[str], list[tuple[str, bool]]]:
    async with stdio_client(server_command(config)) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        answers = []
        for name, args in calls:
            result = await session.call_tool(name, args)
            text = "\n".join(getattr(c, "text", "") for c in result.content)
            answers.append((text, bool(result.is_error)))
        return [t.name for t in listed.tools], answers


async def in_process(service: QueryService, calls: list[tuple[str, dict[str, str]]]
                     ) -> list[tuple[str, bool]]:
    """Through the Claude session's own SDK tool objects (their handlers), not the service."""
    from spider2local.agents.claude.session import database_tools

    handlers = {t.name: t.handler for t in database_tools(service)}
    answers = []
    for name, args in calls:
        if name not in handlers:
            from spider2local.dbtools.tools import call_tool

            answers.append(await call_tool(service, name, args))
            continue
        got: dict[str, Any] = await handlers[name](args)
        answers.append(("\n".join(c["text"] for c in got["content"]), bool(got["is_error"])))
    return answers


@pytest.mark.slow
def test_the_mcp_server_answers_exactly_as_the_in_process_tools(tmp_path: Path) -> None:
    ws = with_start(tmp_path)
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    gold = tmp_path / "gold.duckdb"
    duckdb.connect(str(gold)).close()
    calls = ALLOWED + refused(secret, gold)
    config = ToolConfig.for_workspace(ws, FAKE_DATE).write(tmp_path / "tools.json")

    names, remote = anyio.run(over_mcp, config, calls)
    local = anyio.run(in_process, QueryService.for_workspace(ws, FAKE_DATE), calls)

    assert names == list(tool_names())
    assert remote == local  # same text, same error flag, call by call
    by_call = dict(zip([json.dumps(c) for c in calls], remote, strict=True))
    today, today_err = by_call[json.dumps(ALLOWED[0])]
    assert not today_err and "2024-03-17" in today  # the fake clock reached the server's child
    assert "\n0 | 0\n" in by_call[json.dumps(ALLOWED[1])][0]
    assert "\n6\n" in by_call[json.dumps(ALLOWED[3])][0]  # the start catalog is attached
    for call in refused(secret, gold):
        text, is_error = by_call[json.dumps(call)]
        assert is_error, (call, text)
        assert "a\n1" not in text
    con = duckdb.connect(str(ws.database), read_only=True)
    assert con.execute("SELECT count(*) FROM orders").fetchone() == (6,)
    con.close()
    assert not Path(f"{secret}.out").exists()
    # one query log: every database call of both doors, in order (project_scan is not a query)
    logged = [line["tool"] for line in audit_lines(ws)]
    queries = [name for name, _ in calls if name not in ("project_scan", "no_such_tool")]
    assert logged == queries + queries


def test_tools_table_is_what_both_servers_list() -> None:
    from spider2local.agents.claude.session import DB_TOOLS, SERVER
    from spider2local.dbtools.server import SERVER_NAME

    assert SERVER == SERVER_NAME
    assert tuple(f"mcp__{SERVER}__{t.name}" for t in TOOLS) == DB_TOOLS
    assert all(t.input_schema["type"] == "object" for t in TOOLS)


@pytest.mark.process
def test_the_limits_of_the_config_hold_over_mcp(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path, rows=30)
    config = ToolConfig.for_workspace(ws, FAKE_DATE, QueryLimits(max_rows=7)).write(
        tmp_path / "tools.json")
    assert ToolConfig.read(config) == ToolConfig.for_workspace(ws, FAKE_DATE,
                                                               QueryLimits(max_rows=7))
    _, [(text, is_error)] = anyio.run(over_mcp, config,
                                      [("query", {"sql": "SELECT id FROM orders ORDER BY id"})])
    assert not is_error and "result cut: showing the first 7 rows" in text


@pytest.mark.parametrize("content, message", [
    ("{", "is not JSON"),
    ('{"audit": "/tmp/q.jsonl"}', "database and audit are required"),
    ('{"database": "/x.duckdb", "audit": "/q", "schema_version": 9}', "schema_version"),
    ('{"database": "/x.duckdb", "audit": "/q", "date": "March"}', "bad tool config"),
    ('{"database": "/x.duckdb", "audit": "/q", "limits": {"max_rows": "many"}}',
     "bad tool config"),
    ('["database"]', "not a JSON object"),
])
def test_a_bad_config_is_a_user_error_naming_the_file(tmp_path: Path, content: str,
                                                      message: str) -> None:
    config = tmp_path / "tools.json"
    config.write_text(content)
    with pytest.raises(UserError) as caught:
        ToolConfig.read(config)
    assert message in str(caught.value) and str(config) in str(caught.value)


@pytest.mark.process
def test_a_bad_config_is_one_line_exit_2_and_nothing_on_stdout(tmp_path: Path) -> None:
    config = tmp_path / "tools.json"
    config.write_text("{")
    done = subprocess.run([sys.executable, "-m", "spider2local", "mcp-server", "--config",
                           str(config)], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not JSON" in lines[0] and str(config) in lines[0]
    assert done.stdout == ""  # stdout is the protocol's


@pytest.mark.process
def test_mcp_server_needs_exactly_one_source(tmp_path: Path) -> None:
    for args in (["--config", str(tmp_path / "a.json"), "--database", str(tmp_path / "b")],):
        done = subprocess.run([sys.executable, "-m", "spider2local", "mcp-server", *args],
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False,
                              env={"PATH": "/usr/bin:/bin"})
        assert done.returncode == 2 and "--config FILE or --database FILE" in done.stderr


def all_tool_results(requests: list[Any]) -> dict[str, str]:
    """``tool_use_id -> text`` over every message of every request (the CLI may put a system
    reminder after the tool results, so the last message alone misses some)."""
    found: dict[str, str] = {}
    for request in requests:
        for message in request.body.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    found[str(block["tool_use_id"])] = inner if isinstance(inner, str) else \
                        "\n".join(str(c.get("text", "")) for c in inner or [])
    return found


@pytest.mark.slow
def test_the_claude_cli_gets_the_same_answers_through_mcp_config(tmp_path: Path) -> None:
    """The real bundled Claude CLI (print mode, ``--mcp-config``) starts the server itself and
    calls its tools; the fake Messages API sees the same texts the in-process tools give."""
    from spider2local.agents.claude.session import bundled_cli
    from spider2local.agents.claude.support import QUIET_ENV
    from spider2local.testing import FakeAnthropic, reply, tool

    (tmp_path / "ws").mkdir()
    ws = with_start(tmp_path / "ws")
    gold = tmp_path / "gold.duckdb"
    duckdb.connect(str(gold)).close()
    calls = [("query", {"sql": "SELECT id, amount FROM orders ORDER BY id"}),
             ("query", {"sql": "SELECT count(*) AS n FROM start.orders"}),
             ("describe_table", {"table": "orders"}),
             ("query", {"sql": "DELETE FROM orders"}),
             ("query", {"sql": f"ATTACH '{gold}' AS g (READ_ONLY)"}),
             ("query", {"sql": f"SELECT * FROM '{gold}'"})]
    script = [reply(tool(f"mcp__spider2__{name}", f"toolu_{i}", **args))
              for i, (name, args) in enumerate(calls)] + [reply("Done.")]
    config = ToolConfig.for_workspace(ws, FAKE_DATE).write(tmp_path / "tools.json")
    mcp_config = tmp_path / "mcp.json"
    mcp_config.write_text(json.dumps({"mcpServers": {"spider2": {
        "command": sys.executable,
        "args": ["-m", "spider2local", "mcp-server", "--config", str(config)]}}}))
    with FakeAnthropic(script) as fake:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **QUIET_ENV, **fake.env(),
               "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config")}
        done = subprocess.run(
            [str(bundled_cli()), "-p", "inspect the database", "--output-format", "json",
             "--mcp-config", str(mcp_config), "--strict-mcp-config",
             "--allowedTools", ",".join(f"mcp__spider2__{t}" for t in tool_names())],
            cwd=ws.project_dir, env=env, capture_output=True, text=True, timeout=240,
            stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        requests = fake.requests
    seen = all_tool_results(requests)
    assert all(f"mcp__spider2__{t}" in requests[0].tool_names for t in tool_names())
    local = anyio.run(in_process, QueryService.for_workspace(ws, FAKE_DATE), calls)
    for i, (text, is_error) in enumerate(local):
        assert seen[f"toolu_{i}"].strip() == text.strip(), (calls[i], seen[f"toolu_{i}"])
        assert is_error == (i >= 3)
    assert "\n6\n" in seen["toolu_1"]
    assert json.loads(done.stdout)["result"] == "Done."

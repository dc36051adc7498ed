"""The database tools a command agent reaches through its MCP client: the runner's socket
(:mod:`spider2local.dbtools.endpoint`) and the stdlib bridge to it. Real MCP clients get the
in-process tools' answers and refusals (outside the sandbox and inside it), and the socket,
spoken to as an adversary would, stays bounded and never fails the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import duckdb
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from spider2local.dbtools.endpoint import (
    EndpointLimits,
    StreamLimits,
    ToolSocket,
    open_tool_socket,
    write_client_config,
)
from spider2local.dbtools.query import FRESH_SCAN, QueryService
from spider2local.dbtools.tools import tool_names
from spider2local.proc.tempdirs import owned_prefix
from spider2local.sandbox.probe import probe
from tests.dbtools.test_query import FAKE_DATE, audit_lines, make_workspace
from tests.dbtools.test_server import ALLOWED, in_process, refused, with_start

HERE = Path(__file__).parent


def message(id_: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        body["id"] = id_
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode() + b"\n"


HELLO = message(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "test", "version": "0"}}) + \
    message(None, "notifications/initialized")


class Raw:
    """A client speaking bytes to the socket, answers read as JSON lines."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def answer(self, within: float = 30) -> dict[str, Any]:
        """The next message that has an id (a response or an error)."""
        with anyio.fail_after(within):
            while True:
                while b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    data = json.loads(line)
                    if "id" in data:
                        return data  # type: ignore[no-any-return]
                self.buffer += await self.stream.receive()

    async def closed(self, within: float = 10) -> bool:
        """Does the server end the connection (EOF after whatever it had sent)?"""
        with anyio.move_on_after(within):
            try:
                while True:
                    await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return True
        return False


@asynccontextmanager
async def raw(path: Path) -> AsyncIterator[Raw]:
    async with await anyio.connect_unix(path) as stream:
        yield Raw(stream)


async def hello(client: Raw) -> None:
    await client.send(HELLO)
    assert "result" in await client.answer()


def serving(tmp_path: Path, limits: EndpointLimits,
            body: Callable[[ToolSocket], Coroutine[Any, Any, None]]) -> ToolSocket:
    ws = make_workspace(tmp_path)

    async def main() -> ToolSocket:
        async with open_tool_socket(QueryService.for_workspace(ws, FAKE_DATE), limits) as tools:
            await body(tools)
        return tools

    return anyio.run(main)


# --- the socket, attacked ---------------------------------------------------------------------

def test_lines_that_are_not_json_rpc_are_dropped_and_the_session_goes_on(tmp_path: Path) -> None:
    async def body(tools: ToolSocket) -> None:
        async with raw(tools.path) as client:
            await client.send(b"\xff\xfe\x00garbage\n" b"not json\n" b"[1, 2]\n"
                              b'{"jsonrpc": "2.0"}\n' b'{"id": 1}\n' b"\n" b"   \n"
                              b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}\n')
            await hello(client)
            await client.send(message(1, "tools/list"))
            listed = await client.answer()
            assert [t["name"] for t in listed["result"]["tools"]] == list(tool_names())
            await client.send(message(2, "tools/call", {"name": "query",
                                                        "arguments": {"sql": 42}}))
            assert (await client.answer())["result"]["isError"] is True  # not a crash
            await client.send(message(3, "no/such/method"))
            assert "error" in await client.answer()

    tools = serving(tmp_path, EndpointLimits(), body)
    assert tools.failed == 0 and tools.served == 1


def test_a_message_over_the_limit_is_answered_skipped_and_never_held(tmp_path: Path) -> None:
    limits = EndpointLimits(stream=StreamLimits(max_line=64 * 1024))

    async def body(tools: ToolSocket) -> None:
        async with raw(tools.path) as client:
            await hello(client)
            huge = "SELECT '" + "x" * (3 << 20) + "'"
            await client.send(message(5, "tools/call", {"name": "query",
                                                        "arguments": {"sql": huge}}))
            answer = await client.answer()
            assert answer["id"] == 5 and "over 65536 bytes" in answer["error"]["message"]
            await client.send(b'{"no id here": "' + b"y" * (200 * 1024) + b'"}\n')
            await client.send(message(6, "tools/list"))  # the next line is read as usual
            assert (await client.answer())["id"] == 6

    assert serving(tmp_path, limits, body).failed == 0


def test_a_client_that_never_reads_is_dropped_while_others_are_served(tmp_path: Path) -> None:
    limits = EndpointLimits(stream=StreamLimits(in_flight=2, send_timeout=1.0))
    ws = make_workspace(tmp_path)
    assert ws.scan_path is not None
    ws.scan_path.write_text(json.dumps({"models": ["m" * 100] * 20_000}))  # 2 MB answers

    async def main() -> tuple[int, int, ToolSocket]:
        service = QueryService.for_workspace(ws, FAKE_DATE)
        service.project = None  # the stored 2 MB scan, not a fresh one of the project
        async with open_tool_socket(service, limits) as tools, raw(tools.path) as stuck:
            await hello(stuck)
            sent = 0
            with anyio.move_on_after(20):  # 40 answers of 2 MB asked for (2.4 MB), none read
                try:
                    for i in range(1, 41):
                        await stuck.send(message(i, "tools/call", {
                            "name": "project_scan", "arguments": {"pad": "x" * 60_000}}))
                        sent += 1
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
            await anyio.sleep(limits.stream.send_timeout + 1)
            async with raw(tools.path) as other:  # served meanwhile
                await hello(other)
                await other.send(message(1, "tools/list"))
                assert len((await other.answer())["result"]["tools"]) == 4
            answered = 0
            with anyio.fail_after(60):
                try:
                    while True:
                        if "result" in await stuck.answer():
                            answered += 1
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass
            return sent, answered, tools

    sent, answered, tools = anyio.run(main)
    # the server stopped reading at the in-flight bound (the rest waited in the socket's
    # buffers until the client's sends blocked) and then gave up on its unread answers
    assert sent < 30, sent
    assert answered <= limits.stream.in_flight
    assert tools.failed == 0


def test_connections_beyond_the_limit_are_closed_at_once(tmp_path: Path) -> None:
    limits = EndpointLimits(connections=2)

    async def body(tools: ToolSocket) -> None:
        async with raw(tools.path) as a, raw(tools.path) as b:
            await hello(a)
            await hello(b)
            for _ in range(3):
                async with raw(tools.path) as extra:
                    assert await extra.closed()
            await a.send(message(1, "tools/list"))
            assert "result" in await a.answer()
        with anyio.fail_after(10):  # room again once they closed
            while tools.active:  # noqa: ASYNC110 (a counter, polled)
                await anyio.sleep(0.05)
        async with raw(tools.path) as again:
            await hello(again)

    tools = serving(tmp_path, limits, body)
    assert tools.refused == 3 and tools.served == 3 and tools.failed == 0


def test_leaving_the_block_ends_every_connection_and_removes_the_socket(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)

    async def main() -> Path:
        async with open_tool_socket(QueryService.for_workspace(ws, FAKE_DATE)) as tools:
            client_cm = raw(tools.path)
            client = await client_cm.__aenter__()
            await hello(client)
            path = tools.path
        try:
            assert await client.closed()
        finally:
            await client_cm.__aexit__(None, None, None)
        return path

    path = anyio.run(main)
    assert not path.exists() and not path.parent.exists()


def test_the_socket_path_is_no_longer_than_the_gateways_which_the_probe_checks() -> None:
    from spider2local.dbtools.endpoint import SOCKET_KIND, SOCKET_NAME
    from spider2local.gateway.server import SOCKET_NAME as GATEWAY_SOCKET

    assert len(owned_prefix(SOCKET_KIND)) + len(SOCKET_NAME) <= \
        len(owned_prefix("gateway")) + len(GATEWAY_SOCKET)


# --- the bridge -------------------------------------------------------------------------------

@pytest.mark.process
def test_the_bridge_carries_a_real_mcp_client_and_ends_with_the_socket(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    folder = tmp_path / "agent-input"
    folder.mkdir()

    async def main() -> tuple[list[str], str, int | None]:
        async with open_tool_socket(QueryService.for_workspace(ws, FAKE_DATE)) as tools:
            config = json.loads(write_client_config(folder, tools.path).read_text())
            server = config["mcpServers"]["spider2"]
            params = StdioServerParameters(command=server["command"], args=server["args"])
            async with stdio_client(params) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                scan = await session.call_tool("project_scan", {})
            # a bridge left running ends when the runner closes the socket
            bridge = await anyio.open_process([server["command"], *server["args"]])
            with anyio.fail_after(30):
                while tools.served < 2:  # noqa: ASYNC110 (a counter, polled)
                    await anyio.sleep(0.05)
        with anyio.fail_after(10):
            code = await bridge.wait()
        text = "".join(getattr(c, "text", "") for c in scan.content)
        return names, text, code

    names, scan, code = anyio.run(main)
    assert names == list(tool_names())
    assert scan.startswith(FRESH_SCAN) and '"models": []' in scan  # scanned by the runner
    assert code == 0
    missing = subprocess.run([sys.executable, "-I", "-S", str(folder / "mcp-bridge.py"),
                              str(tmp_path / "gone.sock")], capture_output=True, text=True,
                             timeout=30, check=False, stdin=subprocess.DEVNULL)
    assert missing.returncode == 1 and "not reachable" in missing.stderr


async def over_bridge(config: dict[str, Any], calls: list[tuple[str, dict[str, str]]]
                      ) -> list[tuple[str, bool]]:
    server = config["mcpServers"]["spider2"]
    params = StdioServerParameters(command=server["command"], args=server["args"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        answers = []
        for name, args in calls:
            result = await session.call_tool(name, args)
            answers.append(("\n".join(getattr(c, "text", "") for c in result.content),
                            bool(result.is_error)))
        return answers


@pytest.mark.slow
def test_through_the_bridge_the_same_answers_as_the_in_process_tools(tmp_path: Path) -> None:
    ws = with_start(tmp_path)
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    gold = tmp_path / "gold.duckdb"
    duckdb.connect(str(gold)).close()
    calls = ALLOWED + refused(secret, gold)
    folder = tmp_path / "agent-input"
    folder.mkdir()

    async def remote() -> list[tuple[str, bool]]:
        async with open_tool_socket(QueryService.for_workspace(ws, FAKE_DATE)) as tools:
            config = json.loads(write_client_config(folder, tools.path).read_text())
            return await over_bridge(config, calls)

    got = anyio.run(remote)
    local = anyio.run(in_process, QueryService.for_workspace(ws, FAKE_DATE), calls)
    assert got == local
    assert "2024-03-17" in got[0][0]
    for (text, is_error), call in zip(got[len(ALLOWED):], refused(secret, gold), strict=True):
        assert is_error and "a\n1" not in text, (call, text)
    queries = [name for name, _ in calls if name not in ("project_scan", "no_such_tool")]
    assert [line["tool"] for line in audit_lines(ws)] == queries + queries  # one query log


# --- inside the sandbox -----------------------------------------------------------------------

BAKERY_CALLS: list[tuple[str, dict[str, str]]] = [
    ("query", {"sql": "SELECT current_date AS today"}),
    ("query", {"sql": "SELECT order_id, customer_name FROM orders ORDER BY order_id LIMIT 5"}),
    ("query", {"sql": "SELECT count(*) AS n FROM start.orders"}),
    ("query", {"sql": "SELECT * FROM missing_table"}),
    ("list_tables", {}),
    ("describe_table", {"table": "orders"}),
    ("project_scan", {}),
]


@pytest.mark.slow
@pytest.mark.skipif(not probe().ok, reason="namespaces unavailable here")
def test_a_command_agent_in_the_sandbox_gets_the_in_process_answers_over_mcp(
        tmp_path: Path) -> None:
    """A command agent whose command is the ``mcp`` package's stdio client started from
    ``$SPIDER2_MCP_CONFIG`` (tests/dbtools/mcp_agent.py), run by the command agent under
    ``--isolation namespace``: two sessions at once, the in-process tools' answers call by
    call, every write, ATTACH and file read refused, gold unreadable, the socket good for
    nothing but MCP, and every query in the task's query log."""
    from spider2local.agents.contract import AgentContext, AgentLimits
    from spider2local.agents.registry import make_agent
    from spider2local.core.transcript import Transcript
    from spider2local.dataset.load import load_dataset
    from spider2local.sandbox.isolation import IsolationMode
    from spider2local.suite.load import bundled_suite_path, load_suite
    from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace

    task = load_dataset(load_suite(bundled_suite_path())).tasks[0]
    gold = tmp_path / "gold.duckdb"
    con = duckdb.connect(str(gold))
    con.execute("CREATE TABLE answer AS SELECT 'GOLD-ROW' AS secret")
    con.close()
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    calls = BAKERY_CALLS + refused(secret, gold) + [
        ("query", {"sql": f"SELECT * FROM read_duckdb('{gold}')"}),
        ("query", {"sql": f"SELECT * FROM glob('{tmp_path}/*')"})]
    tools = tmp_path / "agent-install"
    tools.mkdir()
    shutil.copyfile(HERE / "mcp_agent.py", tools / "agent.py")
    (tools / "calls.json").write_text(json.dumps(calls))
    ws = prepare_workspace(task, artifacts=tmp_path / "artifacts", parent=tmp_path)
    try:
        transcript = tmp_path / "transcript.jsonl"
        ctx = AgentContext(task=task, workspace=ws, limits=AgentLimits(max_turns=1, timeout=240),
                           transcript=Transcript(transcript), isolation=IsolationMode.NAMESPACE,
                           off_limits=(gold.parent / "gold.duckdb",))
        agent = make_agent("command", command=f"{sys.executable} {tools}/agent.py "
                                              f"{tools}/calls.json", read_only=[tools])
        outcome = anyio.run(agent.run, ctx)
        stderr = (ws.artifacts / "agent.stderr").read_text()
        assert outcome.error is None, (outcome.error, stderr[-3000:])
        seen = json.loads((ws.artifacts / "agent.stdout").read_text())
        logged = [str(line["tool"]) for line in audit_lines(ws)]
        local = anyio.run(in_process, QueryService.for_workspace(ws, task.date), calls)
    finally:
        cleanup_workspace(ws)
    assert seen["agent"]["tools"] == seen["sub"]["tools"] == list(tool_names())
    remote = [(text, is_error) for text, is_error in seen["agent"]["answers"]]
    assert remote == local
    assert task.date.isoformat() in remote[0][0]  # the task's fake clock
    assert not remote[2][1] and "\n22\n" in remote[2][0]  # the start catalog is attached
    for (text, is_error), call in zip(remote[len(BAKERY_CALLS):], calls[len(BAKERY_CALLS):],
                                      strict=True):
        assert is_error, (call, text)
        assert "GOLD-ROW" not in text and "a\n1" not in text, (call, text)
    assert "main | orders" in seen["sub"]["answers"][0][0]  # the sub-agent's own session
    assert "root:" not in seen["raw"] and "GOLD" not in seen["raw"]
    queries = [n for n, _ in calls if n not in ("project_scan", "no_such_tool")]
    assert sorted(logged) == sorted([*queries, "list_tables"])  # the two sessions' calls
    served = [json.loads(line)["data"] for line in transcript.read_text().splitlines()
              if json.loads(line)["kind"] == "database_tools"]
    assert served and served[0]["connections"] >= 3 and served[0]["failed"] == 0


@pytest.mark.slow
@pytest.mark.skipif(not probe().ok, reason="namespaces unavailable here")
def test_the_claude_code_cli_in_the_sandbox_uses_the_tools_through_mcp_config(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    """The bundled Claude Code CLI as a command agent under ``--isolation namespace``, given
    ``--mcp-config "$SPIDER2_MCP_CONFIG"``: it starts the bridge itself and its tool calls are
    answered by the runner (the fake clock, the start catalog, the refusals; gold, the run's
    own dataset file, unreadable), and the calls are the task's "queries it ran"."""
    from spider2local.agents.claude.session import bundled_cli
    from spider2local.testing import FakeAnthropic, reply, tool

    root = tiny_dataset("t1", gold_tables={"orders": "SELECT 'GOLD-ROW' AS id"})
    gold = root / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    calls = [("query", {"sql": "SELECT current_date AS today"}),
             ("query", {"sql": "SELECT count(*) AS n FROM start.raw_orders"}),
             ("describe_table", {"table": "raw_orders"}),
             ("query", {"sql": "DELETE FROM raw_orders"}),
             ("query", {"sql": f"ATTACH '{gold}' AS g (READ_ONLY)"}),
             ("query", {"sql": f"SELECT * FROM '{gold}'"}),
             ("query", {"sql": f"SELECT * FROM read_duckdb('{gold}')"})]
    script = [reply(tool(f"mcp__spider2__{name}", f"toolu_{i}", **args))
              for i, (name, args) in enumerate(calls)] + [reply("Done.")]
    allowed = ",".join(f"mcp__spider2__{t}" for t in tool_names())
    suite = tmp_path / "tasks.toml"
    suite.write_text(
        f'[dataset]\nroot = "{root}"\n\n[agents.claude-code]\n'
        f'command = "{bundled_cli()} -p \\"$SPIDER2_INSTRUCTION\\" --output-format json '
        f'--mcp-config \\"$SPIDER2_MCP_CONFIG\\" --strict-mcp-config --allowedTools {allowed}"\n'
        'pass_env = ["IS_SANDBOX", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", '
        '"DISABLE_AUTOUPDATER"]\napis = ["anthropic"]\nusage = "claude-json"\n')
    with FakeAnthropic(script) as fake:
        done = subprocess.run(
            [sys.executable, "-m", "spider2local", "--suite", str(suite), "run", "--agent",
             "claude-code", "--isolation", "namespace", "--runs-dir", "runs", "--run-id", "m"],
            cwd=tmp_path, capture_output=True, text=True, timeout=500, check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **fake.env(), "IS_SANDBOX": "1",
                 "DISABLE_AUTOUPDATER": "1"})
        requests = fake.requests
    folder = tmp_path / "runs" / "m" / "t1"
    assert done.returncode == 0, done.stderr[-3000:]
    from tests.dbtools.test_server import all_tool_results

    seen = all_tool_results(requests)
    assert len(seen) == len(calls), ((folder / "agent.stderr").read_text()[-3000:], seen)
    assert "2024-09-15" in seen["toolu_0"]  # the task's fake date, from the runner's child
    assert "\n1\n" in seen["toolu_1"]  # the start catalog
    assert "raw_orders" in seen["toolu_2"]
    for i in range(3, len(calls)):
        assert "ERROR" in seen[f"toolu_{i}"] and "GOLD-ROW" not in seen[f"toolu_{i}"], \
            seen[f"toolu_{i}"]
    logged = [json.loads(line) for line in (folder / "queries.jsonl").read_text().splitlines()]
    assert [entry["tool"] for entry in logged] == [name for name, _ in calls]
    assert [e["sql"] for e in logged if e["tool"] == "query"] == \
        [args["sql"] for name, args in calls if name == "query"]

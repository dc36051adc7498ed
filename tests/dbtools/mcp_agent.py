"""A command agent that speaks MCP (run by tests/dbtools/test_endpoint.py, inside the sandbox):
the ``mcp`` package's own stdio client, started from ``$SPIDER2_MCP_CONFIG`` as any MCP-capable
agent would, two sessions at once (an agent and its sub-agent); then the tool socket spoken to
directly, as an agent that wants more than the tools would. Prints one JSON object."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

SERVER: dict[str, Any] = json.loads(Path(os.environ["SPIDER2_MCP_CONFIG"]).read_text(
    encoding="utf-8"))["mcpServers"]["spider2"]


async def session(calls: list[list[Any]]) -> dict[str, Any]:
    params = StdioServerParameters(command=SERVER["command"], args=SERVER["args"])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        names = [t.name for t in (await s.list_tools()).tools]
        answers = []
        for name, args in calls:
            result = await s.call_tool(name, args)
            answers.append(["\n".join(getattr(c, "text", "") for c in result.content),
                            bool(result.is_error)])
    return {"tools": names, "answers": answers}


def raw(path: str) -> str:
    """Anything but MCP on the socket: HTTP, a file URI, a method the server does not have."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(20)
        s.connect(path)
        s.sendall(b"GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"
                  b'{"jsonrpc":"2.0","id":7,"method":"resources/read",'
                  b'"params":{"uri":"file:///etc/passwd"}}\n')
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    return got.decode(errors="replace")


async def main(calls: list[list[Any]]) -> dict[str, Any]:
    results: dict[str, Any] = {}

    async def one(key: str, todo: list[list[Any]]) -> None:
        results[key] = await session(todo)

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, "agent", calls)
        tg.start_soon(one, "sub", [["list_tables", {}]])
    return results


if __name__ == "__main__":
    found = anyio.run(main, json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
    found["raw"] = raw(SERVER["args"][-1])
    print(json.dumps(found))

"""The governed database tools as an MCP server, for any MCP client: over this process's stdio
(``spider2local mcp-server``) or over one connection of the runner's tool socket
(:func:`serve_stream`, for command agents; :mod:`.endpoint`).

An agent that speaks MCP (Claude Code, Codex, Gemini CLI, Cursor, ...) gets the tools the
Claude session has in-process: the same table (:data:`~.tools.TOOLS`), the same dispatcher
(:func:`~.tools.call_tool`), so the same read-only policy, ``start`` catalog, row and time
limits and query log. The only importer of the ``mcp`` package; the low-level server, because
the tools' schemas already exist as data and need no decorator to infer them.

Over the socket the client is the agent, untrusted, so the transport is bounded where stdio's
(a pipe to the user's own client) is not (:class:`~.endpoint.StreamLimits`): one message is at
most ``max_line`` bytes (a longer one is answered with an error and skipped, never buffered
whole), at most ``in_flight`` requests of a connection are read before their answers are
written (a flood waits in the client's socket, not in the runner's memory), an answer the
client does not read within ``send_timeout`` ends the connection, and a line that is not
JSON-RPC is dropped as stdio drops it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from spider2local import __version__
from spider2local.dbtools.config import ToolConfig
from spider2local.dbtools.endpoint import StreamLimits
from spider2local.dbtools.query import QueryService
from spider2local.dbtools.tools import TOOLS, call_tool

SERVER_NAME = "spider2"
"""The server's name: Claude Code calls its tools ``mcp__spider2__query`` and so on, the
names the Claude session's in-process server gives them."""


log = logging.getLogger(__name__)


def build_server(service: QueryService,
                 calls: anyio.CapacityLimiter | None = None) -> Server[Any]:
    """An MCP server answering :data:`TOOLS` from ``service``; ``calls`` bounds the tool calls
    running at once (each query is a child process) across every connection sharing it."""

    async def list_tools(_ctx: ServerRequestContext[Any],
                         _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description,
                       input_schema=dict(t.input_schema)) for t in TOOLS])

    async def call(_ctx: ServerRequestContext[Any],
                   params: types.CallToolRequestParams) -> types.CallToolResult:
        if calls is None:
            text, is_error = await call_tool(service, params.name, params.arguments)
        else:
            async with calls:
                text, is_error = await call_tool(service, params.name, params.arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    is_error=is_error)

    return Server(SERVER_NAME, version=__version__,
                  instructions="Read-only access to this task's DuckDB database and its dbt "
                               "project scan. Change data through dbt models, not here.",
                  on_list_tools=list_tools, on_call_tool=call)


async def serve_stdio(config: ToolConfig, env: Mapping[str, str] | None = None) -> None:
    """Serve ``config``'s database on this process's stdin/stdout until the client closes."""
    server = build_server(config.service(os.environ if env is None else env))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main(config: ToolConfig) -> None:
    anyio.run(serve_stdio, config)


_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')
"""The id of a request too long to parse, from its first bytes (to answer it)."""


@dataclass(frozen=True)
class TooLong:
    """A line over :attr:`StreamLimits.max_line` bytes: its first bytes only."""

    head: bytes


async def lines(stream: anyio.abc.ByteReceiveStream,
                limits: StreamLimits) -> AsyncIterator[bytes | TooLong]:
    """The stream's newline-ended lines, until it ends; a line over ``max_line`` bytes is
    :class:`TooLong`, and the rest of it is read and dropped as it arrives (never held)."""
    buffer = bytearray()
    skipping = False
    while True:
        try:
            chunk = await stream.receive(limits.chunk)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not skipping:
                buffer += piece
                if len(buffer) > limits.max_line:
                    head = bytes(buffer[:4096])
                    buffer.clear()
                    skipping = True
                    yield TooLong(head)
                elif end >= 0:
                    yield bytes(buffer)
                    buffer.clear()
            if end < 0:
                break
            skipping = False
            start = end + 1


def _key(request_id: Any) -> str:
    return str(request_id)


async def serve_stream(service: QueryService, stream: anyio.abc.ByteStream,
                       limits: StreamLimits | None = None,
                       calls: anyio.CapacityLimiter | None = None) -> None:
    """Serve one MCP session (newline-delimited JSON-RPC, as over stdio) on ``stream`` until
    the client closes it, or stops reading its answers; bounded by ``limits``."""
    limits = limits or StreamLimits()
    server = build_server(service, calls)
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    room = anyio.Semaphore(limits.in_flight)
    pending: Counter[str] = Counter()

    def settle(key: str) -> None:
        if pending[key] > 0:
            pending[key] -= 1
            room.release()

    answers = to_client.clone()
    """The reader's own way to the writer: it answers a message too long to read."""

    async def reader() -> None:
        async with to_server, answers:
            async for line in lines(stream, limits):
                if isinstance(line, TooLong):
                    found = _ID.search(line.head)
                    if found is not None:
                        await answers.send(SessionMessage(types.JSONRPCError(
                            jsonrpc="2.0", id=json.loads(found.group(1)),
                            error=types.ErrorData(code=types.INVALID_REQUEST, message=(
                                f"message over {limits.max_line} bytes: not read")))))
                    continue
                if not line.strip():
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # what stdio does with a bad line: dropped
                    await to_server.send(exc)
                    continue
                if isinstance(message, types.JSONRPCRequest):
                    await room.acquire()
                    pending[_key(message.id)] += 1
                elif isinstance(message, types.JSONRPCNotification) \
                        and message.method == "notifications/cancelled" \
                        and isinstance(message.params, dict):
                    settle(_key(message.params.get("requestId")))  # never answered now
                await to_server.send(SessionMessage(message))

    async def writer() -> None:
        async with from_server:
            async for item in from_server:
                message = item.message
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    settle(_key(message.id))
                data = message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                with anyio.fail_after(limits.send_timeout):
                    await stream.send(data.encode())

    async def run() -> None:
        async with to_client, from_client:
            await server.run(from_client, to_client, server.create_initialization_options())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            tg.start_soon(run)
    except* (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as group:
        log.info("database tools: connection ended: %r", group.exceptions[0])

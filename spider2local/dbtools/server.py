"""``spider2local mcp-server``: the governed database tools over MCP stdio, for any MCP client.

An agent that speaks MCP (Claude Code, Codex, Gemini CLI, Cursor, ...) starts this as a stdio
server from its own MCP configuration and gets the tools the Claude session has in-process:
the same table (:data:`~.tools.TOOLS`), the same dispatcher (:func:`~.tools.call_tool`), so the
same read-only policy, ``start`` catalog, row and time limits and query log. The only
importer of the ``mcp`` package; the low-level server, because the tools' schemas already
exist as data and need no decorator to infer them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from spider2local import __version__
from spider2local.dbtools.config import ToolConfig
from spider2local.dbtools.query import QueryService
from spider2local.dbtools.tools import TOOLS, call_tool

SERVER_NAME = "spider2"
"""The server's name: Claude Code calls its tools ``mcp__spider2__query`` and so on, the
names the Claude session's in-process server gives them."""


def build_server(service: QueryService) -> Server[Any]:
    """An MCP server answering :data:`TOOLS` from ``service``."""

    async def list_tools(_ctx: ServerRequestContext[Any],
                         _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description,
                       input_schema=dict(t.input_schema)) for t in TOOLS])

    async def call(_ctx: ServerRequestContext[Any],
                   params: types.CallToolRequestParams) -> types.CallToolResult:
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

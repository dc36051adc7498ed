"""The database tools as a table: name, description, input schema, and the one dispatcher.

Two servers expose these tools: the Claude session's in-process MCP server
(:mod:`spider2local.agents.claude.session`) and the stdio MCP server for any other agent
(:mod:`.server`, ``spider2local mcp-server``). Both take their names, descriptions and schemas
from :data:`TOOLS` and answer every call through :func:`call_tool`, so the two cannot drift: the
policy, the ``start`` catalog, the limits and the query log are :class:`~.query.QueryService`'s,
whichever door a call came through.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spider2local.dbtools.query import QueryService

__all__ = ["TOOLS", "Tool", "call_tool", "tool_names"]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: Mapping[str, Any]
    """JSON Schema of the arguments (what MCP's ``tools/list`` sends)."""


def _schema(**properties: str) -> dict[str, Any]:
    return {"type": "object",
            "properties": {name: {"type": "string", "description": text}
                           for name, text in properties.items()},
            "required": sorted(properties)}


TOOLS: tuple[Tool, ...] = (
    Tool("query", "Run ONE read-only SQL statement (SELECT, WITH, DESCRIBE, SHOW, SUMMARIZE, "
         "EXPLAIN) on the task's DuckDB database, under the task's fixed date. The start "
         "database's untouched copy is attached read-only as catalog `start`. Results are cut "
         "at a row limit; aggregate instead of paging.",
         _schema(sql="one read-only SQL statement")),
    Tool("list_tables", "List every table and view in the task database with row counts.",
         _schema()),
    Tool("describe_table", "Columns and types of one table or view ('name' or 'schema.name').",
         _schema(table="'name' or 'schema.name'")),
    Tool("project_scan", "The dbt project as its files are at this call, as JSON: each "
         "declared model's status (complete, incomplete, stub or missing: a model you have "
         "written shows as complete), its YML description and column descriptions with "
         "{{ doc() }} blocks resolved (naming their .md file), refs, sources, vars and macros.",
         _schema()),
)


def tool_names() -> tuple[str, ...]:
    return tuple(t.name for t in TOOLS)


async def call_tool(service: QueryService, name: str,
                    arguments: Mapping[str, Any] | None) -> tuple[str, bool]:
    """Answer one tool call as ``(text, is_error)``; an unknown tool or a non-string argument
    is an error answer, never an exception (the caller is a model)."""
    args = dict(arguments or {})
    if name == "query":
        return await service.query(_text(args, "sql"))
    if name == "list_tables":
        return await service.list_tables()
    if name == "describe_table":
        return await service.describe(_text(args, "table"))
    if name == "project_scan":
        return await service.project_scan()
    return f"unknown tool {name!r}: the tools are {', '.join(tool_names())}", True


def _text(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key, "")
    return value if isinstance(value, str) else str(value)

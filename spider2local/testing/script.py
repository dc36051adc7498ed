"""The fake API's script: what a test says the model answers, and what the server recorded.

Kept apart from the server (:mod:`.fake_api`) and the wire encoding (:mod:`.sse`) so a test reads
as a list of turns: ``reply("text", tool("Bash", command="dbt run"), input_tokens=10)``, an
:class:`HttpError`, a :class:`Hang`, or a function of the request body returning one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: Mapping[str, Any]
    id: str | None = None
    """Generated (``toolu_<conversation>_<n>``) when not given."""


@dataclass(frozen=True)
class Reply:
    """One assistant message: texts and tool calls, with the usage the server reports for it."""

    blocks: tuple[str | ToolCall, ...]
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(isinstance(b, ToolCall) for b in self.blocks) else "end_turn"


@dataclass(frozen=True)
class HttpError:
    """Answer with an HTTP error (529 = overloaded). ``repeat`` answers every later request of
    the conversation the same way (the CLI retries errors on its own)."""

    status: int = 529
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    repeat: bool = False


@dataclass(frozen=True)
class Malformed:
    """A broken answer: a stream cut off after ``message_start`` (no content, no
    ``message_stop``), or a body that is not JSON when the request did not stream (the CLI falls
    back to that). ``repeat`` answers every later request of the conversation the same way."""

    repeat: bool = False


@dataclass(frozen=True)
class StallAfterStart:
    """Start a streamed answer (``message_start`` with these input tokens) and send nothing
    more until the server closes: an API that stalls mid-message."""

    input_tokens: int = 0


@dataclass(frozen=True)
class Hang:
    """Accept the request and never answer (until the server closes)."""


Answer = Reply | HttpError | Malformed | StallAfterStart | Hang
Turn = Answer | Callable[[Mapping[str, Any]], Answer]
"""A scripted answer, or a function of the request body returning one."""


def reply(*blocks: str | ToolCall, input_tokens: int = 0, output_tokens: int = 0,
          cache_read_tokens: int = 0, cache_creation_tokens: int = 0) -> Reply:
    return Reply(tuple(blocks), input_tokens, output_tokens, cache_read_tokens,
                 cache_creation_tokens)


def tool(name: str, tool_id: str | None = None, /, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments, tool_id)


def system_text(body: Mapping[str, Any]) -> str:
    """The request's system prompt as one string: Anthropic's ``system`` (a string or a list
    of blocks), or an OpenAI chat request's ``system``/``developer`` messages."""
    system = body.get("system")
    if system is None:
        messages = body.get("messages")
        return "\n".join(_flatten(m.get("content")) for m in
                         (messages if isinstance(messages, list) else [])
                         if isinstance(m, Mapping) and m.get("role") in ("system", "developer"))
    if isinstance(system, str):
        return system
    return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))


def route_by_system(markers: Mapping[str, str],
                    default: str | None = None) -> Callable[[Mapping[str, Any]], str | None]:
    """Route to the first conversation whose marker text occurs in the system prompt."""
    def route(body: Mapping[str, Any]) -> str | None:
        text = system_text(body)
        return next((name for name, marker in markers.items() if marker in text), default)
    return route


@dataclass(frozen=True)
class RecordedRequest:
    conversation: str | None
    method: str
    path: str
    body: Mapping[str, Any]
    answer: str
    """``scripted``, ``fallback``, ``error <status>``, ``hang`` or ``other``."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """The request's headers, names lower-cased (what credential reached the API)."""

    @property
    def tool_names(self) -> list[str]:
        """The tools offered: Anthropic's ``{"name"}``, OpenAI's ``{"function": {"name"}}``."""
        return [str(t.get("name") or (t.get("function") or {}).get("name"))
                for t in self.body.get("tools", []) or [] if isinstance(t, Mapping)]

    def tool_results(self) -> dict[str, str]:
        """``tool_use_id -> text`` of the tool results the request answers with: the last user
        message's ``tool_result`` blocks (Anthropic), or the trailing ``tool`` messages
        (OpenAI chat completions)."""
        messages = self.body.get("messages") or []
        results: dict[str, str] = {}
        trailing = []
        for message in reversed(messages):
            if not (isinstance(message, Mapping) and message.get("role") == "tool"):
                break
            trailing.append(message)
        for message in reversed(trailing):
            results[str(message.get("tool_call_id"))] = _flatten(message.get("content"))
        if trailing:
            return results
        content = messages[-1].get("content") if messages else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = _flatten(block.get("content"))
        return results


def _flatten(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) if isinstance(c, Mapping) else str(c)
                         for c in content)
    return "" if content is None else str(content)

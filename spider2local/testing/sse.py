"""The Messages API wire format the fake server speaks: a message as JSON, or as SSE events.

The CLI streams (``"stream": true``) and assembles the message from ``message_start``,
``content_block_start/delta/stop``, ``message_delta`` (stop reason and output tokens) and
``message_stop``, as the real API sends them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from spider2local.testing.script import Reply, ToolCall

_ids = itertools.count(1)


def next_id() -> int:
    """A process-wide counter for message, tool-use and request ids (unique across servers)."""
    return next(_ids)


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _content(blocks: Sequence[str | ToolCall], prefix: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, ToolCall):
            out.append({"type": "tool_use", "id": block.id or f"toolu_{prefix}_{next_id()}",
                        "name": block.name, "input": dict(block.input)})
        else:
            out.append({"type": "text", "text": block})
    return out


def message_json(answer: Reply, model: str, conversation: str | None) -> dict[str, Any]:
    """The complete assistant message for ``answer``, as a non-streaming response body."""
    return {
        "id": f"msg_fake_{next_id()}", "type": "message", "role": "assistant", "model": model,
        "content": _content(answer.blocks, conversation or "x"),
        "stop_reason": answer.stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens,
                  "cache_read_input_tokens": answer.cache_read_tokens,
                  "cache_creation_input_tokens": answer.cache_creation_tokens},
    }


def stream_events(message: Mapping[str, Any]) -> Iterator[bytes]:
    """SSE events for a complete message: usage (but output tokens) up front, output at the end,
    as the real API does."""
    start = {**message, "content": [], "stop_reason": None,
             "usage": {**message["usage"], "output_tokens": 0}}
    yield _sse("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(message["content"]):
        first: dict[str, Any]
        delta: dict[str, Any]
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield _sse("content_block_start", {"type": "content_block_start", "index": index,
                                           "content_block": first})
        yield _sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                           "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": message["stop_reason"],
                                           "stop_sequence": None},
                                 "usage": {"output_tokens": message["usage"]["output_tokens"]}})
    yield _sse("message_stop", {"type": "message_stop"})

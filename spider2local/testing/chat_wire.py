"""The OpenAI chat-completions wire format the fake OpenAI server speaks: a completion as JSON,
or as SSE chunks (``stream: true``), from the same scripted :class:`~.script.Reply` as the
Anthropic fake's.

Token counts map as the gateway's meter reads them back: ``prompt_tokens`` is the reply's
input plus cache-read tokens (OpenAI counts cached prompt tokens inside ``prompt_tokens`` and
names them again in ``prompt_tokens_details.cached_tokens``); ``completion_tokens`` its output.
A stream carries usage only in a last chunk with no choices, and only when the request asked
for it (``stream_options.include_usage``), as the real API does; it ends with ``data: [DONE]``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

from spider2local.testing.script import Reply, ToolCall
from spider2local.testing.sse import next_id

DONE = b"data: [DONE]\n\n"


def _chunk(data: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def usage_json(answer: Reply) -> dict[str, Any]:
    prompt = answer.input_tokens + answer.cache_read_tokens
    return {"prompt_tokens": prompt, "completion_tokens": answer.output_tokens,
            "total_tokens": prompt + answer.output_tokens,
            "prompt_tokens_details": {"cached_tokens": answer.cache_read_tokens}}


def completion_json(answer: Reply, model: str, conversation: str | None) -> dict[str, Any]:
    """The complete ``chat.completion`` object for ``answer`` (a non-streaming response)."""
    texts = [b for b in answer.blocks if isinstance(b, str)]
    calls = [{"id": b.id or f"call_{conversation or 'x'}_{next_id()}", "type": "function",
              "function": {"name": b.name, "arguments": json.dumps(dict(b.input))}}
             for b in answer.blocks if isinstance(b, ToolCall)]
    message: dict[str, Any] = {"role": "assistant",
                               "content": "\n".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return {"id": f"chatcmpl-fake-{next_id()}", "object": "chat.completion",
            "created": int(time.time()), "model": model, "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage_json(answer)}


def stream_chunks(completion: Mapping[str, Any], *, include_usage: bool) -> Iterator[bytes]:
    """``chat.completion.chunk`` events for a complete completion: the role, the text, each
    tool call (id and name first, then its arguments), the finish reason, the usage if asked
    for, then ``[DONE]``."""
    base = {"id": completion["id"], "object": "chat.completion.chunk",
            "created": completion["created"], "model": completion["model"],
            "system_fingerprint": None}
    choice = completion["choices"][0]
    message = choice["message"]

    def delta(content: Mapping[str, Any], finish: str | None = None) -> bytes:
        return _chunk({**base, "choices": [{"index": 0, "delta": dict(content),
                                            "logprobs": None, "finish_reason": finish}]})

    yield delta({"role": "assistant", "content": ""})
    if message.get("content"):
        yield delta({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield delta({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": call["function"]["name"],
                                                  "arguments": ""}}]})
        yield delta({"tool_calls": [{"index": index, "function": {
            "arguments": call["function"]["arguments"]}}]})
    yield delta({}, choice["finish_reason"])
    if include_usage:
        yield _chunk({**base, "choices": [], "usage": completion["usage"]})
    yield DONE

"""A loopback fake of the Anthropic Messages API, driven by a per-test script of turns.

Why a fake server and not a mocked SDK: the Claude agent's risky parts are in the real CLI
(streaming, tool calls, subagents, retries, usage accounting, process lifetime). Pointing the real
CLI at ``ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`` exercises all of them offline; only the
model's answers are scripted.

The CLI sends ``POST /v1/messages?beta=true`` with ``"stream": true`` and reads SSE events
(``message_start``, ``content_block_start/delta/stop``, ``message_delta``, ``message_stop``); tool
calls are ``tool_use`` blocks and the next request carries the ``tool_result``. Non-streaming
requests get the same message as JSON, ``count_tokens`` a small count.

The script types live in :mod:`.script`, the wire encoding in :mod:`.sse`, the server and its
bookkeeping (conversations, routing, the fallback turn) in :mod:`.server`, shared with the
OpenAI-compatible fake (:mod:`.fake_openai`); this module is what is Anthropic's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from spider2local.testing.script import (
    Answer,
    Hang,
    HttpError,
    Malformed,
    RecordedRequest,
    Reply,
    StallAfterStart,
    ToolCall,
    Turn,
    reply,
    route_by_system,
    system_text,
    tool,
)
from spider2local.testing.server import Handler, ScriptedServer
from spider2local.testing.sse import message_json, stream_events

__all__ = [
    "FakeAnthropic",
    "Hang",
    "HttpError",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "StallAfterStart",
    "ToolCall",
    "Turn",
    "reply",
    "route_by_system",
    "system_text",
    "tool",
]


class FakeAnthropic(ScriptedServer):
    """The server. Use as a context manager; ``env()`` gives the variables pointing a CLI at it."""

    def env(self) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": self.base_url, "ANTHROPIC_API_KEY": "test-key-fake-api",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}

    def error_body(self, kind: str, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}

    def handle_post(self, handler: Handler, path: str, body: Mapping[str, Any]) -> None:
        if path.endswith("/count_tokens"):
            self.record(RecordedRequest(None, "POST", handler.path, body, "other"))
            handler.send_json(200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
            return
        if path != "/v1/messages":
            self.not_found(handler, body)
            return
        answer, conversation = self.take_turn(handler, path, body)
        self._answer(handler, answer, body, conversation)

    def _answer(self, handler: Handler, answer: Answer, body: Mapping[str, Any],
                conversation: str | None) -> None:
        model = str(body.get("model") or "claude-fake")
        if isinstance(answer, Hang):
            handler.hold()
            return
        if isinstance(answer, Malformed):
            self._malformed(handler, body)
            return
        if isinstance(answer, StallAfterStart):
            message = message_json(Reply(("stalled",), input_tokens=answer.input_tokens),
                                   model, conversation)
            handler.start_stream()
            handler.wfile.write(next(iter(stream_events(message))))
            handler.wfile.flush()
            handler.hold()
            return
        if isinstance(answer, HttpError):
            handler.send_json(answer.status, self.error_body(answer.error_type, answer.message))
            return
        message = message_json(answer, model, conversation)
        if body.get("stream"):
            handler.send(200, b"".join(stream_events(message)), "text/event-stream")
        else:
            handler.send_json(200, message)

    @staticmethod
    def _malformed(handler: Handler, body: Mapping[str, Any]) -> None:
        if not body.get("stream"):
            handler.send(200, b'{"id": "msg_broken", "type": "mess', "application/json")
            return
        message = message_json(Reply(("cut",)), str(body.get("model") or "claude-fake"), None)
        first = next(iter(stream_events(message)))
        handler.send(200, first + b"event: content_block_start\ndata: {\"type\": \"con",
                     "text/event-stream")
        handler.close_connection = True

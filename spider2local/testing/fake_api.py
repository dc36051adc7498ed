"""A loopback fake of the Anthropic Messages API, driven by a per-test script of turns.

Why a fake server and not a mocked SDK: the Claude agent's risky parts are in the real CLI
(streaming, tool calls, subagents, retries, usage accounting, process lifetime). Pointing the real
CLI at ``ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`` exercises all of them offline; only the
model's answers are scripted.

The CLI sends ``POST /v1/messages?beta=true`` with ``"stream": true`` and reads SSE events
(``message_start``, ``content_block_start/delta/stop``, ``message_delta``, ``message_stop``); tool
calls are ``tool_use`` blocks and the next request carries the ``tool_result``. Non-streaming
requests get the same message as JSON, ``count_tokens`` a small count.

The script types live in :mod:`.script`, the wire encoding in :mod:`.sse`; this module is the
HTTP server and its bookkeeping.

Several conversations share one server (the verifier subagent is a separate conversation of the
same CLI): a ``route`` function names each request's conversation, and each conversation consumes
its own list of turns in order. Requests no route claims, and conversations whose script ran out,
get a plain "Done." text with zero usage, so stray side requests never hang a test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
from spider2local.testing.sse import message_json, next_id, stream_events

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


@dataclass
class _State:
    positions: dict[str, int] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    served: list[tuple[str, Reply]] = field(default_factory=list)


_FALLBACK = Reply(("Done.",))


class FakeAnthropic:
    """The server. Use as a context manager; ``env()`` gives the variables pointing a CLI at it."""

    def __init__(self, conversations: Mapping[str, Sequence[Turn]] | Sequence[Turn],
                 route: Callable[[Mapping[str, Any]], str | None] | None = None) -> None:
        if not isinstance(conversations, Mapping):
            conversations = {"main": conversations}
        self.conversations = {name: list(turns) for name, turns in conversations.items()}
        self.route = route or (lambda _body: "main")
        self._state = _State()
        self._lock = threading.Lock()
        self.closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def env(self) -> dict[str, str]:
        return {"ANTHROPIC_BASE_URL": self.base_url, "ANTHROPIC_API_KEY": "test-key-fake-api",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._state.requests)

    def conversation_requests(self, name: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.conversation == name]

    def totals(self) -> dict[str, int]:
        """Replies served (scripted ones) and the token sums reported in them."""
        with self._lock:
            served = [r for _, r in self._state.served]
        return {"replies": len(served),
                "input_tokens": sum(r.input_tokens for r in served),
                "output_tokens": sum(r.output_tokens for r in served),
                "cache_read_tokens": sum(r.cache_read_tokens for r in served),
                "cache_creation_tokens": sum(r.cache_creation_tokens for r in served)}

    def next_turn(self, conversation: str | None,
                  body: Mapping[str, Any]) -> tuple[Answer, str]:
        """Consume the conversation's next turn (thread-safe); fallback when none is left."""
        with self._lock:
            turns = self.conversations.get(conversation or "", [])
            pos = self._state.positions.get(conversation or "", 0)
            if conversation is None or pos >= len(turns):
                return _FALLBACK, "fallback"
            turn = turns[pos]
            if not (isinstance(turn, HttpError | Malformed) and turn.repeat):
                self._state.positions[conversation] = pos + 1
        answer = turn(body) if callable(turn) else turn
        if isinstance(answer, Reply):
            with self._lock:
                self._state.served.append((conversation, answer))
            return answer, "scripted"
        if isinstance(answer, HttpError):
            return answer, f"error {answer.status}"
        if isinstance(answer, Malformed):
            return answer, "malformed"
        return answer, "hang"

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._state.requests.append(request)


def _make_handler(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: tests read ``fake.requests`` instead of stderr noise."""

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("request-id", f"req_fake_{next_id()}")
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()

        def _json(self, status: int, data: Mapping[str, Any]) -> None:
            self._send(status, json.dumps(data).encode(), "application/json")

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                data = json.loads(raw or b"{}")
            except ValueError:
                data = {}
            return data if isinstance(data, dict) else {}

        def do_GET(self) -> None:
            fake.record(RecordedRequest(None, "GET", self.path, {}, "other"))
            self._json(404, {"type": "error", "error": {"type": "not_found_error",
                                                        "message": "not in the fake API"}})

        def do_POST(self) -> None:
            body = self._body()
            path = self.path.split("?", 1)[0]
            if path.endswith("/count_tokens"):
                fake.record(RecordedRequest(None, "POST", self.path, body, "other"))
                self._json(200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
                return
            if path != "/v1/messages":
                self.do_GET()
                return
            conversation = fake.route(body)
            answer, kind = fake.next_turn(conversation, body)
            fake.record(RecordedRequest(conversation, "POST", self.path, body, kind,
                                        {k.lower(): v for k, v in self.headers.items()}))
            self._answer(answer, body, conversation)

        def _answer(self, answer: Answer, body: Mapping[str, Any],
                    conversation: str | None) -> None:
            if isinstance(answer, Hang):
                fake.closing.wait()
                self.close_connection = True
                return
            if isinstance(answer, Malformed):
                self._malformed(body)
                return
            if isinstance(answer, StallAfterStart):
                message = message_json(Reply(("stalled",), input_tokens=answer.input_tokens),
                                       str(body.get("model") or "claude-fake"), conversation)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.write(next(iter(stream_events(message))))
                self.wfile.flush()
                fake.closing.wait()
                self.close_connection = True
                return
            if isinstance(answer, HttpError):
                self._json(answer.status, {"type": "error", "error": {
                    "type": answer.error_type, "message": answer.message}})
                return
            message = message_json(answer, str(body.get("model") or "claude-fake"), conversation)
            if body.get("stream"):
                self._send(200, b"".join(stream_events(message)), "text/event-stream")
            else:
                self._json(200, message)

        def _malformed(self, body: Mapping[str, Any]) -> None:
            if not body.get("stream"):
                self._send(200, b'{"id": "msg_broken", "type": "mess', "application/json")
                return
            message = message_json(Reply(("cut",)), str(body.get("model") or "claude-fake"),
                                   None)
            first = next(iter(stream_events(message)))
            self._send(200, first + b"event: content_block_start\ndata: {\"type\": \"con",
                       "text/event-stream")
            self.close_connection = True

    return Handler

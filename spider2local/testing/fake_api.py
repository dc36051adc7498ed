"""A loopback fake of the Anthropic Messages API, driven by a per-test script of turns.

Why a fake server and not a mocked SDK: the Claude agent's risky parts are in the real CLI
(streaming, tool calls, subagents, retries, usage accounting, process lifetime). Pointing the real
CLI at ``ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`` exercises all of them offline; only the
model's answers are scripted.

The CLI sends ``POST /v1/messages?beta=true`` with ``"stream": true`` and reads SSE events
(``message_start``, ``content_block_start/delta/stop``, ``message_delta``, ``message_stop``); tool
calls are ``tool_use`` blocks and the next request carries the ``tool_result``. Non-streaming
requests get the same message as JSON, ``count_tokens`` a small count.

Several conversations share one server (the verifier subagent is a separate conversation of the
same CLI): a ``route`` function names each request's conversation, and each conversation consumes
its own list of turns in order. Requests no route claims, and conversations whose script ran out,
get a plain "Done." text with zero usage, so stray side requests never hang a test.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
class Hang:
    """Accept the request and never answer (until the server closes)."""


Turn = Reply | HttpError | Hang | Callable[[Mapping[str, Any]], "Reply | HttpError | Hang"]
"""A scripted answer, or a function of the request body returning one."""


def reply(*blocks: str | ToolCall, input_tokens: int = 0, output_tokens: int = 0,
          cache_read_tokens: int = 0, cache_creation_tokens: int = 0) -> Reply:
    return Reply(tuple(blocks), input_tokens, output_tokens, cache_read_tokens,
                 cache_creation_tokens)


def tool(name: str, tool_id: str | None = None, /, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments, tool_id)


def system_text(body: Mapping[str, Any]) -> str:
    """The request's system prompt as one string (it may be a string or a list of blocks)."""
    system = body.get("system", "")
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

    @property
    def tool_names(self) -> list[str]:
        return [str(t.get("name")) for t in self.body.get("tools", []) or []]

    def tool_results(self) -> dict[str, str]:
        """``tool_use_id -> text`` of the tool results in the last user message."""
        messages = self.body.get("messages") or []
        content = messages[-1].get("content") if messages else None
        results: dict[str, str] = {}
        for block in content if isinstance(content, list) else []:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                results[str(block.get("tool_use_id"))] = _flatten(block.get("content"))
        return results


def _flatten(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) if isinstance(c, Mapping) else str(c)
                         for c in content)
    return "" if content is None else str(content)


@dataclass
class _State:
    positions: dict[str, int] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    served: list[tuple[str, Reply]] = field(default_factory=list)


_FALLBACK = Reply(("Done.",))
_ids = itertools.count(1)


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
                  body: Mapping[str, Any]) -> tuple[Reply | HttpError | Hang, str]:
        """Consume the conversation's next turn (thread-safe); fallback when none is left."""
        with self._lock:
            turns = self.conversations.get(conversation or "", [])
            pos = self._state.positions.get(conversation or "", 0)
            if conversation is None or pos >= len(turns):
                return _FALLBACK, "fallback"
            turn = turns[pos]
            if not (isinstance(turn, HttpError) and turn.repeat):
                self._state.positions[conversation] = pos + 1
        answer = turn(body) if callable(turn) else turn
        if isinstance(answer, Reply):
            with self._lock:
                self._state.served.append((conversation, answer))
            return answer, "scripted"
        if isinstance(answer, HttpError):
            return answer, f"error {answer.status}"
        return answer, "hang"

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._state.requests.append(request)


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _content(blocks: Sequence[str | ToolCall], prefix: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, ToolCall):
            out.append({"type": "tool_use", "id": block.id or f"toolu_{prefix}_{next(_ids)}",
                        "name": block.name, "input": dict(block.input)})
        else:
            out.append({"type": "text", "text": block})
    return out


def _message(answer: Reply, model: str, conversation: str | None) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{next(_ids)}", "type": "message", "role": "assistant", "model": model,
        "content": _content(answer.blocks, conversation or "x"),
        "stop_reason": answer.stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens,
                  "cache_read_input_tokens": answer.cache_read_tokens,
                  "cache_creation_input_tokens": answer.cache_creation_tokens},
    }


def _stream_events(message: Mapping[str, Any]) -> Iterator[bytes]:
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


def _make_handler(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: tests read ``fake.requests`` instead of stderr noise."""

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("request-id", f"req_fake_{next(_ids)}")
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
            fake.record(RecordedRequest(conversation, "POST", self.path, body, kind))
            self._answer(answer, body, conversation)

        def _answer(self, answer: Reply | HttpError | Hang, body: Mapping[str, Any],
                    conversation: str | None) -> None:
            if isinstance(answer, Hang):
                fake.closing.wait()
                self.close_connection = True
                return
            if isinstance(answer, HttpError):
                self._json(answer.status, {"type": "error", "error": {
                    "type": answer.error_type, "message": answer.message}})
                return
            message = _message(answer, str(body.get("model") or "claude-fake"), conversation)
            if body.get("stream"):
                self._send(200, b"".join(_stream_events(message)), "text/event-stream")
            else:
                self._json(200, message)

    return Handler

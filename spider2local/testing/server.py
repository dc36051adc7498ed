"""What every fake model API shares: a loopback HTTP server, the per-conversation script and
its bookkeeping (which turn comes next, what was served, what was asked).

A vendor's fake (:class:`~spider2local.testing.fake_api.FakeAnthropic`,
:class:`~spider2local.testing.fake_openai.FakeOpenAI`) says only how its API's requests are
routed and how a scripted :data:`~spider2local.testing.script.Answer` is put on the wire;
the script types (:mod:`.script`) are the same for every vendor, so a test of one agent reads
like a test of another.

Several conversations share one server (the verifier subagent is a separate conversation of
the same CLI): a ``route`` function names each request's conversation, and each conversation
consumes its own list of turns in order. Requests no route claims, and conversations whose
script ran out, get a plain "Done." text with zero usage, so stray side requests never hang a
test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from spider2local.testing.script import (
    Answer,
    HttpError,
    Malformed,
    RecordedRequest,
    Reply,
    Turn,
)
from spider2local.testing.sse import next_id

FALLBACK = Reply(("Done.",))
"""What a request gets when no scripted turn is left for it."""


@dataclass
class _State:
    positions: dict[str, int] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    served: list[tuple[str, Reply]] = field(default_factory=list)


class Handler(BaseHTTPRequestHandler):
    """One connection of a fake API: the HTTP chores, the answers left to :attr:`fake`."""

    protocol_version = "HTTP/1.1"
    fake: ScriptedServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: tests read ``fake.requests`` instead of stderr noise."""

    def send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header(self.fake.request_id_header, f"req_fake_{next_id()}")
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def send_json(self, status: int, data: Mapping[str, Any]) -> None:
        self.send(status, json.dumps(data).encode(), "application/json")

    def start_stream(self) -> None:
        """The head of an SSE answer (no length: the body ends when the connection does)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header(self.fake.request_id_header, f"req_fake_{next_id()}")
        self.end_headers()

    def hold(self) -> None:
        """Keep the client waiting until the server closes, then drop the connection."""
        self.fake.closing.wait()
        self.close_connection = True

    def read_body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {}
        return data if isinstance(data, dict) else {}

    def header_map(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def do_GET(self) -> None:
        self.fake.not_found(self, None)

    def do_POST(self) -> None:
        body = self.read_body()
        self.fake.handle_post(self, self.path.split("?", 1)[0], body)


class ScriptedServer:
    """A fake API's server and script. Use as a context manager; ``env()`` gives the variables
    that point a client at it. Subclasses implement :meth:`handle_post`, :meth:`not_found` and
    :meth:`env`."""

    request_id_header = "request-id"

    def __init__(self, conversations: Mapping[str, Sequence[Turn]] | Sequence[Turn],
                 route: Callable[[Mapping[str, Any]], str | None] | None = None) -> None:
        if not isinstance(conversations, Mapping):
            conversations = {"main": conversations}
        self.conversations = {name: list(turns) for name, turns in conversations.items()}
        self.route = route or (lambda _body: "main")
        self._state = _State()
        self._lock = threading.Lock()
        self.closing = threading.Event()
        handler = type("BoundHandler", (Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def __enter__(self) -> Self:
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
                return FALLBACK, "fallback"
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

    def take_turn(self, handler: Handler, path: str,
                  body: Mapping[str, Any]) -> tuple[Answer, str | None]:
        """Route a scripted request, consume its turn and record it with its headers."""
        conversation = self.route(body)
        answer, kind = self.next_turn(conversation, body)
        self.record(RecordedRequest(conversation, "POST", handler.path, body, kind,
                                    handler.header_map()))
        return answer, conversation

    def handle_post(self, handler: Handler, path: str, body: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def not_found(self, handler: Handler, body: Mapping[str, Any] | None) -> None:
        """A request for something the fake does not serve: recorded, answered 404."""
        self.record(RecordedRequest(None, handler.command, handler.path, body or {}, "other",
                                    handler.header_map()))
        handler.send_json(404, self.error_body("not_found_error", "not in the fake API"))

    def error_body(self, kind: str, message: str) -> dict[str, Any]:
        raise NotImplementedError

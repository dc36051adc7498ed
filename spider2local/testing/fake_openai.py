"""A loopback fake of an OpenAI-compatible chat-completions API, driven by the same script of
turns as the Anthropic fake (:mod:`.fake_api`).

Agents of other vendors (mini-swe-agent through litellm, the openai SDK, anything that takes an
OpenAI-compatible base URL) talk to it as to the real service: ``POST /v1/chat/completions``,
answered as one ``chat.completion`` JSON object or, with ``"stream": true``, as SSE chunks
(:mod:`.chat_wire`). A :class:`~.script.ToolCall` becomes a ``function`` tool call whose
arguments are the JSON of its input; the next request carries the ``tool`` messages, which
:meth:`~.script.RecordedRequest.tool_results` reads back. Errors come in OpenAI's shape
(``{"error": {"message", "type", "param", "code"}}``); :class:`~.script.Malformed` is a body
cut short (or a stream cut mid-chunk), :class:`~.script.StallAfterStart` a stream that sends
its first chunk and then nothing, :class:`~.script.Hang` no answer at all.

Routing, conversations and the fallback turn are the shared server's (:mod:`.server`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spider2local.testing.chat_wire import completion_json, stream_chunks
from spider2local.testing.script import Answer, Hang, HttpError, Malformed, Reply, StallAfterStart
from spider2local.testing.server import Handler, ScriptedServer

CHAT_PATH = "/v1/chat/completions"
API_KEY = "test-key-fake-openai"


class FakeOpenAI(ScriptedServer):
    """The server. Use as a context manager; ``env()`` points an OpenAI client at it
    (``OPENAI_BASE_URL`` ends in ``/v1``, as clients expect: they append
    ``/chat/completions``)."""

    request_id_header = "x-request-id"

    @property
    def api_base(self) -> str:
        return self.base_url + "/v1"

    def env(self) -> dict[str, str]:
        return {"OPENAI_BASE_URL": self.api_base, "OPENAI_API_KEY": API_KEY}

    def error_body(self, kind: str, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    def handle_post(self, handler: Handler, path: str, body: Mapping[str, Any]) -> None:
        if path != CHAT_PATH:
            self.not_found(handler, body)
            return
        answer, conversation = self.take_turn(handler, path, body)
        self._answer(handler, answer, body, conversation)

    def _answer(self, handler: Handler, answer: Answer, body: Mapping[str, Any],
                conversation: str | None) -> None:
        model = str(body.get("model") or "gpt-fake")
        stream = bool(body.get("stream"))
        options = body.get("stream_options")
        include_usage = isinstance(options, Mapping) and bool(options.get("include_usage"))
        if isinstance(answer, Hang):
            handler.hold()
            return
        if isinstance(answer, HttpError):
            handler.send_json(answer.status, self.error_body(answer.error_type, answer.message))
            return
        if isinstance(answer, Malformed):
            if not stream:
                handler.send(200, b'{"id": "chatcmpl-broken", "object": "chat.comp',
                             "application/json")
                return
            first = next(iter(stream_chunks(completion_json(Reply(("cut",)), model, None),
                                            include_usage=include_usage)))
            handler.send(200, first + b'data: {"id": "chatcmpl-broken", "choi',
                         "text/event-stream")
            handler.close_connection = True
            return
        if isinstance(answer, StallAfterStart):
            self._stall(handler, model, stream)
            return
        completion = completion_json(answer, model, conversation)
        if stream:
            handler.send(200, b"".join(stream_chunks(completion, include_usage=include_usage)),
                         "text/event-stream")
        else:
            handler.send_json(200, completion)

    @staticmethod
    def _stall(handler: Handler, model: str, stream: bool) -> None:
        """The head and a first piece of the answer (the role chunk of a stream, the start of
        a JSON body whose length says more is coming), then nothing until the server closes."""
        first = next(iter(stream_chunks(completion_json(Reply(("stalled",)), model, None),
                                        include_usage=False)))
        if stream:
            handler.start_stream()
            handler.wfile.write(first)
        else:
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", "100000")
            handler.end_headers()
            handler.wfile.write(b'{"id": "chatcmpl-stalled", ')
        handler.wfile.flush()
        handler.hold()

"""The fake Anthropic API, spoken to over real HTTP (the CLI-driven checks are in
test_claude_agent.py)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from spider2local.testing import FakeAnthropic, Hang, HttpError, reply, route_by_system, tool


def post(fake: FakeAnthropic, body: dict[str, Any], path: str = "/v1/messages?beta=true",
         timeout: float = 5) -> tuple[int, bytes]:
    request = urllib.request.Request(fake.base_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in raw.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def rebuild(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Assemble a message from SSE events as a streaming client does."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for name, data in events:
        if name == "message_start":
            message = data["message"]
        elif name == "content_block_start":
            message["content"].append(data["content_block"])
        elif name == "content_block_delta":
            delta, block = data["delta"], message["content"][data["index"]]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "message_delta":
            message["stop_reason"] = data["delta"]["stop_reason"]
            message["usage"]["output_tokens"] = data["usage"]["output_tokens"]
    for index, text in partial.items():
        message["content"][index]["input"] = json.loads(text)
    return message


def test_streams_scripted_turns_in_order_with_usage() -> None:
    script = [reply("looking", tool("Bash", command="ls"), input_tokens=11, output_tokens=7,
                    cache_read_tokens=3, cache_creation_tokens=2),
              reply("finished", input_tokens=5, output_tokens=1)]
    with FakeAnthropic(script) as fake:
        status, raw = post(fake, {"model": "claude-x", "stream": True, "messages": []})
        assert status == 200
        events = sse_events(raw)
        names = [e for e, _ in events]
        assert names[0] == "message_start"
        assert names[-2:] == ["message_delta", "message_stop"]
        first = rebuild(events)
        assert first["model"] == "claude-x"
        assert first["stop_reason"] == "tool_use"
        assert first["content"][0] == {"type": "text", "text": "looking"}
        assert first["content"][1]["name"] == "Bash"
        assert first["content"][1]["input"] == {"command": "ls"}
        assert first["usage"] == {"input_tokens": 11, "output_tokens": 7,
                                  "cache_read_input_tokens": 3, "cache_creation_input_tokens": 2}
        second = rebuild(sse_events(post(fake, {"stream": True, "messages": []})[1]))
        assert second["stop_reason"] == "end_turn"
        assert second["content"] == [{"type": "text", "text": "finished"}]
        # Script exhausted: a harmless fallback, not counted as served.
        third = rebuild(sse_events(post(fake, {"stream": True, "messages": []})[1]))
        assert third["content"][0]["text"] == "Done."
        assert fake.totals() == {"replies": 2, "input_tokens": 16, "output_tokens": 8,
                                 "cache_read_tokens": 3, "cache_creation_tokens": 2}
        assert [r.answer for r in fake.requests] == ["scripted", "scripted", "fallback"]


def test_routes_conversations_by_system_prompt_and_records_tool_results() -> None:
    script = {"main": [reply("main 1"), reply("main 2")], "verifier": [reply("PASS")]}
    route = route_by_system({"verifier": "VERIFY-ME", "main": "MAIN-AGENT"})
    with FakeAnthropic(script, route=route) as fake:
        main_body = {"system": [{"type": "text", "text": "MAIN-AGENT rules"}], "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": [{"type": "text", "text": "42 rows"}]}]}]}
        assert json.loads(post(fake, main_body)[1])["content"][0]["text"] == "main 1"
        verifier = json.loads(post(fake, {"system": "you VERIFY-ME", "messages": []})[1])
        assert verifier["content"][0]["text"] == "PASS"
        assert json.loads(post(fake, main_body)[1])["content"][0]["text"] == "main 2"
        stray = json.loads(post(fake, {"system": "title generator", "messages": []})[1])
        assert stray["content"][0]["text"] == "Done."
        assert [r.conversation for r in fake.requests] == ["main", "verifier", "main", None]
        assert fake.conversation_requests("main")[0].tool_results() == {"t1": "42 rows"}


def test_http_errors_count_tokens_and_unknown_paths() -> None:
    script = [HttpError(529), reply("ok"), HttpError(500, "api_error", "boom", repeat=True)]
    with FakeAnthropic(script) as fake:
        status, raw = post(fake, {"messages": []})
        assert status == 529
        assert json.loads(raw)["error"]["type"] == "overloaded_error"
        assert post(fake, {"messages": []})[0] == 200
        assert post(fake, {"messages": []})[0] == 500
        assert post(fake, {"messages": []})[0] == 500  # repeat keeps answering the error
        status, raw = post(fake, {"messages": []}, path="/v1/messages/count_tokens?beta=true")
        assert status == 200 and json.loads(raw)["input_tokens"] >= 1
        assert post(fake, {}, path="/v1/other")[0] == 404
        assert fake.totals()["replies"] == 1


def test_hang_never_answers_until_closed() -> None:
    with FakeAnthropic([Hang()]) as fake, pytest.raises((TimeoutError, socket.timeout)):
        post(fake, {"messages": []}, timeout=0.5)
    assert fake.requests[0].answer == "hang"

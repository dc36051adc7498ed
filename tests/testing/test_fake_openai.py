"""The fake OpenAI-compatible chat API, spoken to over real HTTP (mini-swe-agent drives it in
tests/agents/test_mini_swe_agent.py)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from spider2local.testing import (
    FakeOpenAI,
    Hang,
    HttpError,
    Malformed,
    StallAfterStart,
    reply,
    route_by_system,
    tool,
)


def post(fake: FakeOpenAI, body: dict[str, Any], path: str = "/v1/chat/completions",
         timeout: float = 5, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(fake.base_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def chunks(raw: bytes) -> list[Any]:
    """The ``data:`` payloads of an SSE body (``[DONE]`` kept as the string)."""
    found: list[Any] = []
    for event in raw.decode().strip().split("\n\n"):
        data = event.removeprefix("data: ")
        found.append(data if data == "[DONE]" else json.loads(data))
    return found


def assemble(raw: bytes) -> dict[str, Any]:
    """A completion rebuilt from its chunks, as a streaming client does."""
    content, calls, finish, usage = "", {}, None, None
    for chunk in chunks(raw):
        if chunk == "[DONE]":
            break
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                into = calls.setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
                into["id"] = call.get("id") or into["id"]
                into["name"] += call.get("function", {}).get("name", "")
                into["arguments"] += call.get("function", {}).get("arguments", "")
            finish = choice["finish_reason"] or finish
    return {"content": content, "calls": [calls[i] for i in sorted(calls)], "finish": finish,
            "usage": usage}


def test_answers_scripted_turns_as_completions_with_usage_and_records_headers() -> None:
    script = [reply("looking", tool("bash", "call_1", command="ls"), input_tokens=11,
                    output_tokens=7, cache_read_tokens=3),
              reply("finished", input_tokens=5, output_tokens=1)]
    with FakeOpenAI(script) as fake:
        status, raw = post(fake, {"model": "gpt-x", "messages": []},
                           headers={"Authorization": "Bearer k-1"})
        assert status == 200
        first = json.loads(raw)
        assert first["object"] == "chat.completion" and first["model"] == "gpt-x"
        choice = first["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] == "looking"
        assert choice["message"]["tool_calls"] == [{"id": "call_1", "type": "function",
                                                    "function": {"name": "bash", "arguments":
                                                                 '{"command": "ls"}'}}]
        # cached prompt tokens are inside prompt_tokens, as OpenAI counts them
        assert first["usage"] == {"prompt_tokens": 14, "completion_tokens": 7,
                                  "total_tokens": 21,
                                  "prompt_tokens_details": {"cached_tokens": 3}}
        second = json.loads(post(fake, {"messages": []})[1])
        assert second["choices"][0] == {"index": 0, "logprobs": None, "finish_reason": "stop",
                                        "message": {"role": "assistant",
                                                    "content": "finished"}}
        third = json.loads(post(fake, {"messages": []})[1])
        assert third["choices"][0]["message"]["content"] == "Done."  # the fallback
        assert fake.totals()["replies"] == 2 and fake.totals()["input_tokens"] == 16
        assert [r.answer for r in fake.requests] == ["scripted", "scripted", "fallback"]
        assert fake.requests[0].headers["authorization"] == "Bearer k-1"
        assert fake.env() == {"OPENAI_BASE_URL": fake.base_url + "/v1",
                              "OPENAI_API_KEY": "test-key-fake-openai"}


def test_streams_chunks_with_usage_only_when_asked() -> None:
    script = [reply("hi ", tool("bash", command="dbt run"), input_tokens=9, output_tokens=4)] * 2
    with FakeOpenAI(script) as fake:
        status, raw = post(fake, {"model": "gpt-x", "stream": True, "messages": [],
                                  "stream_options": {"include_usage": True}})
        assert status == 200
        parts = chunks(raw)
        assert parts[-1] == "[DONE]" and parts[-2]["choices"] == []
        built = assemble(raw)
        assert built["content"] == "hi " and built["finish"] == "tool_calls"
        assert [c["name"] for c in built["calls"]] == ["bash"]
        assert json.loads(built["calls"][0]["arguments"]) == {"command": "dbt run"}
        assert built["usage"]["prompt_tokens"] == 9 and built["usage"]["completion_tokens"] == 4
        plain = assemble(post(fake, {"stream": True, "messages": []})[1])
        assert plain["usage"] is None and plain["finish"] == "tool_calls"


def test_routes_by_system_message_and_reads_tool_messages_back() -> None:
    script = {"a": [reply("for a")], "b": [reply("for b")]}
    with FakeOpenAI(script, route=route_by_system({"a": "TASK-A", "b": "TASK-B"})) as fake:
        body = {"messages": [{"role": "system", "content": "you do TASK-B"},
                             {"role": "user", "content": "go"},
                             {"role": "assistant", "content": None, "tool_calls": [
                                 {"id": "c1", "type": "function",
                                  "function": {"name": "bash", "arguments": "{}"}}]},
                             {"role": "tool", "tool_call_id": "c1", "content": "42 rows"},
                             {"role": "tool", "tool_call_id": "c2",
                              "content": [{"type": "text", "text": "more"}]}],
                "tools": [{"type": "function", "function": {"name": "bash"}}]}
        answer = json.loads(post(fake, body)[1])
        assert answer["choices"][0]["message"]["content"] == "for b"
        recorded = fake.conversation_requests("b")[0]
        assert recorded.tool_results() == {"c1": "42 rows", "c2": "more"}
        assert recorded.tool_names == ["bash"]


def test_errors_garbage_and_unknown_paths_in_openais_shape() -> None:
    script = [HttpError(429, "rate_limit_error", "slow down"), Malformed(), Malformed(),
              HttpError(500, "server_error", "boom", repeat=True)]
    with FakeOpenAI(script) as fake:
        status, raw = post(fake, {"messages": []})
        assert status == 429
        assert json.loads(raw) == {"error": {"message": "slow down", "type": "rate_limit_error",
                                             "param": None, "code": None}}
        status, raw = post(fake, {"messages": []})
        assert status == 200
        with pytest.raises(ValueError):
            json.loads(raw)
        status, raw = post(fake, {"stream": True, "messages": []})
        assert status == 200 and b"[DONE]" not in raw
        with pytest.raises(ValueError):
            chunks(raw)
        assert post(fake, {"messages": []})[0] == 500
        assert post(fake, {"messages": []})[0] == 500  # repeat keeps answering the error
        assert post(fake, {}, path="/v1/responses")[0] == 404
        assert fake.requests[-1].answer == "other"
        assert fake.totals()["replies"] == 0


@pytest.mark.parametrize("turn, stream", [(Hang(), False), (StallAfterStart(), True),
                                          (StallAfterStart(), False)])
def test_hangs_and_stalls_never_finish_until_closed(turn: Any, stream: bool) -> None:
    with FakeOpenAI([turn]) as fake, pytest.raises((TimeoutError, socket.timeout)):
        post(fake, {"messages": [], "stream": stream}, timeout=0.5)

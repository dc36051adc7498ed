"""The gateway's OpenAI meter: the real gateway between a real HTTP client and the fake
OpenAI-compatible API, as a command agent that declared ``apis = ["openai"]`` gets it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from spider2local.agents.command import _Meters, declared_apis
from spider2local.agents.usage import from_mini_trajectory
from spider2local.gateway.budget import Budget
from spider2local.gateway.openai import OpenAiUsage, tokens_of
from spider2local.gateway.server import ApiCall, open_gateway
from spider2local.testing import FakeOpenAI, HttpError, reply, tool


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


def test_tokens_are_read_from_both_openai_shapes() -> None:
    chat = {"prompt_tokens": 100, "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 40}}
    assert tokens_of(chat) == {"input_tokens": 60, "output_tokens": 7,
                               "cache_read_tokens": 40, "cache_creation_tokens": 0}
    responses = {"input_tokens": 30, "output_tokens": 5,
                 "input_tokens_details": {"cached_tokens": 10}}
    assert tokens_of(responses) == {"input_tokens": 20, "output_tokens": 5,
                                    "cache_read_tokens": 10, "cache_creation_tokens": 0}
    # garbage: never negative, never more cached than prompt, never a crash
    assert tokens_of({"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 99},
                      "completion_tokens": -3})["input_tokens"] == 0  # type: ignore[index]
    assert tokens_of({"prompt_tokens": True, "completion_tokens": "9"}) == dict.fromkeys(
        ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens"), 0)
    assert tokens_of(None) is None and tokens_of([1]) is None


def test_the_responses_api_is_metered_from_its_stream_events() -> None:
    meter = OpenAiUsage()
    call = ApiCall(1, 0, "POST", "/responses", "", json.dumps({"model": "gpt-5"}).encode())
    meter.begin(call)
    meter.event(call, {"type": "response.created", "response": {"status": "in_progress"}})
    meter.event(call, {"type": "response.completed", "response": {
        "status": "completed", "model": "gpt-5-2025", "usage": {"input_tokens": 12,
                                                               "output_tokens": 3}}})
    usage = meter.usage()
    assert (usage.turns, usage.input_tokens, usage.output_tokens) == (1, 12, 3)
    assert usage.by_model == {"gpt-5-2025": {"input_tokens": 12, "output_tokens": 3,
                                             "cache_read_tokens": 0,
                                             "cache_creation_tokens": 0}}
    assert usage.cost_usd is None  # no OpenAI prices: unknown, never guessed
    other = ApiCall(2, 0, "GET", "/models", "", b"")
    meter.begin(other)
    meter.event(other, {"usage": {"prompt_tokens": 999}})
    assert meter.usage().input_tokens == 12  # only model calls are metered


def through_gateway(fake: FakeOpenAI, bodies: list[dict[str, Any]],
                    budgets: list[Budget] | None = None) -> tuple[_Meters, list[httpx.Response]]:
    apis = declared_apis(["openai"], environ=fake.env())
    meters = _Meters(apis)

    async def go() -> list[httpx.Response]:
        async with open_gateway([a.upstream for a in apis], meters, sealed=False,
                                budgets=budgets or []) as served, httpx.AsyncClient() as client:
            env = apis[0].env(served.base_urls[0])
            return [await client.post(env["OPENAI_BASE_URL"] + "/chat/completions", json=body,
                                      headers={"authorization": f"Bearer {env['OPENAI_API_KEY']}"})
                    for body in bodies]

    return meters, run(go)


def test_the_gateway_meters_chat_completions_whole_and_streamed_with_the_runners_key() -> None:
    script = [reply(tool("bash", command="ls"), input_tokens=100, output_tokens=20,
                    cache_read_tokens=50),
              reply("streamed", input_tokens=200, output_tokens=30),
              HttpError(500, "server_error", "boom")]
    with FakeOpenAI(script) as fake:
        meters, answers = through_gateway(fake, [
            {"model": "gpt-fake", "messages": []},
            {"model": "gpt-fake", "messages": [], "stream": True,
             "stream_options": {"include_usage": True}},
            {"model": "gpt-fake", "messages": []}])
        requests = fake.requests
    assert [a.status_code for a in answers] == [200, 200, 500]
    assert "streamed" in answers[1].text and "[DONE]" in answers[1].text
    # the agent held a placeholder; the gateway put the runner's key in its place
    assert {r.headers["authorization"] for r in requests} == {"Bearer test-key-fake-openai"}
    usage = meters.usage()
    assert usage is not None
    assert (usage.turns, usage.input_tokens, usage.output_tokens,
            usage.cache_read_tokens) == (2, 300, 50, 50)
    assert usage.cost_usd is None


def test_a_stream_without_usage_is_spend_the_gateway_cannot_see_so_a_cap_refuses() -> None:
    script = [reply("one", input_tokens=5, output_tokens=1)] * 3
    with FakeOpenAI(script) as fake:
        capped = [Budget(1.0)]
        meters, answers = through_gateway(fake, [{"model": "gpt-fake", "messages": [],
                                                  "stream": True}] * 2, budgets=capped)
    assert [a.status_code for a in answers] == [200, 400]
    assert "cannot be enforced" in answers[1].text
    assert meters.cost() is None


@pytest.mark.parametrize("cached", [0, 25])
def test_the_mini_swe_agent_reader_counts_like_the_meter(cached: int) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 9,
             "prompt_tokens_details": {"cached_tokens": cached}}
    trajectory = {"info": {"model_stats": {"instance_cost": 0.0, "api_calls": 1}},
                  "messages": [{"role": "assistant", "extra": {"response": {
                      "model": "gpt-fake", "usage": usage}}}],
                  "trajectory_format": "mini-swe-agent-1.1"}
    read = from_mini_trajectory(trajectory)
    assert read is not None
    assert (read.input_tokens, read.cache_read_tokens) == (100 - cached, cached)
    meter = OpenAiUsage()
    call = ApiCall(1, 0, "POST", "/chat/completions", "", b'{"model": "gpt-fake"}')
    meter.begin(call)
    meter.event(call, {"model": "gpt-fake", "choices": [{}], "usage": usage})
    assert meter.usage().by_model == read.by_model

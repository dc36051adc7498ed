"""Price table and session usage bookkeeping (the CLI-driven check is in test_claude_agent.py)."""

from __future__ import annotations

import json
import math

import pytest

from spider2local.gateway.anthropic import (
    ApiUsage,
    model_cost,
    price_for,
    total_cost,
)
from spider2local.gateway.server import ApiCall


@pytest.mark.parametrize(("model", "input_price", "output_price"), [
    ("claude-sonnet-4-5", 3, 15),
    ("claude-sonnet-4-5-20250929", 3, 15),
    ("claude-opus-4-5-20251101", 5, 25),
    ("claude-opus-4-1-20250805", 15, 75),
    ("claude-opus-4-20250514", 15, 75),
    ("claude-haiku-4-5", 1, 5),
    ("claude-3-5-haiku-20241022", 0.8, 4),
])
def test_longest_prefix_wins(model: str, input_price: float, output_price: float) -> None:
    price = price_for(model)
    assert price is not None
    assert (price.input, price.output) == (input_price, output_price)
    assert math.isclose(price.cache_read, input_price * 0.1)
    assert math.isclose(price.cache_write, input_price * 1.25)


def test_cost_counts_every_kind_of_token() -> None:
    tokens = {"input_tokens": 1_000_000, "output_tokens": 100_000,
              "cache_read_tokens": 2_000_000, "cache_creation_tokens": 400_000,
              "cache_creation_1h_tokens": 100_000}
    # sonnet: 3 + 1.5 + 0.6 + 300k * 3.75 / 1M + 100k * 6 / 1M
    expected = 3 + 1.5 + 0.6 + 1.125 + 0.6
    cost = model_cost("claude-sonnet-4-5", tokens)
    assert cost is not None and math.isclose(cost, expected)


def test_unknown_model_with_tokens_makes_the_total_unknown() -> None:
    assert price_for("gpt-4o") is None
    assert total_cost({"gpt-4o": {"input_tokens": 10}}) is None
    assert total_cost({"gpt-4o": {"input_tokens": 0}}) == 0.0
    both = total_cost({"claude-haiku-4-5": {"output_tokens": 1_000_000},
                       "claude-sonnet-4-5": {"input_tokens": 1_000_000}})
    assert both is not None and math.isclose(both, 5 + 3)


VERIFIER = "You are the verifier of this dbt project."


def _call(n: int, system: str = "You are the agent.", path: str = "/v1/messages") -> ApiCall:
    body = json.dumps({"model": "claude-sonnet-4-5", "system": [{"type": "text",
                                                                 "text": system}]})
    return ApiCall(n, 0, "POST", path, "beta=true", body.encode())


def _start(message_id: str, **usage: int) -> dict[str, object]:
    return {"type": "message_start",
            "message": {"id": message_id, "model": "claude-sonnet-4-5", "usage": usage}}


def _answer(meter: ApiUsage, call: ApiCall, *blocks: dict[str, object], output: int,
            stop: str = "end_turn", **usage: int) -> None:
    meter.begin(call)
    meter.event(call, _start(f"m{call.id}", output_tokens=1, **usage))
    for i, block in enumerate(blocks):
        meter.event(call, {"type": "content_block_start", "index": i,
                           "content_block": {**block, "text": ""} if block["type"] == "text"
                           else block})
        if block["type"] == "text":
            meter.event(call, {"type": "content_block_delta", "index": i,
                               "delta": {"type": "text_delta", "text": block["text"]}})
    meter.event(call, {"type": "message_delta", "delta": {"stop_reason": stop},
                       "usage": {"output_tokens": output}})
    meter.event(call, {"type": "message_stop"})
    meter.end(call, 200)


def test_api_usage_counts_what_the_server_sent_per_call_and_agent() -> None:
    """Turns are the calls answered, the verifier's apart (told by its system prompt); tokens
    are the final counts (message_delta's output, message_start's input and cache)."""
    reports: list[str] = []
    changes: list[int] = []
    meter = ApiUsage(VERIFIER, on_report=reports.append,
                     on_change=lambda: changes.append(1))
    tool = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}
    _answer(meter, _call(1), tool, output=10, input_tokens=100, cache_read_input_tokens=30,
            stop="tool_use")
    _answer(meter, _call(2, f"CLI preamble\n{VERIFIER}\nmore"), tool, output=3,
            input_tokens=5, stop="tool_use")
    _answer(meter, _call(3, VERIFIER), {"type": "text", "text": "ok\nVERDICT: "},
            {"type": "text", "text": "PASS"}, output=4, input_tokens=6)
    _answer(meter, _call(4), {"type": "text", "text": "VERDICT: PASS"}, output=2,
            input_tokens=7, cache_creation_input_tokens=9)
    usage = meter.usage()
    assert (usage.turns, usage.subagent_turns) == (2, 2)
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
            usage.cache_creation_tokens) == (118, 19, 30, 9)
    assert reports == ["ok\nVERDICT: PASS"], "only the verifier's final text is a report"
    expected = model_cost("claude-sonnet-4-5", {"input_tokens": 118, "output_tokens": 19,
                                                "cache_read_tokens": 30,
                                                "cache_creation_tokens": 9})
    assert usage.cost_usd_computed == expected == meter.cost()
    assert usage.cost_usd_reported is None and changes


def test_api_usage_keeps_a_stalled_call_s_input_and_ignores_other_paths() -> None:
    meter = ApiUsage(VERIFIER)
    stalled = _call(1)
    meter.begin(stalled)
    meter.event(stalled, _start("m1", input_tokens=90, output_tokens=1))
    counting = _call(2, path="/v1/messages/count_tokens")
    meter.begin(counting)
    meter.event(counting, {"input_tokens": 5000})
    meter.end(counting, 200)
    failed = _call(3, VERIFIER)
    meter.begin(failed)
    meter.event(failed, {"type": "error", "error": {"type": "overloaded_error"}})
    meter.end(failed, 529)
    usage = meter.usage()
    assert (usage.turns, usage.subagent_turns, usage.input_tokens) == (0, 0, 90)
    assert meter.reports == []


def test_a_non_streamed_answer_counts_whole() -> None:
    meter = ApiUsage(VERIFIER)
    call = _call(1, VERIFIER)
    meter.begin(call)
    meter.event(call, {"type": "message", "model": "claude-haiku-4-5",
                       "content": [{"type": "text", "text": "VERDICT: FAIL"}],
                       "usage": {"input_tokens": 3, "output_tokens": 2}})
    meter.end(call, 200)
    usage = meter.usage()
    assert usage.subagent_turns == 1 and usage.by_model == {"claude-haiku-4-5": {
        "input_tokens": 3, "output_tokens": 2, "cache_read_tokens": 0,
        "cache_creation_tokens": 0}}
    assert meter.reports == ["VERDICT: FAIL"]

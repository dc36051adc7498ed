"""Price table and session usage bookkeeping (the CLI-driven check is in test_claude_agent.py)."""

from __future__ import annotations

import math

import pytest

from spider2local.agents.claude.pricing import (
    UsageTracker,
    model_cost,
    price_for,
    tokens_from_model_usage,
    total_cost,
)


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


def test_tracker_is_provisional_between_results_and_settles_on_results() -> None:
    tracker = UsageTracker()
    usage = {"input_tokens": 100, "output_tokens": 0, "cache_read_input_tokens": 5,
             "cache_creation_input_tokens": 7}
    # The CLI sends one SDK message per content block of the same API message: counted once.
    tracker.on_assistant("claude-sonnet-4-5", "msg_1", usage, main=True)
    tracker.on_assistant("claude-sonnet-4-5", "msg_1", usage, main=True)
    tracker.on_assistant("claude-sonnet-4-5", "msg_2", {"input_tokens": 50}, main=False)
    tracker.on_assistant("<synthetic>", "err", {"input_tokens": 999}, main=True)
    live = tracker.usage()
    assert (live.turns, live.input_tokens, live.cache_read_tokens) == (1, 150, 5)
    assert live.subagent_turns == 1
    assert live.cost_usd_reported is None
    model_usage = {"claude-sonnet-4-5": {"inputTokens": 4000, "outputTokens": 400,
                                         "cacheReadInputTokens": 5,
                                         "cacheCreationInputTokens": 7, "costUSD": 0.018}}
    tracker.on_result(model_usage, 0.018)
    settled = tracker.usage()
    # Turns are the API calls answered (the CLI's num_turns counts content blocks).
    assert (settled.turns, settled.input_tokens, settled.output_tokens) == (1, 4000, 400)
    assert settled.cost_usd_reported == 0.018
    expected = model_cost("claude-sonnet-4-5",
                          tokens_from_model_usage(model_usage["claude-sonnet-4-5"]))
    assert settled.cost_usd_computed == expected
    # A second query in the same session: model usage is cumulative, turns add up.
    tracker.on_assistant("claude-sonnet-4-5", "msg_3", {"input_tokens": 11}, main=True)
    assert tracker.usage().input_tokens == 4011
    model_usage["claude-sonnet-4-5"]["inputTokens"] = 4011
    tracker.on_result(model_usage, 0.019)
    final = tracker.usage()
    assert (final.turns, final.input_tokens, final.cost_usd_reported) == (2, 4011, 0.019)
    assert final.by_model["claude-sonnet-4-5"]["input_tokens"] == 4011


def _start(message_id: str, **usage: int) -> dict[str, object]:
    return {"type": "message_start",
            "message": {"id": message_id, "model": "claude-sonnet-4-5", "usage": usage}}


def test_stream_events_keep_final_output_tokens_and_a_stalled_call_s_input() -> None:
    """Cut at a deadline (no result message): a completed message counts the output tokens of
    its final ``message_delta``, not the partial count its assistant message carried; a call
    that stalled after ``message_start`` keeps its input tokens and is not a turn."""
    tracker = UsageTracker()
    tracker.on_stream_event(_start("m1", input_tokens=100, output_tokens=1,
                                   cache_read_input_tokens=30), None)
    tracker.on_assistant("claude-sonnet-4-5", "m1", {"input_tokens": 100, "output_tokens": 1},
                         main=True)
    tracker.on_stream_event({"type": "message_delta", "usage": {"output_tokens": 10}}, None)
    tracker.on_stream_event(_start("m2", input_tokens=120, output_tokens=1), None)
    usage = tracker.usage()
    assert (usage.turns, usage.input_tokens, usage.output_tokens,
            usage.cache_read_tokens) == (1, 220, 11, 30)
    # A delta of another agent's stream never lands on the main agent's message.
    tracker.on_stream_event({"type": "message_delta", "usage": {"output_tokens": 99}}, "toolu_x")
    assert tracker.usage().output_tokens == 11

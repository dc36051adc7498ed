"""Token prices per model and the usage bookkeeping of a Claude session.

Why our own cost: the CLI's ``total_cost_usd`` has been seen pricing a run at the wrong model
and missing cache tokens and subagents (measured). We keep it as *reported* and compute our own
from the per-model token counts with this table (public list prices, USD per million tokens;
long-context surcharges are not modelled). An unknown model makes the computed cost ``None``,
never a guess.

Facts measured with CLI 2.1.x (tests/agents/claude/test_session.py checks them against a fake
API): a session's ``ResultMessage.model_usage`` is cumulative over the whole session, subagents
included; ``num_turns`` counts the main agent's API turns of that one query; assistant messages
carry their input and cache tokens as they stream, but not yet their output tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spider2local.run.results import Usage


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_write: float
    """5-minute cache writes (1.25 x input); 1-hour writes cost 2 x input."""
    cache_read: float


def _family(input: float, output: float) -> Price:
    return Price(input, output, round(input * 1.25, 4), round(input * 0.1, 4))


PRICES: Mapping[str, Price] = {
    "claude-opus-4-7": _family(5, 25),
    "claude-opus-4-6": _family(5, 25),
    "claude-opus-4-5": _family(5, 25),
    "claude-opus-4-1": _family(15, 75),
    "claude-opus-4": _family(15, 75),
    "claude-sonnet-4": _family(3, 15),
    "claude-3-7-sonnet": _family(3, 15),
    "claude-3-5-sonnet": _family(3, 15),
    "claude-haiku-4": _family(1, 5),
    "claude-3-5-haiku": _family(0.8, 4),
    "claude-3-opus": _family(15, 75),
    "claude-3-haiku": _family(0.25, 1.25),
}
"""Keyed by model-id prefix; the longest matching prefix wins (``claude-opus-4-5-20251101``
is priced as ``claude-opus-4-5``, ``claude-opus-4-20250514`` as ``claude-opus-4``)."""

TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_creation_tokens")


def price_for(model: str) -> Price | None:
    name = model.lower().removeprefix("anthropic/").split("[")[0]
    matches = [prefix for prefix in PRICES if name.startswith(prefix)]
    return PRICES[max(matches, key=len)] if matches else None


def model_cost(model: str, tokens: Mapping[str, int]) -> float | None:
    """Cost of one model's tokens (keys as in :data:`TOKEN_KEYS`, plus optional
    ``cache_creation_1h_tokens``, a part of ``cache_creation_tokens``)."""
    price = price_for(model)
    if price is None:
        return None
    long_writes = tokens.get("cache_creation_1h_tokens", 0)
    short_writes = tokens.get("cache_creation_tokens", 0) - long_writes
    micro = (tokens.get("input_tokens", 0) * price.input
             + tokens.get("output_tokens", 0) * price.output
             + tokens.get("cache_read_tokens", 0) * price.cache_read
             + short_writes * price.cache_write + long_writes * price.input * 2)
    return micro / 1_000_000


def total_cost(by_model: Mapping[str, Mapping[str, int]]) -> float | None:
    """Sum over models; None if any model with tokens is missing from the price table."""
    total = 0.0
    for model, tokens in by_model.items():
        cost = model_cost(model, tokens)
        if cost is None:
            if any(tokens.get(k, 0) for k in TOKEN_KEYS):
                return None
            continue
        total += cost
    return total


def tokens_from_model_usage(entry: Mapping[str, Any]) -> dict[str, int]:
    """The CLI's camelCase ``ModelUsage`` entry in our snake_case keys."""
    return {"input_tokens": int(entry.get("inputTokens", 0) or 0),
            "output_tokens": int(entry.get("outputTokens", 0) or 0),
            "cache_read_tokens": int(entry.get("cacheReadInputTokens", 0) or 0),
            "cache_creation_tokens": int(entry.get("cacheCreationInputTokens", 0) or 0),
            "cache_creation_1h_tokens":
                int(entry.get("cacheCreationEphemeral1hInputTokens", 0) or 0)}


class UsageTracker:
    """Folds the session's messages into a :class:`Usage` that is right at every moment.

    Settled numbers come from result messages (authoritative, cumulative per session); between
    two results, streamed assistant messages add a provisional count (turns, input and cache
    tokens; each API message once, though the CLI sends one SDK message per content block).
    """

    def __init__(self) -> None:
        self._settled: dict[str, dict[str, int]] = {}
        self._settled_turns = 0
        self._live: dict[str, dict[str, int]] = {}
        self._live_turns = 0
        self._seen: set[str] = set()
        self._reported: float | None = None

    def on_assistant(self, model: str, message_id: str | None, usage: Mapping[str, Any] | None,
                     *, main: bool) -> None:
        if message_id is None or message_id in self._seen or model.startswith("<"):
            return
        self._seen.add(message_id)
        self._live_turns += int(main)
        live = self._live.setdefault(model, dict.fromkeys(TOKEN_KEYS, 0))
        usage = usage or {}
        live["input_tokens"] += int(usage.get("input_tokens", 0) or 0)
        live["output_tokens"] += int(usage.get("output_tokens", 0) or 0)
        live["cache_read_tokens"] += int(usage.get("cache_read_input_tokens", 0) or 0)
        live["cache_creation_tokens"] += int(usage.get("cache_creation_input_tokens", 0) or 0)

    def on_result(self, num_turns: int, model_usage: Mapping[str, Any] | None,
                  total_cost_usd: float | None) -> None:
        self._settled_turns += num_turns
        if model_usage:
            self._settled = {model: tokens_from_model_usage(entry)
                             for model, entry in model_usage.items()}
        if total_cost_usd is not None:
            self._reported = total_cost_usd
        self._live, self._live_turns = {}, 0

    def usage(self) -> Usage:
        by_model: dict[str, dict[str, int]] = {m: dict(t) for m, t in self._settled.items()}
        for model, tokens in self._live.items():
            merged = by_model.setdefault(model, dict.fromkeys(TOKEN_KEYS, 0))
            for key in TOKEN_KEYS:
                merged[key] = merged.get(key, 0) + tokens[key]
        return Usage(
            turns=self._settled_turns + self._live_turns,
            input_tokens=sum(t["input_tokens"] for t in by_model.values()),
            output_tokens=sum(t["output_tokens"] for t in by_model.values()),
            cache_read_tokens=sum(t["cache_read_tokens"] for t in by_model.values()),
            cache_creation_tokens=sum(t["cache_creation_tokens"] for t in by_model.values()),
            cost_usd_reported=self._reported, cost_usd_computed=total_cost(by_model),
            by_model=by_model)

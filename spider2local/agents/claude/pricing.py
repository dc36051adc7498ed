"""Token prices per model and the usage bookkeeping of a Claude session.

Why our own cost: the CLI's ``total_cost_usd`` has been seen pricing a run at the wrong model
and missing cache tokens and subagents (measured). We keep it as *reported* and compute our own
from the per-model token counts with this table (public list prices, USD per million tokens;
long-context surcharges are not modelled). An unknown model makes the computed cost ``None``,
never a guess.

Facts measured with CLI 2.1.x (tests/agents/claude/test_session.py checks them against a fake
API): a session's ``ResultMessage.model_usage`` is cumulative over the whole session, subagents
included; ``num_turns`` counts the main agent's API turns of that one query; assistant messages
carry their input and cache tokens as they stream, but not yet their output tokens; the CLI
streams raw API events of the main agent only (not of subagents).
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
    """Folds the session's messages into a :class:`Usage` that is right at every moment; the one
    owner of a Claude session's turns, tokens and cost.

    Turns are API calls that got an answer: one per assistant message id (the CLI sends one SDK
    message per content block, so a reply with three parallel tool calls is still one turn; the
    CLI's ``num_turns`` counts blocks and is not used). The main agent's and the subagents'
    (the verifier's) calls are counted apart. A failed call (an HTTP error, the CLI's synthetic
    "API Error" message) and a call cut before any content are not turns.

    Tokens: settled numbers come from result messages (``model_usage``, authoritative and
    cumulative per session, subagents included); messages not yet covered by a result add a live
    count. For the main agent the live count follows the raw stream events (the SDK's
    ``include_partial_messages``): ``message_start`` brings the input and cache tokens (so a
    stalled call keeps them), ``message_delta`` the final output tokens (an assistant message
    carries only the first, partial output count). Subagent calls are not streamed to the SDK
    (measured): their live count comes from their assistant messages.
    """

    def __init__(self) -> None:
        self._settled: dict[str, dict[str, int]] = {}
        self._messages: dict[str, tuple[str, dict[str, int]]] = {}
        """message id -> (model, tokens) of every API message seen, in arrival order."""
        self._covered: set[str] = set()
        """Message ids whose tokens the last result's ``model_usage`` already holds."""
        self._answered: dict[str, bool] = {}
        """message id -> main agent? for the calls that produced an assistant message."""
        self._last_of: dict[str, str] = {}
        """subagent's parent_tool_use_id -> id of its last assistant message."""
        self._asked_tools: set[str] = set()
        """Message ids that asked for a tool (the agent goes on after them)."""
        self._unseen_finals = 0
        """Subagents' final answers the CLI did not pass on as messages (see on_subagent_done)."""
        self._streaming: dict[str | None, str] = {}
        """parent_tool_use_id -> id of the message being streamed for that agent."""
        self._reported: float | None = None

    def _tokens(self, message_id: str, model: str) -> dict[str, int]:
        if message_id not in self._messages:
            self._messages[message_id] = (model, dict.fromkeys(TOKEN_KEYS, 0))
        return self._messages[message_id][1]

    @staticmethod
    def _merge(tokens: dict[str, int], usage: Mapping[str, Any]) -> None:
        """Raise each count to what ``usage`` reports (the API's counts are cumulative per
        message, so the larger one is the later one)."""
        for key, wire in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                          ("cache_read_tokens", "cache_read_input_tokens"),
                          ("cache_creation_tokens", "cache_creation_input_tokens")):
            value = usage.get(wire)
            if isinstance(value, int) and value > tokens[key]:
                tokens[key] = value

    def on_stream_event(self, event: Mapping[str, Any], parent_tool_use_id: str | None) -> None:
        """A raw API stream event (``StreamEvent.event``)."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            message_id = message.get("id")
            if not isinstance(message_id, str):
                return
            self._streaming[parent_tool_use_id] = message_id
            tokens = self._tokens(message_id, str(message.get("model") or "unknown"))
            self._merge(tokens, message.get("usage") or {})
        elif kind == "message_delta":
            message_id = self._streaming.get(parent_tool_use_id)
            if message_id is not None and message_id in self._messages:
                self._merge(self._messages[message_id][1], event.get("usage") or {})

    def on_assistant(self, model: str, message_id: str | None, usage: Mapping[str, Any] | None,
                     *, main: bool, parent: str | None = None, tool_use: bool = False) -> None:
        """An assistant message (one per content block; ``tool_use``: this block asks for a
        tool; ``parent``: the subagent's tool_use id). ``<synthetic>`` messages are the CLI's
        own (an API error shown as text): no API call answered them."""
        if message_id is None or model.startswith("<"):
            return
        self._answered.setdefault(message_id, main)
        if tool_use:
            self._asked_tools.add(message_id)
        if parent is not None:
            self._last_of[parent] = message_id
        self._merge(self._tokens(message_id, model), usage or {})

    def on_subagent_done(self, parent: str) -> None:
        """A subagent finished well. A subagent run in the foreground ends with an API call
        whose text is its report; the CLI returns that as the tool result and never passes it
        on as an assistant message (measured). If the last message seen of that subagent asked
        for a tool (or none was seen), that final call was made and is counted here."""
        last = self._last_of.pop(parent, None)
        if last is None or last in self._asked_tools:
            self._unseen_finals += 1

    def on_result(self, model_usage: Mapping[str, Any] | None,
                  total_cost_usd: float | None) -> None:
        if model_usage:
            self._settled = {model: tokens_from_model_usage(entry)
                             for model, entry in model_usage.items()}
            self._covered = set(self._messages)
        if total_cost_usd is not None:
            self._reported = total_cost_usd

    def usage(self) -> Usage:
        by_model: dict[str, dict[str, int]] = {m: dict(t) for m, t in self._settled.items()}
        for message_id, (model, tokens) in self._messages.items():
            if message_id in self._covered:
                continue
            merged = by_model.setdefault(model, dict.fromkeys(TOKEN_KEYS, 0))
            for key in TOKEN_KEYS:
                merged[key] = merged.get(key, 0) + tokens[key]
        main_turns = sum(self._answered.values())
        return Usage(
            turns=main_turns,
            subagent_turns=len(self._answered) - main_turns + self._unseen_finals,
            input_tokens=sum(t["input_tokens"] for t in by_model.values()),
            output_tokens=sum(t["output_tokens"] for t in by_model.values()),
            cache_read_tokens=sum(t["cache_read_tokens"] for t in by_model.values()),
            cache_creation_tokens=sum(t["cache_creation_tokens"] for t in by_model.values()),
            cost_usd_reported=self._reported, cost_usd_computed=total_cost(by_model),
            by_model=by_model)

"""The Anthropic Messages API at the gateway: where it is and how it is reached
(:func:`claude_upstream`), token prices per model, and the gateway's meter for it.

Any agent that speaks this API (the Claude session, a command agent declaring ``anthropic``)
is served and metered the same way, so all of it lives here, below the agents.

Why our own cost: the CLI's ``total_cost_usd`` has been seen pricing a run at the wrong model
and missing cache tokens and subagents (measured), and the agent's code can forge it (it comes
through the CLI's stdout). Our cost is computed from the per-model token counts the model's
server sent through the gateway (:class:`ApiUsage`), with this table (public list prices,
USD per million tokens; long-context surcharges are not modelled). An unknown model makes the
computed cost ``None``, never a guess. The CLI's own figures stay in the transcript only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spider2local.core.results import Usage
from spider2local.gateway.server import ApiCall, Upstream

CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN")
DEFAULT_API = "https://api.anthropic.com"
PLACEHOLDER = "spider2local-gateway-adds-the-credential"
"""What the CLI's credential variables hold: the CLI needs one set to start, the gateway
drops the header it makes of it and adds the real one. Measured with CLI 2.1.x against a
recording server: with ``ANTHROPIC_API_KEY`` or ``CLAUDE_CODE_OAUTH_TOKEN`` set to this and a
base URL with a path (``http://127.0.0.1:PORT/u0``), its only request was ``POST
/u0/v1/messages?beta=true`` carrying the placeholder as is (``x-api-key``, or
``Authorization: Bearer`` plus its ``oauth-2025-04-20`` beta), and the session worked."""
TOKEN_VARS = ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
"""Credentials sent as ``Authorization: Bearer``."""


def claude_upstream(environ: Mapping[str, str] | None = None) -> Upstream:
    """The API the Claude CLI may reach and what the gateway adds to each request: the user's
    ``ANTHROPIC_BASE_URL`` (or Anthropic's API), their credential and custom headers."""
    environ = os.environ if environ is None else environ
    headers: dict[str, str] = {}
    for line in environ.get("ANTHROPIC_CUSTOM_HEADERS", "").splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers[name.strip().lower()] = value.strip()
    if environ.get("ANTHROPIC_API_KEY"):
        headers["x-api-key"] = environ["ANTHROPIC_API_KEY"]
    token = next((environ[v] for v in TOKEN_VARS if environ.get(v)), None)
    if token:
        headers["authorization"] = f"Bearer {token}"
    return Upstream(base_url=environ.get("ANTHROPIC_BASE_URL") or DEFAULT_API,
                    headers=headers, drop=("x-api-key", "authorization"), paths=("/v1/",))


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


@dataclass
class _Call:
    """One Messages API call as the gateway saw it answered."""

    agent: str
    """``main`` or ``verifier`` (decided from the request's system prompt)."""
    model: str
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    answered: bool = False
    """Content or a final delta arrived: an API call that got an answer (a turn)."""
    text: list[str] = field(default_factory=list)
    tool_use: bool = False
    complete: bool = False


def _system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system", "")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))
    return ""


def _merge(tokens: dict[str, int], usage: Any) -> None:
    """Raise each count to what ``usage`` reports (the API's counts are cumulative per
    message: ``message_delta`` repeats or raises ``message_start``'s)."""
    if not isinstance(usage, Mapping):
        return
    for key, wire in (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
                      ("cache_read_tokens", "cache_read_input_tokens"),
                      ("cache_creation_tokens", "cache_creation_input_tokens")):
        value = usage.get(wire)
        if isinstance(value, int) and not isinstance(value, bool) and value > tokens[key]:
            tokens[key] = value
    created = usage.get("cache_creation")
    if isinstance(created, Mapping):
        long_writes = created.get("ephemeral_1h_input_tokens")
        if isinstance(long_writes, int) and long_writes > tokens.get("cache_creation_1h_tokens",
                                                                     0):
            tokens["cache_creation_1h_tokens"] = long_writes


class ApiUsage:
    """The gateway's meter for the Messages API (:class:`spider2local.gateway.Meter`): the one
    owner of a Claude session's turns, tokens, cost and verifier reports.

    Everything is read from the model server's own responses as they pass through the gateway:
    ``message_start`` brings the model and the input and cache tokens (so a stalled call keeps
    them), ``message_delta`` the final output tokens, content blocks the text. Never from the
    CLI's stream: the agent's code runs with the CLI's user id and can write lines into the
    CLI's stdout (a forged PASS and 1 input token were measured before this existed).

    A call is the verifier's when its system prompt holds the verifier's prompt (the CLI sends
    a subagent's prompt as its system prompt); every other Messages call is the main agent's.
    A turn is a call that got an answer (content or a final delta); a call that failed, or was
    cut before any content, is not one but keeps the tokens it was charged. A verifier call
    that ended complete without asking for a tool is a verifier report: its text goes to
    ``on_report``.
    """

    def __init__(self, verifier_prompt: str | None = None, *,
                 on_change: Callable[[], None] | None = None,
                 on_report: Callable[[str], None] | None = None) -> None:
        self.verifier_prompt = (verifier_prompt or "").strip()
        self.on_change = on_change
        self.on_report = on_report
        self._calls: dict[int, _Call] = {}
        self.reports: list[str] = []

    def begin(self, call: ApiCall) -> None:
        body = call.json()
        if call.method != "POST" or not call.path.endswith("/messages") \
                or not isinstance(body, Mapping):
            return
        verifier = bool(self.verifier_prompt) and self.verifier_prompt in _system_text(body)
        self._calls[call.id] = _Call("verifier" if verifier else "main",
                                     str(body.get("model") or "unknown"))

    def event(self, call: ApiCall, data: Mapping[str, Any]) -> None:
        found = self._calls.get(call.id)
        if found is None:
            return
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), Mapping):
            message = data["message"]
            found.model = str(message.get("model") or found.model)
            _merge(found.tokens, message.get("usage"))
        elif kind == "content_block_start" and isinstance(data.get("content_block"), Mapping):
            found.answered = True
            block = data["content_block"]
            found.tool_use = found.tool_use or block.get("type") in ("tool_use",
                                                                      "server_tool_use")
            if block.get("type") == "text":
                found.text.append(str(block.get("text") or ""))
        elif kind == "content_block_delta" and isinstance(data.get("delta"), Mapping):
            delta = data["delta"]
            if delta.get("type") == "text_delta":
                found.text.append(str(delta.get("text") or ""))
        elif kind == "message_delta":
            found.answered = True
            _merge(found.tokens, data.get("usage"))
        elif kind == "message_stop":
            found.complete = True
        elif kind == "message":  # a non-streamed answer, whole
            found.model = str(data.get("model") or found.model)
            _merge(found.tokens, data.get("usage"))
            content = data.get("content")
            blocks = [b for b in content if isinstance(b, Mapping)] \
                if isinstance(content, list) else []
            found.answered = found.complete = True
            found.tool_use = any(b.get("type") in ("tool_use", "server_tool_use")
                                 for b in blocks)
            found.text += [str(b.get("text") or "") for b in blocks if b.get("type") == "text"]
        else:
            return
        if self.on_change is not None:
            self.on_change()

    def end(self, call: ApiCall, status: int) -> None:
        found = self._calls.get(call.id)
        if found is None or status != 200:
            return
        if found.agent == "verifier" and found.complete and not found.tool_use:
            report = "".join(found.text)
            self.reports.append(report)
            if self.on_report is not None:
                self.on_report(report)

    def by_model(self) -> dict[str, dict[str, int]]:
        merged: dict[str, dict[str, int]] = {}
        for found in self._calls.values():
            into = merged.setdefault(found.model, dict.fromkeys(TOKEN_KEYS, 0))
            for key, value in found.tokens.items():
                into[key] = into.get(key, 0) + value
        return merged

    def cost(self) -> float | None:
        return total_cost(self.by_model())

    def usage(self) -> Usage:
        by_model = self.by_model()
        answered = [c for c in self._calls.values() if c.answered]
        main_turns = sum(c.agent == "main" for c in answered)
        return Usage(
            turns=main_turns, subagent_turns=len(answered) - main_turns,
            input_tokens=sum(t["input_tokens"] for t in by_model.values()),
            output_tokens=sum(t["output_tokens"] for t in by_model.values()),
            cache_read_tokens=sum(t["cache_read_tokens"] for t in by_model.values()),
            cache_creation_tokens=sum(t["cache_creation_tokens"] for t in by_model.values()),
            cost_usd_reported=None, cost_usd_computed=total_cost(by_model),
            by_model={m: {k: v for k, v in t.items() if k in TOKEN_KEYS}
                      for m, t in by_model.items()})

"""The gateway's meter for OpenAI-compatible APIs: tokens per model, read from the server's own
answers as they pass through the gateway, never from what the agent's process prints.

Two shapes are read, each from a whole JSON answer or from an SSE stream:

- chat completions (``/chat/completions``; litellm, the openai SDK, most OpenAI-compatible
  servers): ``usage.prompt_tokens`` / ``completion_tokens``, with the cached part of the prompt
  in ``prompt_tokens_details.cached_tokens``; a stream carries usage in its last chunk only
  when the client asked for it (``stream_options.include_usage``);
- responses (``/responses``; the Codex CLI): ``usage.input_tokens`` / ``output_tokens`` with
  ``input_tokens_details.cached_tokens``, in the answer or its ``response.completed`` event.

Counts are kept as the Claude meter keeps them (:data:`~.claude.pricing.TOKEN_KEYS`): input
tokens exclude cache reads, which are counted apart. A model the price table does not know
gives no cost (``None``: unknown stays unknown, and a budget with a cap then refuses further
calls rather than let spend go unseen).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spider2local.core.results import Usage
from spider2local.gateway.anthropic import TOKEN_KEYS, total_cost
from spider2local.gateway.server import ApiCall

METERED_PATHS = ("/chat/completions", "/responses", "/completions")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tokens_of(usage: Any) -> dict[str, int] | None:
    """One answer's ``usage`` (chat completions' or responses' names) in our keys; None when
    it is not a usage object."""
    if not isinstance(usage, Mapping):
        return None
    chat = "prompt_tokens" in usage or "completion_tokens" in usage
    prompt = _int(usage.get("prompt_tokens" if chat else "input_tokens"))
    details = usage.get("prompt_tokens_details" if chat else "input_tokens_details")
    cached = min(prompt, _int(details.get("cached_tokens"))) \
        if isinstance(details, Mapping) else 0
    return {"input_tokens": prompt - cached,
            "output_tokens": _int(usage.get("completion_tokens" if chat else "output_tokens")),
            "cache_read_tokens": cached, "cache_creation_tokens": 0}


@dataclass
class _Call:
    model: str
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    answered: bool = False
    """Choices (or a completed response) arrived: a turn."""
    metered: bool = False
    """The server said what it used (a stream without ``include_usage`` does not)."""


class OpenAiUsage:
    """A :class:`spider2local.gateway.server.Meter` for one OpenAI-compatible upstream."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}

    def begin(self, call: ApiCall) -> None:
        body = call.json()
        if call.method != "POST" or not call.path.endswith(METERED_PATHS) \
                or not isinstance(body, Mapping):
            return
        self._calls[call.id] = _Call(str(body.get("model") or "unknown"))

    def event(self, call: ApiCall, data: Mapping[str, Any]) -> None:
        found = self._calls.get(call.id)
        if found is None:
            return
        response = data.get("response")
        if isinstance(response, Mapping) and str(data.get("type", "")).startswith("response."):
            data = response  # a Responses stream's event: the response as it stands
            if data.get("status") == "completed":
                found.answered = True
        elif data.get("object") == "response" and data.get("status") == "completed":
            found.answered = True
        if data.get("model"):
            found.model = str(data["model"])
        choices = data.get("choices")
        if isinstance(choices, list) and choices:
            found.answered = True
        tokens = tokens_of(data.get("usage"))
        if tokens is not None:  # each usage object is the call's total so far
            found.metered = True
            for key, value in tokens.items():
                found.tokens[key] = max(found.tokens[key], value)

    def end(self, call: ApiCall, status: int) -> None:
        pass

    def by_model(self) -> dict[str, dict[str, int]]:
        merged: dict[str, dict[str, int]] = {}
        for found in self._calls.values():
            into = merged.setdefault(found.model, dict.fromkeys(TOKEN_KEYS, 0))
            for key, value in found.tokens.items():
                into[key] += value
        return merged

    def cost(self) -> float | None:
        """None also when an answered call's usage was never sent: its spend is unknown."""
        if any(c.answered and not c.metered for c in self._calls.values()):
            return None
        return total_cost(self.by_model())

    def usage(self) -> Usage:
        by_model = self.by_model()
        return Usage(
            turns=sum(c.answered for c in self._calls.values()),
            input_tokens=sum(t["input_tokens"] for t in by_model.values()),
            output_tokens=sum(t["output_tokens"] for t in by_model.values()),
            cache_read_tokens=sum(t["cache_read_tokens"] for t in by_model.values()),
            cost_usd_computed=self.cost(), by_model=by_model)

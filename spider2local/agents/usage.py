"""What a command agent spent, read from what it leaves: the usage file, or a known agent's own
output (``claude -p --output-format json``, mini-swe-agent's trajectory).

The usage file (``$SPIDER2_USAGE_FILE``, JSON, written by the agent whenever it likes; the last
version counts)::

    {"turns": 12,
     "cost_usd": 0.41,
     "models": {"claude-sonnet-4-5": {"input_tokens": 1200, "output_tokens": 300,
                                      "cache_read_tokens": 0, "cache_creation_tokens": 0}}}

Every key is optional. Unknown stays unknown: a cost nobody reported and no price table knows is
``None`` (shown as unknown), never guessed; a file that is not this shape is ignored with a note
in the transcript, never an error of the task. Tokens of models the Claude price table knows get
a computed cost beside the reported one, as for the Claude agent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spider2local.core.results import Usage
from spider2local.gateway.anthropic import TOKEN_KEYS, total_cost
from spider2local.gateway.openai import tokens_of

MAX_USAGE_BYTES = 4 * 1024 * 1024
"""A usage file or trajectory larger than this is not read (an agent must not stall the runner
with a huge file)."""
READERS = ("file", "claude-json", "mini-swe-agent")

def tokens_from_model_usage(entry: Mapping[str, Any]) -> dict[str, int]:
    """The Claude CLI's camelCase ``modelUsage`` entry (``claude -p --output-format json``) in
    our snake_case keys."""
    return {"input_tokens": int(entry.get("inputTokens", 0) or 0),
            "output_tokens": int(entry.get("outputTokens", 0) or 0),
            "cache_read_tokens": int(entry.get("cacheReadInputTokens", 0) or 0),
            "cache_creation_tokens": int(entry.get("cacheCreationInputTokens", 0) or 0),
            "cache_creation_1h_tokens":
                int(entry.get("cacheCreationEphemeral1hInputTokens", 0) or 0)}


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def _cost(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _usage(by_model: Mapping[str, Mapping[str, int]], turns: int,
           reported: float | None) -> Usage:
    return Usage(turns=turns,
                 input_tokens=sum(t.get("input_tokens", 0) for t in by_model.values()),
                 output_tokens=sum(t.get("output_tokens", 0) for t in by_model.values()),
                 cache_read_tokens=sum(t.get("cache_read_tokens", 0) for t in by_model.values()),
                 cache_creation_tokens=sum(t.get("cache_creation_tokens", 0)
                                           for t in by_model.values()),
                 cost_usd_reported=reported,
                 cost_usd_computed=total_cost(by_model) if by_model else None,
                 by_model={m: dict(t) for m, t in by_model.items()})


def _load(path: Path | None) -> Any:
    """The JSON in ``path``; None when absent, too big or not JSON."""
    try:
        if path is None or not path.is_file() or path.stat().st_size > MAX_USAGE_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None


def from_usage_file(data: Any) -> Usage | None:
    """The documented usage file's content as :class:`Usage` (None: not that shape)."""
    if not isinstance(data, dict):
        return None
    models = data.get("models")
    models = {} if models is None else models
    if not isinstance(models, dict):
        return None
    by_model = {str(name): {k: _count(tokens.get(k)) for k in TOKEN_KEYS}
                for name, tokens in models.items() if isinstance(tokens, dict)}
    return _usage(by_model, _count(data.get("turns")), _cost(data.get("cost_usd")))


def from_claude_json(stdout: str) -> Usage | None:
    """``claude -p --output-format json``: one result object (the last JSON line that is one)
    with ``modelUsage``, ``total_cost_usd`` and ``num_turns``."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("type") == "result":
            models = data.get("modelUsage") or {}
            by_model = {str(m): {k: v for k, v in tokens_from_model_usage(e).items()
                                 if k in TOKEN_KEYS}
                        for m, e in models.items() if isinstance(e, dict)} \
                if isinstance(models, dict) else {}
            return _usage(by_model, _count(data.get("num_turns")),
                          _cost(data.get("total_cost_usd")))
    return None


def _table(data: Any, key: str) -> dict[str, Any]:
    found = data.get(key) if isinstance(data, dict) else None
    return found if isinstance(found, dict) else {}


def from_mini_trajectory(data: Any, model: str | None = None) -> Usage | None:
    """mini-swe-agent's trajectory (``-o FILE``, ``trajectory_format`` ``mini-swe-agent-1.1``
    as mini-swe-agent 2.x writes it): ``info.model_stats`` holds its cost and API calls; each
    model message's ``extra.response`` is litellm's whole response (OpenAI's shape), whose
    ``usage`` has the tokens (cached prompt tokens counted apart, as the gateway's meter
    counts them)."""
    if not isinstance(data, dict):
        return None
    info = _table(data, "info")
    stats = _table(info, "model_stats")
    tokens = dict.fromkeys(TOKEN_KEYS, 0)
    name = model
    for message in data.get("messages") or []:
        response = _table(_table(message, "extra"), "response")
        found = tokens_of(_table(response, "usage") or None)
        if found:
            for key, value in found.items():
                tokens[key] += value
            name = name or (str(response["model"]) if response.get("model") else None)
    model_cfg = _table(_table(info, "config"), "model")
    name = name or (str(model_cfg["model_name"]) if model_cfg.get("model_name") else None)
    by_model = {name or "unknown": tokens} if any(tokens.values()) else {}
    cost = _cost(stats.get("instance_cost"))
    return _usage(by_model, _count(stats.get("api_calls")), cost if cost else None)


def read_usage(reader: str | None, *, usage_file: Path | None, stdout: str,
               trajectory: Path | None = None) -> tuple[Usage | None, str | None]:
    """``(usage, source)`` by ``reader`` (None: the usage file); the usage file, when the
    agent wrote one, wins over a built-in reader: the agent knows best what it spent."""
    written = from_usage_file(_load(usage_file))
    if written is not None:
        return written, "usage-file"
    if reader == "claude-json":
        found = from_claude_json(stdout)
        return found, "claude-json" if found is not None else None
    if reader == "mini-swe-agent" and trajectory is not None:
        found = from_mini_trajectory(_load(trajectory))
        return found, "mini-swe-agent" if found is not None else None
    return None, None

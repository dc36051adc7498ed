"""Test helpers shipped with the package, so users can drive agents offline too.

:mod:`spider2local.testing.fake_api` is a loopback stand-in for the Anthropic Messages API: the
real Claude CLI talks to it exactly as it would to the real service, so the whole agent stack
(SDK, CLI, tools, subagents, our own accounting) is exercised without network or credentials.
:mod:`spider2local.testing.fake_openai` is its OpenAI-compatible sibling (chat completions),
for agents of other vendors; both speak the same script (:mod:`spider2local.testing.script`).
"""

from spider2local.testing.fake_api import (
    FakeAnthropic,
    Hang,
    HttpError,
    Malformed,
    RecordedRequest,
    Reply,
    StallAfterStart,
    ToolCall,
    reply,
    route_by_system,
    tool,
)
from spider2local.testing.fake_openai import FakeOpenAI

__all__ = [
    "FakeAnthropic",
    "FakeOpenAI",
    "Hang",
    "HttpError",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "StallAfterStart",
    "ToolCall",
    "reply",
    "route_by_system",
    "tool",
]

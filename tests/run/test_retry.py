"""Retry policy: what is retried, and the backoff between attempts."""

from __future__ import annotations

from spider2local.agents.contract import AgentOutcome
from spider2local.core.results import Usage
from spider2local.run.retry import (
    MAX_BACKOFF,
    backoff,
    nothing_done,
    should_retry,
    turns_completed,
)

INFRA = AgentOutcome(error="HTTP 529", infrastructure=True)


def test_only_infrastructure_errors_before_any_turn_are_retried() -> None:
    assert should_retry(INFRA, False, attempts=1, retries=2)
    assert should_retry(INFRA, False, attempts=2, retries=2)
    assert not should_retry(INFRA, False, attempts=3, retries=2)  # retries used up
    assert not should_retry(INFRA, True, attempts=1, retries=2)  # the deadline passed
    mid = AgentOutcome(usage=Usage(turns=1, input_tokens=5), error="HTTP 529",
                       infrastructure=True)
    assert not should_retry(mid, False, attempts=1, retries=2) and not nothing_done(mid, False)
    # The CLI reports a failed first call as one turn with no tokens: nothing was done.
    synthetic = AgentOutcome(usage=Usage(turns=1), error="HTTP 529", infrastructure=True)
    assert should_retry(synthetic, False, attempts=1, retries=2)
    assert not should_retry(AgentOutcome(error="bug"), False, attempts=1, retries=2)


def test_turns_without_tokens_are_not_completed_turns() -> None:
    assert turns_completed(Usage(turns=3, cache_read_tokens=1)) == 3
    assert turns_completed(Usage(turns=1)) == 0 and turns_completed(Usage()) == 0


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff(5.0, n) for n in (1, 2, 3)] == [5.0, 10.0, 20.0]
    assert backoff(5.0, 20) == MAX_BACKOFF


def test_an_agent_that_ran_a_tool_never_gets_a_fresh_attempt() -> None:
    """Once a tool ran, the agent's code can write to the CLI's stdout and forge "API error
    529, no tokens spent" (measured in the sandbox, through /proc/1/fd/1): the work is scored
    as it stands instead of being thrown away for a new try (or left for resume to re-run)."""
    forged = AgentOutcome(usage=Usage(turns=1), error="API error 529: overloaded",
                          infrastructure=True, acted=True)
    assert not nothing_done(forged, False)
    assert not should_retry(forged, False, attempts=1, retries=2)

"""When a task's agent stage is tried again (the attempts' costs add up with ``Usage + Usage``).

The rule comes from the benchmark's contract: infrastructure errors (API overloaded or
rate-limited, a CLI crash before any turn) may be retried, because no work was done. Once a turn
has completed, the workspace holds the agent's work: starting again from scratch would throw it
away (and pay for it twice), so such a task is checkpointed and scored like any other failure,
with the error recorded beside the verdict.
"""

from __future__ import annotations

from spider2local.agents.contract import AgentOutcome
from spider2local.core.results import Usage

MAX_BACKOFF = 60.0


def turns_completed(usage: Usage) -> int:
    """Turns that got an answer from a model. The Claude CLI counts a failed API call as a turn
    (a synthetic assistant message: ``num_turns`` 1, no tokens), so turns without a single
    token spent are not completed turns; every real API answer reports input tokens."""
    spent = (usage.input_tokens + usage.output_tokens + usage.cache_read_tokens
             + usage.cache_creation_tokens)
    return usage.turns if spent else 0


def nothing_done(outcome: AgentOutcome, timed_out: bool) -> bool:
    """An infrastructure failure before any completed turn and before any tool ran: the
    workspace is untouched. ``acted`` is checked on its own because usage comes from the
    session's report, which the agent's tools can forge once they run."""
    return (outcome.infrastructure and not timed_out and not outcome.acted
            and turns_completed(outcome.usage) == 0)


def should_retry(outcome: AgentOutcome, timed_out: bool, attempts: int, retries: int) -> bool:
    """``attempts`` made so far; ``retries`` allowed on top of the first attempt."""
    return nothing_done(outcome, timed_out) and attempts <= retries


def backoff(base: float, attempts: int) -> float:
    """Seconds before the next attempt: ``base`` after the first, doubled each time, capped."""
    return float(min(MAX_BACKOFF, base * 2 ** (attempts - 1)))

"""Retry policy: what is retried, backoff, and usage added up over attempts."""

from __future__ import annotations

import pytest

from spider2local.run.contract import AgentOutcome
from spider2local.run.results import Usage
from spider2local.run.retry import (
    MAX_BACKOFF,
    add_usage,
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


def test_add_usage_sums_every_field() -> None:
    a = Usage(turns=1, input_tokens=2, output_tokens=3, cache_read_tokens=4,
              cache_creation_tokens=5, cost_usd_reported=None, cost_usd_computed=0.25,
              by_model={"x": {"input_tokens": 2}})
    b = Usage(turns=10, input_tokens=20, output_tokens=30, cache_read_tokens=40,
              cache_creation_tokens=50, cost_usd_reported=1.0, cost_usd_computed=0.5,
              by_model={"x": {"input_tokens": 20, "output_tokens": 30}, "y": {"input_tokens": 1}})
    total = add_usage(a, b)
    assert (total.turns, total.input_tokens, total.output_tokens, total.cache_read_tokens,
            total.cache_creation_tokens) == (11, 22, 33, 44, 55)
    assert total.cost_usd_reported == 1.0 and total.cost_usd_computed == pytest.approx(0.75)
    assert total.by_model == {"x": {"input_tokens": 22, "output_tokens": 30},
                              "y": {"input_tokens": 1}}
    assert add_usage(Usage(), Usage()).cost_usd is None
    assert a.by_model == {"x": {"input_tokens": 2}}  # inputs untouched

"""The run's shared budget under concurrency: several real gateways (one per session, as in a
run with ``--jobs N``) charge one :class:`Budget`, each through its trial's :class:`Share`."""

from __future__ import annotations

import anyio
import httpx

from spider2local.gateway.budget import Budget, Share
from spider2local.gateway.server import open_gateway
from tests.gateway.test_server import API, Meter

SESSIONS = 3
CAP = 3.5
"""Dollars; each call costs $1 (:class:`Meter`)."""


def test_sessions_at_once_share_one_budget_and_pass_its_cap_by_at_most_one_call_each(
        ) -> None:
    run_budget = Budget(CAP, "run")
    shares = [run_budget.share() for _ in range(SESSIONS)]
    served: list[str] = []
    statuses: dict[int, list[int]] = {}

    async def slow_upstream(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(0.05)  # calls of every session overlap
        served.append(str(request.url))
        return httpx.Response(200, stream=httpx.ByteStream(b'{"type": "message"}'),
                              headers={"content-type": "application/json"})

    async def session(index: int, share: Share) -> None:
        codes = statuses.setdefault(index, [])
        async with open_gateway([API], Meter(), sealed=False, budgets=[Budget(None), share],
                                transport=httpx.MockTransport(slow_upstream)) as gateway, \
                httpx.AsyncClient() as client:
            for _ in range(10):
                response = await client.post(f"{gateway.base_urls[0]}/v1/json", content=b"{}")
                codes.append(response.status_code)

    async def go() -> None:
        async with anyio.create_task_group() as tg:
            for index, share in enumerate(shares):
                tg.start_soon(session, index, share)

    anyio.run(go)
    spent = run_budget.spent_usd
    assert spent == len(served)  # every call served was charged, once
    assert CAP <= spent < CAP + SESSIONS  # over the cap by at most one call per session
    assert sum(s.charged_usd for s in shares) == spent
    for index, codes in statuses.items():
        first_refused = codes.index(400)
        assert set(codes[first_refused:]) == {400}, codes  # once refused, always refused
        assert shares[index].refused is not None and "run budget of $3.5 is spent" in \
            shares[index].refused


def test_settling_adds_only_what_no_gateway_charged() -> None:
    """The runner settles each attempt's reported cost: a gateway's charge is not counted
    twice, an agent's own report (no gateway) is counted, an unknown cost adds nothing."""
    run_budget = Budget(10.0, "run", spent_usd=1.0)  # an earlier invocation's spend
    metered, reported = run_budget.share(), run_budget.share()
    metered.charge(2.0)  # as its gateway did
    metered.settle(2.0)
    assert run_budget.spent_usd == 3.0
    reported.settle(None)
    assert run_budget.spent_usd == 3.0 and not run_budget.unknown
    reported.settle(4.0)
    reported.settle(4.0)  # the same total again (a later attempt with nothing more)
    assert run_budget.spent_usd == 7.0 and reported.charged_usd == 4.0
    assert metered.refused is None and reported.refusal() is None
    reported.settle(12.0)
    assert run_budget.refusal() is not None and reported.refused is None  # nothing refused yet
    assert metered.refusal() is not None and metered.refused is not None

"""Spending caps the gateway enforces: refused requests, not advice to the agent.

One :class:`Budget` per cap: the task's (``--max-budget-usd``) is made per session; the run's
(``--max-cost-usd``) is one object the run shares between every session of the run (it is
only ever touched from the runner's event loop, so it needs no lock: a charge or a check runs
to its end before another task of the loop runs). Each trial reaches the run's budget through
its own :class:`Share`, which charges the one budget and remembers what this trial charged and
whether the budget refused it. A request is refused once any cap it draws on is spent; the call
that crosses a cap is served whole (its cost is known only at its end), so a cap is exceeded by
at most one call per session running at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Cap(Protocol):
    """What the gateway needs of a cap: charge each call's cost, say when to refuse."""

    def charge(self, usd: float | None) -> None: ...

    def refusal(self) -> str | None: ...


@dataclass
class Budget:
    cap_usd: float | None
    """None: no cap (the spend is still counted)."""
    label: str = "task"
    """How a refusal names it: ``task`` or ``run``."""
    spent_usd: float = 0.0
    unknown: bool = False
    """Some spend could not be priced (a model missing from the price table): with a cap,
    the budget is then treated as spent, since it can no longer be enforced."""

    def charge(self, usd: float | None) -> None:
        if usd is None:
            self.unknown = True
        elif usd > 0:
            self.spent_usd += usd

    def refusal(self) -> str | None:
        """Why no further request may be served, or None."""
        if self.cap_usd is None:
            return None
        if self.unknown:
            return (f"the {self.label} budget of ${self.cap_usd:g} cannot be enforced: a model "
                    "used has no price in spider2local's table")
        if self.spent_usd >= self.cap_usd:
            return (f"the {self.label} budget of ${self.cap_usd:g} is spent "
                    f"(${self.spent_usd:.4f})")
        return None

    def share(self) -> Share:
        """A view of this budget for one trial (every attempt and session of it)."""
        return Share(self)


class Share:
    """One trial's part of a shared :class:`Budget` (the run's).

    Why a view and not the budget itself: the runner must know, per trial, whether the cap is
    what stopped it (``refused``: the report counts trials the cap cut) and how much of the
    trial's cost the gateway already charged, so that :meth:`settle` can add what no gateway
    saw (an agent that reports its cost itself) without counting a gateway's charge twice.
    The budget stays the one tally of what the run spent."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.charged_usd = 0.0
        """What this trial charged the budget so far."""
        self.refused: str | None = None
        """Why a request of this trial was refused by the budget, once one was."""

    def charge(self, usd: float | None) -> None:
        self.budget.charge(usd)
        if usd is not None and usd > 0:
            self.charged_usd += usd

    def refusal(self) -> str | None:
        """The budget's refusal; the gateway asks only for a request it is about to serve,
        so a reason returned here is a request of this trial refused."""
        reason = self.budget.refusal()
        if reason is not None and self.refused is None:
            self.refused = reason
        return reason

    def settle(self, cost_usd: float | None) -> None:
        """The trial's cost so far as its usage reports it: charge what the gateway did not
        (nothing for an agent whose every call went through a gateway; the whole cost for one
        that never used one). ``None`` (no cost known) charges nothing: a gateway that saw
        unpriced calls has marked the budget unknown already."""
        if cost_usd is not None and cost_usd > self.charged_usd:
            self.charge(cost_usd - self.charged_usd)

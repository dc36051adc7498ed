"""Spending caps the gateway enforces: refused requests, not advice to the agent.

One :class:`Budget` per cap: the task's (``--max-budget-usd``) is made per session; the run's
(``--max-cost-usd``) is one object the runner shares between every session of the run (it is
only ever touched from the runner's event loop, so it needs no lock). A request is refused once
any cap it draws on is spent; the call that crosses a cap is served whole (its cost is known
only at its end), so a cap is exceeded by at most one call per session running at that moment.
"""

from __future__ import annotations

from dataclasses import dataclass


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

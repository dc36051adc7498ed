"""What a comparison will cost: ``spider2local plan`` simulates the fixed design and the
sequential one on a population of tasks, with the decision code the runs use.

**The population** (flip rate F, the share of tasks on which two one-trial runs of one kit
disagree): a share ``3 F`` of the tasks is *flaky*, with a pass rate drawn uniformly from
[0, 1] (which disagrees with itself on ``2 p (1 - p)``, 1/3 on average, of pairs of trials);
the others are *stable*, passing always or never (half each). So the expected flip rate is
exactly F (F up to 1/3). Real suites look like that: most of Spider2-DBT's tasks fail (or pass)
every time, a few are coin flips.

**The difference** D: B is A with its ability raised by a constant on the logit scale (the
Rasch model: ``logit p_B = logit p_A + beta``), beta solved per simulated suite so that B's
mean rate is D above A's. A stable task stays stable (its logit is infinite); the flaky ones
move. (bench_stats.py's other model, "B fixes a share of every task's failures", spreads the
gain thinly over the stable tasks too, which the label-blind pruning then often drops; it is
the hard case for the sequential design, reported in docs/statistics.md.)

**The designs**, B's trials counted (run A exists already):

- fixed: K trials of every task, judged by ``compare``'s test
  (:func:`spider2local.report.stats.sign_flip_p` on the per-task rates);
- sequential: :func:`spider2local.sequential.analyse`, exactly what ``run --until-decided``
  decides with, at most ``max_rounds`` rounds (default K + 1) of trials drawn in advance (the
  trials it does not use are the ones it saves).

Power counts runs that find B better; the false-positive rate counts any significant answer
when A and B are the same kit (and is reported with its 95% Clopper-Pearson Monte Carlo
interval). Expected trials and their 10th and 90th percentiles are at the difference D.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from spider2local.report.stats import ALPHA, SEED, clopper_pearson, sign_flip_p
from spider2local.sequential.analysis import MIN_DIFFERENCE, Design, Outcome, analyse

SIMULATIONS = 1000
MAX_FLIP_RATE = 1 / 3


@dataclass(frozen=True)
class DesignFigures:
    power: float
    false_positive_rate: float
    false_positive_interval: tuple[float, float]
    expected_trials: float
    trials_p10: float
    trials_p90: float
    expected_trials_null: float

    def as_json(self) -> dict[str, Any]:
        return {"power": self.power, "false_positive_rate": self.false_positive_rate,
                "false_positive_interval": list(self.false_positive_interval),
                "expected_trials": self.expected_trials, "trials_p10": self.trials_p10,
                "trials_p90": self.trials_p90, "expected_trials_null": self.expected_trials_null}


@dataclass(frozen=True)
class Plan:
    tasks: int
    flip_rate: float
    difference: float
    trials: int
    max_rounds: int
    min_difference: float
    simulations: int
    seed: int
    fixed: DesignFigures
    sequential: DesignFigures

    def as_json(self) -> dict[str, Any]:
        return {"schema_version": 1, "tasks": self.tasks, "flip_rate": self.flip_rate,
                "difference": self.difference, "trials": self.trials,
                "max_rounds": self.max_rounds, "min_difference": self.min_difference,
                "simulations": self.simulations,
                "seed": self.seed, "fixed": self.fixed.as_json(),
                "sequential": self.sequential.as_json()}


def population(tasks: int, flip_rate: float, rng: np.random.Generator) -> np.ndarray:
    """A's per-task pass rates with expected flip rate ``flip_rate`` (module docstring)."""
    if not 0 <= flip_rate <= MAX_FLIP_RATE:
        raise ValueError(f"flip rate must be between 0 and {MAX_FLIP_RATE:.3f}")
    flaky = rng.random(tasks) < 3 * flip_rate
    stable = (rng.random(tasks) < 0.5).astype(float)
    rates: np.ndarray = np.where(flaky, rng.random(tasks), stable)
    return rates


def shifted(rates: np.ndarray, difference: float) -> np.ndarray:
    """B's rates: A's moved by one logit shift so the mean rises by ``difference`` (as near as
    the flaky tasks allow; bisection, since the mean is monotone in the shift)."""
    if difference == 0:
        return rates
    flaky = (rates > 0) & (rates < 1)
    logits = np.log(rates[flaky]) - np.log1p(-rates[flaky])
    target = difference * len(rates)
    low, high = (0.0, 30.0) if difference > 0 else (-30.0, 0.0)
    for _ in range(60):
        mid = (low + high) / 2
        gain = float(np.sum(1 / (1 + np.exp(-(logits + mid))) - rates[flaky]))
        low, high = (mid, high) if (gain < target) == (difference > 0) else (low, mid)
    out = rates.copy()
    out[flaky] = 1 / (1 + np.exp(-(logits + (low + high) / 2)))
    return out


def _simulate(tasks: int, flip_rate: float, difference: float, trials: int,
              design: Design, simulations: int, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per simulated pair of runs: fixed design rejected (B better, or any side under the
    null), sequential rejected likewise, sequential B trials."""
    fixed = np.zeros(simulations, dtype=bool)
    seq = np.zeros(simulations, dtype=bool)
    cost = np.zeros(simulations)
    for i in range(simulations):
        rate_a = population(tasks, flip_rate, rng)
        rate_b = shifted(rate_a, difference)
        draws = rng.random((2, tasks, max(trials, design.max_rounds)))
        a = (draws[0] < rate_a[:, None]).astype(np.int64)
        b = (draws[1] < rate_b[:, None]).astype(np.int64)
        d = b[:, :trials].mean(axis=1) - a[:, :trials].mean(axis=1)
        p, _ = sign_flip_p(d, trials)
        fixed[i] = p < design.alpha and (difference == 0 or d.sum() * difference > 0)
        outcome: Outcome = analyse(a, b, design)
        seq[i] = outcome.decision.significant and (
            difference == 0 or outcome.difference * difference > 0)
        cost[i] = outcome.trials_b
    return fixed, seq, cost


def simulate(tasks: int, flip_rate: float, difference: float, *, trials: int = 5,
             max_rounds: int | None = None, min_difference: float = MIN_DIFFERENCE,
             simulations: int = SIMULATIONS, seed: int = SEED) -> Plan:
    """Both designs' power at ``difference``, false-positive rate and trials (B's): the fixed
    design with ``trials`` trials, the sequential one with at most ``max_rounds`` rounds
    (default ``trials + 1``, as ``run --until-decided``'s default of 6 is to the usual 5)."""
    if tasks < 1 or trials < 1 or simulations < 1:
        raise ValueError("tasks, trials and simulations must be at least 1")
    rounds = trials + 1 if max_rounds is None else max_rounds
    if not 0 < abs(difference) <= 1:
        raise ValueError("the difference must be a fraction in (0, 1]")
    design = Design(max_rounds=rounds, min_difference=min_difference, alpha=ALPHA)
    rng = np.random.default_rng(seed)
    fix_alt, seq_alt, cost_alt = _simulate(tasks, flip_rate, difference, trials, design,
                                           simulations, rng)
    fix_null, seq_null, cost_null = _simulate(tasks, flip_rate, 0.0, trials, design,
                                              simulations, rng)
    full = float(tasks * trials)

    def figures(alt: np.ndarray, null: np.ndarray, cost: np.ndarray | None,
                cost_null: np.ndarray | None) -> DesignFigures:
        hits = int(null.sum())
        low, high = clopper_pearson(hits, simulations)
        if cost is None or cost_null is None:
            return DesignFigures(float(alt.mean()), hits / simulations, (low, high), full,
                                 full, full, full)
        p10, p90 = np.percentile(cost, [10, 90])
        return DesignFigures(float(alt.mean()), hits / simulations, (low, high),
                             float(cost.mean()), float(p10), float(p90),
                             float(cost_null.mean()))

    return Plan(tasks, flip_rate, difference, trials, rounds, min_difference, simulations, seed,
                figures(fix_alt, fix_null, None, None),
                figures(seq_alt, seq_null, cost_alt, cost_null))


def _share(value: float) -> str:
    return f"{value * 100:.1f}%"


def render_plan(plan: Plan) -> str:
    """The two designs side by side as a Markdown table (it reads as well in a terminal, and
    docs/statistics.md pastes it as printed)."""
    seq, fixed = plan.sequential, plan.fixed
    head = (f"{plan.tasks} tasks, flip rate {plan.flip_rate * 100:.0f}%, B better by "
            f"{plan.difference * 100:.0f} points; {plan.simulations:,} simulated pairs of runs "
            f"per design and hypothesis (seed {plan.seed}); trials are B's")
    rows = [
        "| design | trials per task | power | false positives [95% MC] | expected trials "
        "| p10-p90 | same kit: expected trials |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, fig, span in (("fixed", fixed, f"{plan.trials}"),
                            ("sequential", seq, f"at most {plan.max_rounds}")):
        low, high = fig.false_positive_interval
        share = fig.expected_trials / (plan.tasks * plan.trials)
        rows.append(
            f"| {name} | {span} | {_share(fig.power)} | {_share(fig.false_positive_rate)} "
            f"[{low * 100:.1f}, {high * 100:.1f}] | {fig.expected_trials:.0f} ({share:.0%}) "
            f"| {fig.trials_p10:.0f}-{fig.trials_p90:.0f} | {fig.expected_trials_null:.0f} |")
    return "\n".join([head, "", *rows])

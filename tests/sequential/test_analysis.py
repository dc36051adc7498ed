"""The sequential comparison: its exact boundary checked against enumeration, the answer on
constructed runs, and by simulation (fixed seed) its false-positive rate with the label-blind
pruning, and its power and cost against the fixed design."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from spider2local.report.planner import population, shifted, simulate
from spider2local.report.stats import clopper_pearson
from spider2local.sequential.analysis import (
    NOT_RUN,
    Decision,
    Design,
    _Walk,
    analyse,
    spending,
)


def test_spending_is_cumulative_and_spends_alpha_at_the_end() -> None:
    values = [spending(t) for t in (0.0, 0.2, 0.5, 0.9, 1.0, 1.5)]
    assert values == sorted(values)
    assert values[0] == 0.0 and values[-2] == pytest.approx(0.05) and values[-1] == 0.05


def test_the_walks_boundary_equals_enumeration_of_every_sign_pattern() -> None:
    """Two looks (5 then 4 more discordant pairs): the crossing probabilities the walk spends
    equal those counted over all 2**9 sign patterns."""
    walk = _Walk()
    walk.add(5)
    b1 = walk.boundary(0.07)
    walk.add(4)
    b2 = walk.boundary(0.2 - walk.spent)
    cross1 = cross2 = 0
    for signs in itertools.product((-1, 1), repeat=9):
        u1, u2 = sum(signs[:5]), sum(signs)
        if abs(u1) >= b1:
            cross1 += 1
        elif abs(u2) >= b2:
            cross2 += 1
    assert b1 in (4, 5)  # |U| is odd: P(|U| = 5) = 2/32 <= 0.07, P(|U| >= 3) = 12/32 is not
    assert walk.spent == pytest.approx((cross1 + cross2) / 2 ** 9)
    assert walk.spent <= 0.2


def _runs(a_rows: list[list[int]], b_rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(a_rows), np.array(b_rows)


def test_b_passing_everything_a_fails_stops_early_with_b_better() -> None:
    a = np.zeros((16, 6), dtype=int)
    b = np.ones((16, 6), dtype=int)
    out = analyse(a, b)
    assert out.decision is Decision.B_BETTER
    assert out.decided_round is not None and out.decided_round <= 2
    assert out.trials_b == 16 * out.decided_round
    assert out.difference == 1.0
    assert out.interval[0] > 0 and out.p_value < 0.05
    assert out.next_round is None and out.next_tasks == ()


def test_identical_kits_run_every_round_and_claim_nothing() -> None:
    """Every task a coin flip for both: the boundary is never crossed."""
    rng = np.random.default_rng(7)
    rows = (rng.random((12, 6)) < 0.5).astype(int)
    out = analyse(rows, rows.copy(), Design(futility=0.0))
    assert out.decision is Decision.NO_DIFFERENCE
    assert not out.decision.significant
    assert out.looks[-1].information == 1.0 and out.looks[-1].spent <= 0.05
    assert out.difference == 0.0 and out.p_value >= 0.05


def test_stable_tasks_are_pruned_after_two_rounds_without_looking_at_labels() -> None:
    a, b = _runs([[1] * 6, [0] * 6, [1, 0, 1, 0, 1, 0]], [[1] * 6, [0] * 6, [0, 1, 0, 1, 0, 1]])
    out = analyse(a, b, Design(futility=0.0))
    assert [look.in_play for look in out.looks[:3]] == [3, 3, 1]
    assert out.looks[1].pruned == 2
    # swapping A's and B's trials of any pair changes neither the pruning nor the walk's size
    swapped_a, swapped_b = a.copy(), b.copy()
    swapped_a[2, 1], swapped_b[2, 1] = b[2, 1], a[2, 1]
    other = analyse(swapped_a, swapped_b, Design(futility=0.0))
    assert [(x.in_play, x.pruned, x.discordant, x.information, x.boundary)
            for x in other.looks] == [(x.in_play, x.pruned, x.discordant, x.information,
                                       x.boundary) for x in out.looks]


def test_a_missing_round_is_the_next_round_for_the_tasks_in_play() -> None:
    a = np.ones((3, 6), dtype=int)
    a[2] = [0, 1, 0, 1, 0, 1]
    b = np.full((3, 6), NOT_RUN)
    b[:, :2] = [[1, 1], [1, 1], [1, 0]]
    out = analyse(a, b, Design(futility=0.0))
    assert out.decision is Decision.UNDECIDED
    assert out.next_round == 3 and out.next_tasks == (2,)  # the two stable tasks are pruned
    assert out.trials_b == 6
    assert analyse(a, np.full((3, 0), NOT_RUN)).next_round == 1


def test_run_a_short_of_a_trial_a_task_in_play_needs_is_refused() -> None:
    a = np.array([[1, 0]])
    b = np.array([[0, 1, 1]])
    with pytest.raises(ValueError, match="run A has no trial 3"):
        analyse(a, b, Design(max_rounds=3, futility=0.0))


def test_garbage_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="same tasks"):
        analyse(np.zeros((2, 2)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="at least 1"):
        Design(max_rounds=0)


def test_population_has_the_flip_rate_asked_for() -> None:
    rng = np.random.default_rng(1)
    rates = np.concatenate([population(64, 0.2, rng) for _ in range(400)])
    assert float(np.mean(2 * rates * (1 - rates))) == pytest.approx(0.2, abs=0.01)
    b = shifted(rates[:64], 0.1)
    assert float(b.mean() - rates[:64].mean()) == pytest.approx(0.1, abs=1e-6)
    with pytest.raises(ValueError, match="flip rate"):
        population(10, 0.5, rng)


def test_false_positives_with_pruning_stay_under_alpha_on_adversarial_rates() -> None:
    """Identical kits on a suite of near-stable and coin-flip tasks (the pruning drops many):
    the exact walk keeps the false-positive rate at most 5%, within the Monte Carlo interval."""
    rng = np.random.default_rng(11)
    runs, hits = 1500, 0
    for _ in range(runs):
        rates = rng.choice([0.02, 0.5, 0.98], size=40)
        draws = rng.random((2, 40, 6))
        out = analyse((draws[0] < rates[:, None]).astype(int),
                      (draws[1] < rates[:, None]).astype(int))
        hits += out.decision.significant
    # the 95% Clopper-Pearson interval of the rate must reach down to 5% or below
    assert clopper_pearson(hits, runs)[0] <= 0.05


def test_plan_at_flip_rate_20_on_64_tasks_matches_the_fixed_design_at_half_the_cost() -> None:
    """The issue's figures: the sequential design's false-positive rate at most 5% (its Monte
    Carlo interval's lower end), its power at 10 points at least the fixed 5-trial design's,
    at most half the fixed design's expected trials."""
    plan = simulate(64, 0.2, 0.10, trials=5, simulations=1000)
    seq, fixed = plan.sequential, plan.fixed
    assert seq.false_positive_rate <= 0.05
    assert seq.false_positive_interval[0] <= 0.05 <= 1
    assert seq.power >= fixed.power
    assert seq.expected_trials <= fixed.expected_trials / 2
    assert fixed.expected_trials == 320 and seq.trials_p10 <= seq.trials_p90
    assert math.isclose(plan.as_json()["sequential"]["power"], seq.power)

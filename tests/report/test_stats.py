"""The statistics, checked against independent computations: enumeration over subsets and sign
patterns, and simulated runs with known per-task rates."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from spider2local.report.stats import (
    TaskCount,
    bootstrap_intervals,
    clopper_pearson,
    compare_counts,
    fewest_to_reject,
    flaky_tasks,
    mcnemar_p,
    min_detectable_difference,
    pass_at_1,
    pass_at_k_task,
    pass_hat_k_task,
    pass_k_table,
    sign_flip_p,
)

T = TaskCount


def _subsets(n: int, c: int, k: int) -> tuple[float, float]:
    """pass@k and pass^k by listing every k-subset of the n trials (c of them passed)."""
    trials = [True] * c + [False] * (n - c)
    picks = list(itertools.combinations(trials, k))
    return (sum(any(p) for p in picks) / len(picks), sum(all(p) for p in picks) / len(picks))


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_and_pass_hat_k_equal_enumeration_over_every_subset(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            at, hat = _subsets(n, c, k)
            assert pass_at_k_task(n, c, k) == pytest.approx(at, abs=1e-12)
            assert pass_hat_k_task(n, c, k) == pytest.approx(hat, abs=1e-12)


def test_k_beyond_the_trials_is_refused() -> None:
    with pytest.raises(ValueError, match="k = 4"):
        pass_at_k_task(3, 1, 4)
    with pytest.raises(ValueError, match="between 0 and"):
        T(2, 3)


def test_pass_k_table_averages_over_tasks_with_enough_trials() -> None:
    counts = [T(3, 1), T(3, 3), T(3, 0), T(1, 1)]  # the last was cut after one trial
    table = pass_k_table(counts)
    assert [row.k for row in table] == [1, 2, 3]
    k1, k2, k3 = table
    assert (k1.tasks, k1.short) == (4, 0)
    assert k1.pass_at_k == pytest.approx((1 / 3 + 1 + 0 + 1) / 4)
    assert (k2.tasks, k2.short) == (3, 1)  # T(1, 1) has no pass@2: left out, not a 0
    assert k2.pass_at_k == pytest.approx((_subsets(3, 1, 2)[0] + 1 + 0) / 3)
    assert k3.pass_hat_k == pytest.approx(1 / 3)  # only the task that passed every trial
    assert k3.pass_at_k == pytest.approx(2 / 3)
    assert pass_k_table([]) == []


def test_flaky_tasks_passed_some_trials_and_failed_others() -> None:
    assert flaky_tasks({"a": T(3, 1), "b": T(3, 3), "c": T(3, 0), "d": T(2, 1),
                        "e": T(0, 0)}) == ["a", "d"]


def test_pass_at_1_is_the_mean_of_task_rates_over_the_denominator() -> None:
    counts = [T(3, 1), T(3, 2), T(2, 2)]
    est = pass_at_1(counts, 5)  # two tasks of the denominator never ran: 0 each
    assert est.value == pytest.approx((1 / 3 + 2 / 3 + 1) / 5)
    assert (est.tasks, est.attempted) == (5, 3)
    rates = np.array([1 / 3, 2 / 3, 1, 0, 0])
    assert est.se == pytest.approx(rates.std(ddof=1) / np.sqrt(5))
    assert est.interval.method == "bootstrap"
    assert est.interval.low <= est.value <= est.interval.high
    assert pass_at_1(counts) == pass_at_1(counts, 3)  # default: the attempted tasks
    assert pass_at_1(counts, 5) == est  # seeded: the same report every time
    with pytest.raises(ValueError, match="smaller"):
        pass_at_1(counts, 2)


def test_edge_cases_get_exact_intervals_not_a_zero_width_bootstrap() -> None:
    everything = pass_at_1([T(1, 1)] * 64)
    assert everything.value == 1.0 and everything.interval.method == "exact"
    assert everything.interval.high == 1.0
    assert everything.interval.low == pytest.approx(0.025 ** (1 / 64))  # Clopper-Pearson
    nothing = pass_at_1([T(3, 0)] * 10)
    assert (nothing.value, nothing.interval.low) == (0.0, 0.0)
    assert nothing.interval.high == pytest.approx(1 - 0.025 ** (1 / 10))
    one = pass_at_1([T(4, 3)])
    assert one.interval.method == "exact" and one.value == 0.75
    assert (one.interval.low, one.interval.high) == pytest.approx(clopper_pearson(3, 4))
    assert one.interval.low == pytest.approx(0.1941, abs=1e-4)  # the textbook 3 of 4
    assert one.se == pytest.approx(np.sqrt(0.75 * 0.25 / 4))


def test_the_interval_covers_the_true_pass_at_1_in_about_95_percent_of_runs() -> None:
    """2,000 simulated runs of 64 tasks, 3 trials each. The interval resamples tasks: it is
    about the suite's tasks as a sample of tasks like them, so each run draws its 64 tasks
    (with their known rates) from one population and the truth is that population's mean
    rate. A spread like a real suite's: many tasks always fail or always pass, some between.
    (With the same 64 tasks in every run only the trials vary, and the interval over-covers:
    measured 99.95%.)"""
    rng = np.random.default_rng(7)
    population = rng.beta(0.6, 0.6, size=5000)
    truth = population.mean()
    runs = 2000
    passed = rng.binomial(3, rng.choice(population, size=(runs, 64)))
    low, high = bootstrap_intervals(passed / 3)  # pass_at_1's bootstrap, every run at once
    coverage = float(np.mean((low <= truth) & (truth <= high)))
    assert 0.93 <= coverage <= 0.97, coverage
    for row, lo, hi in zip(passed[:20], low, high, strict=False):  # the same as one by one
        est = pass_at_1([T(3, int(c)) for c in row])
        assert (est.interval.low, est.interval.high) == pytest.approx((lo, hi))


def _identical_kits(trials: int, pairs: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    rates = rng.beta(0.6, 0.6, size=64)
    rejected = 0
    for _ in range(pairs):
        a = rng.binomial(trials, rates)
        b = rng.binomial(trials, rates)
        result = compare_counts([T(trials, int(x)) for x in a], [T(trials, int(y)) for y in b],
                                resamples=200)
        rejected += result.significant
    return rejected / pairs


@pytest.mark.parametrize("trials", [1, 3])
def test_identical_kits_are_rejected_at_most_6_percent_of_the_time(trials: int) -> None:
    """McNemar (1 trial) and the sign-flip test (3 trials) on 2,000 pairs of runs of one kit."""
    assert _identical_kits(trials, 2000, seed=trials) <= 0.06


def test_four_tasks_that_all_flip_are_not_significant() -> None:
    c = compare_counts([T(1, 1)] * 4, [T(1, 0)] * 4)
    assert c.p_value == pytest.approx(0.125) and not c.significant and not c.regression
    assert c.test == "McNemar's exact test" and c.difference == -1.0
    assert c.interval.method == "exact" and c.interval.low == -1.0 and c.interval.high > 0
    assert c.detectable is None
    assert c.sentence.startswith("no difference detectable: with 4 tasks and 1 trial no "
                                 "outcome could be significant (p = 0.125")
    assert "worse by" not in c.sentence


def test_six_tasks_that_all_flip_one_way_are_the_fewest_that_can_be() -> None:
    assert fewest_to_reject() == 6
    c = compare_counts([T(1, 1)] * 6 + [T(1, 0)] * 10, [T(1, 0)] * 6 + [T(1, 0)] * 10)
    assert c.p_value == pytest.approx(2 / 64) and c.significant and c.regression
    assert c.sentence.startswith("B is worse by 37.5 points [")
    assert c.sentence.endswith("p = 0.0312")


def test_identical_runs_say_no_difference_and_how_large_one_would_need_to_be() -> None:
    runs = [T(1, 1)] * 40 + [T(1, 0)] * 24
    c = compare_counts(runs, runs)
    assert (c.difference, c.p_value, c.b_better, c.a_better) == (0.0, 1.0, 0, 0)
    assert c.interval.method == "exact" and c.interval.low < 0 < c.interval.high
    assert c.detectable == pytest.approx(6 / 64)  # no noise seen: the exact test's floor
    assert c.sentence == ("no difference detectable: with 64 tasks and 1 trial the runs "
                          "would have to differ by about 9 points (p = 1)")


def test_mcnemar_counts_only_the_tasks_that_differ() -> None:
    a = [T(1, 1)] * 30 + [T(1, 0)] * 20 + [T(1, 1)] * 2 + [T(1, 0)] * 12
    b = [T(1, 1)] * 30 + [T(1, 0)] * 20 + [T(1, 0)] * 2 + [T(1, 1)] * 12
    c = compare_counts(a, b)
    assert (c.b_better, c.a_better) == (12, 2)
    from scipy.stats import binomtest
    assert c.p_value == pytest.approx(binomtest(12, 14).pvalue)
    assert c.significant and c.difference == pytest.approx(10 / 64)
    assert c.sentence.startswith("B is better by 15.6 points [")


def test_the_sign_flip_test_equals_enumerating_every_sign_pattern() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        d = rng.choice([-1, -2 / 3, -1 / 3, 0, 0, 1 / 3, 2 / 3, 1], size=int(rng.integers(1, 11)))
        p, method = sign_flip_p(d, 3)
        magnitudes = np.abs(d[np.abs(d) > 1e-12])
        brute = 1.0 if not len(magnitudes) else sum(
            abs(np.dot(signs, magnitudes)) >= abs(d.sum()) - 1e-9
            for signs in itertools.product([-1, 1], repeat=len(magnitudes))
        ) / 2 ** len(magnitudes)
        assert p == pytest.approx(brute, abs=1e-12), (d, method)


def test_monte_carlo_is_seeded_and_close_to_the_exact_answer() -> None:
    d = np.random.default_rng(5).choice([-1 / 3, 0, 1 / 3, 2 / 3], size=64)
    exact, method = sign_flip_p(d, 3)
    assert "exact" in method
    mc, mc_method = sign_flip_p(d, 1)  # not whole multiples of 1: Monte Carlo
    assert "Monte Carlo" in mc_method and mc == sign_flip_p(d, 1)[0]
    assert mc == pytest.approx(exact, abs=0.005)


def test_several_trials_use_the_sign_flip_test() -> None:
    a = [T(3, 1), T(3, 3), T(3, 0), T(3, 2)] * 4
    b = [T(3, 2), T(3, 3), T(3, 1), T(3, 3)] * 4
    c = compare_counts(a, b)
    assert c.test.startswith("sign-flip permutation test (exact")
    assert c.difference == pytest.approx(1 / 3 * 3 / 4)
    assert c.p_value == pytest.approx(2 / 2 ** 12)  # 12 tasks differ, all one way
    assert c.trials_a == c.trials_b == (3, 3)
    assert "3 trials" in compare_counts(a[:3], b[:3]).sentence


def test_the_detectable_difference_follows_the_normal_formula_above_its_floor() -> None:
    # 64 tasks, 1 trial, runs of one kit disagree on 16% of tasks (v = 0.08): about 14 points
    assert min_detectable_difference(64, 1, 1, 0.08) == pytest.approx(0.140, abs=0.001)
    assert min_detectable_difference(64, 3, 3, 0.08) == pytest.approx(0.140 / np.sqrt(3),
                                                                      abs=0.001)
    assert min_detectable_difference(5, 1, 1, 0.08) is None  # 5 tasks can never reach 0.05
    assert min_detectable_difference(64, 1, 1, 0.0) == pytest.approx(6 / 64)


def test_mismatched_or_empty_pairs() -> None:
    with pytest.raises(ValueError, match="same tasks"):
        compare_counts([T(1, 1)], [])
    with pytest.raises(ValueError, match="at least one trial"):
        compare_counts([T(0, 0)], [T(1, 1)])
    empty = compare_counts([], [])
    assert not empty.significant and empty.sentence.startswith("nothing to compare")


def test_hand_written_exact_tests_equal_scipy_stats() -> None:
    """McNemar's p-value is summed by hand and the Clopper-Pearson bounds come from
    scipy.special (scipy.stats costs every report seconds to import): both equal scipy.stats's
    own answers, including the edges (no discordant task, all on one side, a tie)."""
    from scipy.stats import beta, binomtest

    for b, a in [(0, 1), (1, 0), (3, 3), (12, 2), (0, 30), (7, 8), (40, 28), (1, 67)]:
        assert mcnemar_p(b, a) == pytest.approx(binomtest(b, a + b, 0.5).pvalue, rel=1e-12)
    assert mcnemar_p(0, 0) == 1.0
    for x, m in [(0, 4), (4, 4), (3, 4), (38.4, 64), (1, 1), (63, 64)]:
        low, high = clopper_pearson(x, m)
        assert low == (0.0 if x == 0 else pytest.approx(beta.ppf(0.025, x, m - x + 1)))
        assert high == (1.0 if x == m else pytest.approx(beta.ppf(0.975, x + 1, m - x)))


@pytest.mark.process
def test_clopper_pearson_is_computed_without_scipy() -> None:
    """The run's last step (the summary) must not import scipy: its OpenBLAS retries a failed
    mmap forever at import, and under ``ulimit -v 330000`` a finished run spun at 100% CPU
    there until killed. The hand-written quantiles equal scipy's to 1e-10, over the
    proportions a run reports (every x of m up to 70, and fractional rates)."""
    import subprocess
    import sys

    code = ("import sys; from spider2local.report.stats import clopper_pearson; "
            "clopper_pearson(3, 4); clopper_pearson(38.4, 64); "
            "assert 'scipy' not in sys.modules, sorted(m for m in sys.modules if 'scipy' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

    from scipy.special import betaincinv

    cases = [(x, m) for m in (1, 2, 4, 7, 20, 64, 68) for x in range(m + 1)]
    cases += [(38.4, 64), (0.5, 3), (66.75, 68), (1e-3, 5)]
    for x, m in cases:
        clopper_pearson.cache_clear()
        low, high = clopper_pearson(x, m)
        want_low = 0.0 if x <= 0 else float(betaincinv(x, m - x + 1, 0.025))
        want_high = 1.0 if x >= m else float(betaincinv(x + 1, m - x, 0.975))
        assert low == pytest.approx(want_low, rel=1e-10, abs=1e-13), (x, m)
        assert high == pytest.approx(want_high, rel=1e-10, abs=1e-13), (x, m)

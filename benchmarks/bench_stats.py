"""How often does ``compare`` see a real 10-point difference? The paired test's power, simulated.

Kit B is 10 points better than kit A on a suite of 64 tasks: each task has a true pass rate for
A drawn from a spread like a real suite's (many tasks always pass or always fail, a few in
between: beta(0.3, 0.3)), and B fixes a share of A's failures so its mean rate is exactly 10
points higher. Each simulated pair of runs makes 1, 3 or 5 trials per task with each kit and
goes through :func:`spider2local.report.stats.compare_counts`, exactly as ``compare`` does.
Printed per trial count: the share of pairs where B is found significantly better (power),
the share where identical kits are declared different (the false-positive rate, which must stay
at or below 5%), and what :func:`min_detectable_difference` predicts from the simulated trial
variance (its normal formula should put the 80%-power difference near where the simulation
crosses 80%).

    .venv/bin/python benchmarks/bench_stats.py [--pairs 1000] [--tasks 64] [--difference 0.10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from spider2local.report.stats import TaskCount, compare_counts, min_detectable_difference


def rates_for(tasks: int, difference: float, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray]:
    a = rng.beta(0.3, 0.3, size=tasks)
    share = min(1.0, difference / float(np.mean(1 - a)))
    return a, a + share * (1 - a)


def rejection_rate(a: np.ndarray, b: np.ndarray, trials: int, pairs: int,
                   rng: np.random.Generator, *, better_only: bool) -> float:
    hits = 0
    for _ in range(pairs):
        ca = rng.binomial(trials, a)
        cb = rng.binomial(trials, b)
        result = compare_counts([TaskCount(trials, int(x)) for x in ca],
                                [TaskCount(trials, int(y)) for y in cb], resamples=200)
        hits += result.significant and (result.difference > 0 or not better_only)
    return hits / pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--difference", type=float, default=0.10)
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    a, b = rates_for(args.tasks, args.difference, rng)
    variance = float(np.mean(a * (1 - a) + b * (1 - b)) / 2)
    print(f"{args.tasks} tasks, B better by {args.difference * 100:.1f} points "
          f"(A {a.mean():.1%}, B {b.mean():.1%}), trial variance v = {variance:.3f}, "
          f"{args.pairs} simulated pairs each")
    print(f"{'trials':>6}  {'power':>6}  {'false positives':>15}  {'predicted 80%-power diff':>24}"
          f"  {'seconds':>7}")
    for trials in (1, 3, 5):
        started = time.perf_counter()
        power = rejection_rate(a, b, trials, args.pairs, rng, better_only=True)
        false = rejection_rate(a, a, trials, args.pairs, rng, better_only=False)
        predicted = min_detectable_difference(args.tasks, trials, trials, variance)
        shown = "none" if predicted is None else f"{predicted * 100:.1f} points"
        print(f"{trials:>6}  {power:>6.1%}  {false:>15.1%}  {shown:>24}"
              f"  {time.perf_counter() - started:>7.1f}")


if __name__ == "__main__":
    main()

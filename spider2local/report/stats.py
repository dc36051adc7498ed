"""The statistics of one run and of two runs, from counts alone: no I/O, no report model.

Everything here works on :class:`TaskCount` (per task: trials run ``n``, trials passed ``c``):

- per task, its pass rate ``c / n``, and the flaky tasks (``0 < c < n``);
- :func:`pass_at_1`: the mean over tasks of each task's pass rate over a denominator (tasks of
  the denominator that were never run count as 0, as "passed 3/68" always did), its standard
  error, and a 95% interval from a percentile bootstrap that resamples *tasks* (a task's
  trials stay together: the sample is the tasks, and trials only make each task's rate
  sharper);
- :func:`pass_k_table`: pass@k (some of k trials passes) and pass^k (all k pass) for every k
  up to the most trials a task has, with the unbiased estimators of Chen et al. (2021) and of
  tau-bench: per task ``1 - C(n-c, k) / C(n, k)`` and ``C(c, k) / C(n, k)``, then averaged;
- :func:`compare_counts`: two runs paired on the tasks both attempted (difference in pass@1, a
  paired bootstrap interval, an exact p-value, the smallest difference the runs could detect,
  one plain sentence).

Libraries: numpy draws the resamples (a seeded ``Generator``, so a report is the same every
time it is rebuilt); the beta quantiles of the Clopper-Pearson bounds are computed by hand
(importing scipy costs every report up to 1 s, and its OpenBLAS can spin forever when memory
is short; McNemar's exact test at p = 1/2 is a sum of binomial coefficients, by hand:
scipy.stats would cost 2 s more);
the power formula's normal quantiles come from the standard library's
``statistics.NormalDist``. The percentile bootstrap and the sign-flip test are written with
numpy rather than through ``scipy.stats.bootstrap`` /
``permutation_test``: they are a few vectorised lines each, and the edge cases below need
their own exact answers, which scipy's versions answer with NaN and a warning (a zero-width
bootstrap distribution) or not at all.

Edge cases, exactly (a bootstrap of identical values has zero width and would claim a
certainty the data cannot carry):

- every task has the same rate (all pass, none pass): the Clopper-Pearson interval with the
  tasks as the sample (``x = rate * N`` of ``N``; all of 64 pass gives [94.4%, 100%]);
- one task: the Clopper-Pearson interval of its ``c`` of ``n`` trials (one trial passed gives
  [2.5%, 100%]);
- paired, every task moved by the same amount (nothing moved, or 4 tasks that all flip): the
  difference is bounded with the exact interval of the share of tasks that moved that way
  (see :func:`paired_interval`), so 4 flips out of 4 give [-100, +20.5] points, not [-100,
  -100].
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

ALPHA = 0.05
"""Two-sided level of every interval (95%) and test."""
POWER = 0.8
"""The power :func:`min_detectable_difference` is computed for."""
RESAMPLES = 4000
"""Bootstrap resamples: the interval's end points move by well under 0.5 points between
seeds at 64 tasks."""
SEED = 20260101
"""The fixed seed of every bootstrap and Monte Carlo test: a report rebuilt from the same
folder shows the same interval."""
EXACT_CELLS = 2_000_000
"""The sign-flip test counts its exact distribution when the scaled sum of differences spans
at most this many values (68 tasks whose trial counts have an lcm up to about 14,000); beyond,
Monte Carlo."""
PERMUTATIONS = 20_000
"""Monte Carlo sign patterns (p-value resolution about 1/20,000, with the +1 correction)."""
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class TaskCount:
    """One task in one run: how many trials ran (had a result) and how many passed."""

    n: int
    c: int

    def __post_init__(self) -> None:
        if not 0 <= self.c <= self.n:
            raise ValueError(f"trials passed {self.c} must be between 0 and trials run {self.n}")

    @property
    def rate(self) -> float | None:
        """``c / n``; ``None`` for a task with no trial run."""
        return self.c / self.n if self.n else None

    @property
    def flaky(self) -> bool:
        return 0 < self.c < self.n


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str
    """``bootstrap`` (percentile, tasks resampled) or ``exact`` (Clopper-Pearson: an edge
    case, see the module docstring)."""


@dataclass(frozen=True)
class Estimate:
    """pass@1 over one denominator."""

    value: float
    se: float
    """Standard error: the tasks' sample standard deviation / sqrt(N); with one task, the
    binomial ``sqrt(r (1 - r) / n)`` of its trials."""
    interval: Interval
    tasks: int
    """The denominator N (tasks never run are in it, as 0)."""
    attempted: int
    """Of those, the tasks with at least one trial."""


@dataclass(frozen=True)
class PassK:
    """pass@k and pass^k for one k, over the tasks with at least k trials."""

    k: int
    pass_at_k: float
    pass_hat_k: float
    tasks: int
    """Tasks with at least ``k`` trials (the average is over these)."""
    short: int
    """Tasks attempted with fewer than ``k`` trials: left out of this k, not counted as 0
    (their pass@k is unknown, not failed)."""


def flaky_tasks(counts: Mapping[str, TaskCount]) -> list[str]:
    """The tasks that passed some trials and failed others, by id."""
    return sorted(tid for tid, count in counts.items() if count.flaky)


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (modified Lentz, as in Numerical Recipes' ``betacf``), to about 1e-15.

    Pure Python on purpose: the interval used to come from scipy.special, and importing
    scipy in a run's last step loads its own OpenBLAS, whose start-up retries a failed
    ``mmap`` forever. Under ``ulimit -v 330000`` the runner, every task already recorded, spun
    at 100% CPU in that import until it was killed (issue 33, item 6)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below the mean
        return 1.0 - _betainc(b, a, 1.0 - x)
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return math.exp(log_front) * h / a


def _betaincinv(a: float, b: float, q: float) -> float:
    """The ``x`` with I_x(a, b) = q, by bisection (I is increasing in x): 200 halvings of
    [0, 1] reach the spacing of doubles near any answer."""
    low, high = 0.0, 1.0
    for _ in range(200):
        mid = (low + high) / 2
        if mid in (low, high):
            break
        if _betainc(a, b, mid) < q:
            low = mid
        else:
            high = mid
    return (low + high) / 2


@lru_cache(maxsize=4096)
def clopper_pearson(x: float, m: float, alpha: float = ALPHA) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a proportion ``x`` of ``m``, from beta
    quantiles (a non-integer ``x`` interpolates, for equal fractional rates). The quantiles
    are computed here, without scipy: see :func:`_betainc` for why."""
    if m <= 0:
        return 0.0, 1.0
    low = 0.0 if x <= 0 else _betaincinv(x, m - x + 1, alpha / 2)
    high = 1.0 if x >= m else _betaincinv(x + 1, m - x, 1 - alpha / 2)
    return low, high


@lru_cache(maxsize=16)
def _resample_weights(size: int, resamples: int, seed: int) -> np.ndarray:
    """Row r: how often each of ``size`` tasks is drawn in resample r, over ``size``
    (multinomial counts, the same thing as drawing indices with replacement). Kept per
    (size, resamples, seed): the seed is fixed, so every call would draw the same matrix."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(size, np.full(size, 1.0 / size), size=resamples)
    weights: np.ndarray = counts / size
    weights.flags.writeable = False
    return weights


def bootstrap_means(values: np.ndarray, *, resamples: int = RESAMPLES,
                    seed: int = SEED) -> np.ndarray:
    """The means of ``resamples`` resamples (with replacement) of ``values`` along its last
    axis: one matrix product (a 2-D ``values`` gives one row of means per row)."""
    means: np.ndarray = values @ _resample_weights(values.shape[-1], resamples, seed).T
    return means


def _percentile(means: np.ndarray, alpha: float) -> tuple[float, float]:
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def bootstrap_intervals(values: np.ndarray, *, alpha: float = ALPHA,
                        resamples: int = RESAMPLES, seed: int = SEED
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The percentile bootstrap intervals of the mean of each row of ``values`` (one row per
    run, one column per task), all in one matrix product: what :func:`pass_at_1` computes for
    one run, vectorised for simulations over many."""
    means = bootstrap_means(np.atleast_2d(values), resamples=resamples, seed=seed)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2], axis=-1)
    return low, high


def pass_at_1(counts: Sequence[TaskCount], total: int | None = None, *, alpha: float = ALPHA,
              resamples: int = RESAMPLES, seed: int = SEED) -> Estimate:
    """pass@1 over ``total`` tasks (default: the attempted ones); tasks of ``total`` not in
    ``counts``, or with no trial, count as 0. Raises ``ValueError`` when ``total`` is smaller
    than the tasks attempted or there are no tasks at all."""
    attempted = [c for c in counts if c.n > 0]
    size = len(attempted) if total is None else total
    if size < len(attempted):
        raise ValueError(f"denominator {size} is smaller than the {len(attempted)} tasks "
                         "attempted")
    if size == 0:
        raise ValueError("pass@1 of no tasks")
    values = np.zeros(size)
    values[:len(attempted)] = [c.c / c.n for c in attempted]
    value = float(values.mean())
    if size == 1:
        one = attempted[0] if attempted else TaskCount(1, 0)
        low, high = clopper_pearson(one.c, one.n, alpha)
        se = math.sqrt(value * (1 - value) / one.n)
        return Estimate(value, se, Interval(low, high, "exact"), 1, len(attempted))
    if np.ptp(values) < _TOLERANCE:
        low, high = clopper_pearson(value * size, size, alpha)
        return Estimate(value, 0.0, Interval(low, high, "exact"), size, len(attempted))
    se = float(values.std(ddof=1) / math.sqrt(size))
    lows, highs = bootstrap_intervals(values, alpha=alpha, resamples=resamples, seed=seed)
    low, high = float(lows[0]), float(highs[0])
    return Estimate(value, se, Interval(low, high, "bootstrap"), size, len(attempted))


def pass_at_k_task(n: int, c: int, k: int) -> float:
    """The unbiased estimate of "at least one of k trials passes" from c of n (k <= n)."""
    _check_k(n, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k_task(n: int, c: int, k: int) -> float:
    """The unbiased estimate of "all k trials pass" from c of n (k <= n)."""
    _check_k(n, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_k(n: int, k: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"k = {k} needs 1 <= k <= n = {n} trials")


def pass_k_table(counts: Sequence[TaskCount], max_k: int | None = None) -> list[PassK]:
    """pass@k and pass^k for k = 1 .. ``max_k`` (default: the most trials any task has).
    Each k averages over the tasks with at least k trials; the others are counted in
    :attr:`PassK.short` (an interrupted or budget-cut run has tasks with fewer trials)."""
    attempted = [c for c in counts if c.n > 0]
    top = max((c.n for c in attempted), default=0) if max_k is None else max_k
    table = []
    for k in range(1, top + 1):
        eligible = [c for c in attempted if c.n >= k]
        if not eligible:
            break
        table.append(PassK(
            k, sum(pass_at_k_task(c.n, c.c, k) for c in eligible) / len(eligible),
            sum(pass_hat_k_task(c.n, c.c, k) for c in eligible) / len(eligible),
            len(eligible), len(attempted) - len(eligible)))
    return table


# --- two runs ---------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def mcnemar_p(b_better: int, a_better: int) -> float:
    """McNemar's exact test: of the tasks whose single verdict differs, how surprising the
    split is if either run was equally likely to win each (two-sided binomial, p = 1/2)."""
    if b_better + a_better == 0:
        return 1.0
    # By hand, exactly what scipy.stats.binomtest(b, n, 0.5) answers (tests/report compare the
    # two): at p = 1/2 the distribution is symmetric, so the two-sided p-value is twice the
    # smaller tail, capped at 1. Importing scipy.stats for it cost every compare 1.6-2.5 s.
    n, low = b_better + a_better, min(b_better, a_better)
    tail = float(Fraction(sum(math.comb(n, x) for x in range(low + 1)), 2 ** n))
    return min(1.0, 2 * tail)


def _random_signs(m: int, draws: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(draws, (m + 7) // 8), dtype=np.uint8)
    signs: np.ndarray = np.unpackbits(raw, axis=1)[:, :m].astype(float) * 2 - 1
    return signs


def _sign_flip_distribution(steps: np.ndarray) -> np.ndarray:
    """The exact null distribution of ``sum(s_i * steps_i)`` over all ``2**m`` equally likely
    sign patterns, for integer ``steps``: index ``S + t`` holds P(sum = t), S = sum(steps).
    Counted, not listed: the r tasks that differ by the same step a sum to ``a (2 X - r)``
    with X binomial(r, 1/2), and the distinct steps (few: a rate moves by multiples of
    1/lcm of the trial counts) are convolved together."""
    dist = np.ones(1)
    values, repeats = np.unique(steps, return_counts=True)
    for a, r in zip(values.tolist(), repeats.tolist(), strict=True):
        kernel = np.zeros(2 * a * r + 1)
        kernel[::2 * a] = [math.comb(r, x) / 2 ** r for x in range(r + 1)]
        if len(dist) * len(kernel) <= 5_000_000:
            dist = np.convolve(dist, kernel)
        else:  # long supports: FFT, whose rounding noise (~1e-16) is clipped
            from scipy import signal

            dist = np.clip(signal.fftconvolve(dist, kernel), 0.0, None)
    return dist


def sign_flip_p(differences: Sequence[float] | np.ndarray, scale: int = 1, *,
                seed: int = SEED, draws: int = PERMUTATIONS) -> tuple[float, str]:
    """The paired sign-flip permutation test over tasks (two-sided, statistic |sum of the
    differences|): if the runs are exchangeable, each task's difference is as likely
    negated. ``scale`` makes the differences whole numbers (the lcm of the trial counts: a
    difference of pass rates ``c_b/n_b - c_a/n_a`` times it is an integer), and then the
    p-value is exact over all ``2**m`` sign patterns of the m tasks that differ, counted by
    :func:`_sign_flip_distribution`. When the scaled sum would be too large to count
    (more than :data:`EXACT_CELLS` cells: trial counts with a huge lcm), or the differences
    are not multiples of ``1/scale``, ``draws`` random patterns from a fixed seed are used,
    with the +1 correction that keeps a Monte Carlo p-value valid. Returns the p-value and
    the method's name."""
    d = np.asarray(differences, dtype=float)
    magnitudes = np.abs(d[np.abs(d) > _TOLERANCE])
    m = len(magnitudes)
    if m == 0:
        return 1.0, "sign-flip permutation test (exact; no task differs)"
    steps = np.rint(magnitudes * scale)
    whole = bool(np.all(np.abs(steps - magnitudes * scale) < 1e-6))
    if whole and 2 * steps.sum() + 1 <= EXACT_CELLS:
        dist = _sign_flip_distribution(steps.astype(int))
        total = int(steps.sum())
        observed = abs(round(float(d.sum()) * scale))
        values = np.abs(np.arange(-total, total + 1))
        p = min(1.0, float(dist[values >= observed].sum()))
        return p, f"sign-flip permutation test (exact over all 2^{m} sign patterns)"
    observed_sum = abs(float(d.sum())) - _TOLERANCE
    totals = np.abs(_random_signs(m, draws, seed) @ magnitudes)
    p = (1 + int(np.sum(totals >= observed_sum))) / (draws + 1)
    return p, f"sign-flip permutation test (Monte Carlo, {draws:,} sign patterns, seed {seed})"


def fewest_to_reject(alpha: float = ALPHA) -> int:
    """The fewest tasks that must differ (all in one direction) for the exact tests here to
    reach p < alpha: the most extreme outcome of m differing tasks has p = 2 / 2**m (6 at
    0.05)."""
    m = 1
    while 2.0 / 2 ** m >= alpha:
        m += 1
    return m


def min_detectable_difference(tasks: int, trials_a: float, trials_b: float,
                              trial_variance: float, *, alpha: float = ALPHA,
                              power: float = POWER, step: float | None = None) -> float | None:
    """The smallest true difference in pass@1 (a fraction) that two runs of ``tasks`` tasks
    with ``trials_a`` and ``trials_b`` trials each would detect with probability ``power`` at
    level ``alpha``; ``None`` when no outcome at all could be significant (fewer tasks than
    :func:`fewest_to_reject`).

    Method: the normal approximation of the paired test. A task's difference of rates has
    variance ``v (1/n_a + 1/n_b)`` under the null, where ``v`` (``trial_variance``) is the
    mean over tasks of ``p (1 - p)``, the trial-to-trial variance of one task (between-task
    spread cancels in a paired design). Then ``delta = (z_{1-alpha/2} + z_power) *
    sqrt(v (1/n_a + 1/n_b) / N)``. Two runs of one kit with one trial each disagree on a
    share ``2 v`` of the tasks, so ``v`` is half the "flip rate" people quote. The result is
    never below the floor set by the exact test's discreteness: :func:`fewest_to_reject`
    tasks moving by the smallest step a rate can move (``step``, default ``1 / lcm(n_a,
    n_b)``), which is what a run with no trial noise at all needs."""
    needed = fewest_to_reject(alpha)
    if tasks < needed:
        return None
    if step is None:
        step = 1.0 / math.lcm(max(1, round(trials_a)), max(1, round(trials_b)))
    floor = needed * step / tasks
    z = _z(alpha, power)
    normal = z * math.sqrt(max(trial_variance, 0.0) * (1 / trials_a + 1 / trials_b) / tasks)
    return min(1.0, max(normal, floor))


@lru_cache(maxsize=64)
def _z(alpha: float, power: float) -> float:
    normal = statistics.NormalDist()
    return normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)


def estimate_trial_variance(a: Sequence[TaskCount], b: Sequence[TaskCount]) -> float:
    """``v`` (see :func:`min_detectable_difference`) estimated from two paired runs: from the
    trials within each task where some task has two or more (the unbiased ``c (n - c) /
    (n (n - 1))``, averaged over every task of both runs with ``n >= 2``); with one trial
    everywhere, from the disagreements, ``E[d**2] = 2 v`` under the null (an estimate that a
    real difference inflates, so the detectable difference errs large)."""
    within = [x.c * (x.n - x.c) / (x.n * (x.n - 1)) for x in (*a, *b) if x.n >= 2]
    if within:
        return sum(within) / len(within)
    if not a:
        return 0.0
    return sum(((y.c / y.n) - (x.c / x.n)) ** 2 for x, y in zip(a, b, strict=True)) \
        / (2 * len(a))


def paired_interval(d: np.ndarray, *, alpha: float = ALPHA, resamples: int = RESAMPLES,
                    seed: int = SEED) -> Interval:
    """The 95% interval of the mean of the per-task differences: a percentile bootstrap over
    tasks. When every task moved by the same ``delta`` the bootstrap has zero width, so
    exactly: with the share ``s`` of tasks moving that way bounded below by Clopper-Pearson
    (all N of N: ``(alpha/2)**(1/N)``), the difference lies in ``[delta (2 s - 1), delta]``;
    when nothing moved, within plus or minus the exact upper bound of the share of tasks that
    could differ (0 of N)."""
    size = len(d)
    if size == 0:
        return Interval(-1.0, 1.0, "exact")
    if np.ptp(d) < _TOLERANCE:
        delta = float(d.mean())
        if abs(delta) < _TOLERANCE:
            bound = clopper_pearson(0, size, alpha)[1]
            return Interval(-bound, bound, "exact")
        share = clopper_pearson(size, size, alpha)[0]
        ends = sorted((delta * (2 * share - 1), delta))
        return Interval(ends[0], ends[1], "exact")
    low, high = _percentile(bootstrap_means(d, resamples=resamples, seed=seed), alpha)
    return Interval(low, high, "bootstrap")


@dataclass(frozen=True)
class Paired:
    """Two runs on the tasks both attempted (differences are B - A, as fractions)."""

    tasks: int
    trials_a: tuple[int, int]
    """Fewest and most trials a task has in run A."""
    trials_b: tuple[int, int]
    pass_a: float
    pass_b: float
    difference: float
    interval: Interval
    p_value: float
    test: str
    b_better: int
    """Tasks whose pass rate is higher in B."""
    a_better: int
    trial_variance: float
    detectable: float | None
    """The smallest difference these runs could detect at :data:`POWER` (``None``: none)."""
    alpha: float = ALPHA

    @property
    def significant(self) -> bool:
        return self.tasks > 0 and self.p_value < self.alpha

    @property
    def regression(self) -> bool:
        """B is significantly worse than A (what ``--fail-on-regression`` fails on)."""
        return self.significant and self.difference < 0

    @property
    def sentence(self) -> str:
        return describe(self)


def _trials_words(a: tuple[int, int], b: tuple[int, int]) -> str:
    def one(span: tuple[int, int]) -> str:
        return str(span[0]) if span[0] == span[1] else f"{span[0]}-{span[1]}"

    if a == b:
        return f"{one(a)} trial{'' if a == (1, 1) else 's'}"
    return f"{one(a)} and {one(b)} trials"


def points(value: float) -> str:
    """A fraction as points with one decimal (0.062 -> ``6.2``)."""
    return f"{value * 100:.1f}"


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3g}"


def describe(c: Paired) -> str:
    """The one plain sentence: which run is better and by how much when the test says so,
    otherwise how large a difference would have to be to show."""
    if c.tasks == 0:
        return "nothing to compare: no task was attempted by both runs"
    if c.significant:
        side = "better" if c.difference > 0 else "worse"
        return (f"B is {side} by {points(abs(c.difference))} points "
                f"[{points(c.interval.low)}, {points(c.interval.high)}], {p_text(c.p_value)}")
    size = f"{c.tasks} task{'s' if c.tasks != 1 else ''} and " \
        f"{_trials_words(c.trials_a, c.trials_b)}"
    if c.detectable is None:
        return (f"no difference detectable: with {size} no outcome could be significant "
                f"({p_text(c.p_value)}; an exact test needs at least "
                f"{fewest_to_reject(c.alpha)} tasks that differ, all one way)")
    return (f"no difference detectable: with {size} the runs would have to differ by about "
            f"{c.detectable * 100:.0f} points ({p_text(c.p_value)})")


def compare_counts(a: Sequence[TaskCount], b: Sequence[TaskCount], *, alpha: float = ALPHA,
                   resamples: int = RESAMPLES, seed: int = SEED) -> Paired:
    """The paired comparison of run A and run B: ``a[i]`` and ``b[i]`` are the same task,
    attempted by both (``n >= 1``; the caller keeps tasks of only one run apart).

    The test: McNemar's exact test when every task has exactly one trial in both runs (the
    differences are then -1, 0 or +1 and the test is exact on the disagreeing tasks);
    otherwise the sign-flip permutation test over tasks on the differences of pass rates
    (:func:`sign_flip_p`). Both answer "could the per-task differences be noise around 0?"
    without assuming a distribution; both need six tasks that differ all one way to reach
    p < 0.05, so four tasks that all flip give p = 0.125."""
    if len(a) != len(b):
        raise ValueError("the two runs must list the same tasks")
    if any(x.n == 0 for x in (*a, *b)):
        raise ValueError("every paired task needs at least one trial in both runs")
    if not a:
        return Paired(0, (0, 0), (0, 0), 0.0, 0.0, 0.0, Interval(-1.0, 1.0, "exact"), 1.0,
                      "none", 0, 0, 0.0, None, alpha)
    ra = np.array([x.c / x.n for x in a])
    rb = np.array([y.c / y.n for y in b])
    d = rb - ra
    b_better, a_better = int(np.sum(d > _TOLERANCE)), int(np.sum(d < -_TOLERANCE))
    if all(x.n == 1 for x in (*a, *b)):
        p, test = mcnemar_p(b_better, a_better), "McNemar's exact test"
    else:
        p, test = sign_flip_p(d, math.lcm(*{x.n for x in (*a, *b)}), seed=seed)
    variance = estimate_trial_variance(a, b)
    n_a = len(a) / sum(1 / x.n for x in a)  # harmonic means: what 1/n averages to
    n_b = len(b) / sum(1 / y.n for y in b)
    step = 1.0 / math.lcm(*{x.n for x in (*a, *b)})
    return Paired(
        len(a), (min(x.n for x in a), max(x.n for x in a)),
        (min(y.n for y in b), max(y.n for y in b)), float(ra.mean()), float(rb.mean()),
        float(d.mean()), paired_interval(d, alpha=alpha, resamples=resamples, seed=seed), p,
        test, b_better, a_better, variance,
        min_detectable_difference(len(a), n_a, n_b, variance, alpha=alpha, step=step), alpha)

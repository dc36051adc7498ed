"""The sequential paired comparison: B's trials run in rounds against run A, and a decision is
taken after each round. Pure (numpy and the standard library), no I/O: the runner, the reports
and ``plan``'s simulations all call :func:`analyse`, so a decision shown is the decision taken.

The data are two arrays of trial outcomes, ``a[task, round]`` and ``b[task, round]`` (1 pass,
0 fail, -1 not run). Round ``r`` of B is paired with trial ``r`` of A on the same task.

**The statistic.** Per task and round, the pair (A's trial, B's trial) is *discordant* when one
passed and the other failed. ``V`` counts the discordant pairs so far and ``U`` is B's wins
minus A's wins among them (McNemar's lead, over trials instead of tasks). If A and B are the
same kit, A's and B's trials of one task and round are exchangeable, so each discordant pair
is a fair coin, independent of everything else: given the ``V``s, ``U`` is a random walk of
fair +-1 steps, and its null distribution is *counted exactly* (a convolution per look; no
normal approximation).

**Label-blind pruning** (:data:`PRUNE_AFTER`): after a round, a task whose pooled trials (A's
and B's together, labels ignored) all passed or all failed, with at least two trials on each
side, gets no further round. Swapping the labels within any pair changes neither the pooled
outcomes nor which pairs are discordant, so the pruning, the information fractions and the
stopping times are functions of the label-swap orbit only; under the null the signs of the
discordant pairs stay fair coins given all of them. The test stays exact.

**The boundary**: a two-sided group-sequential boundary with the Kim-DeMets power-family
alpha-spending function ``alpha(t) = alpha * t**2`` (:data:`RHO`). At each look the boundary is
the smallest lead ``|U| >= b`` whose exact crossing probability (paths not stopped earlier)
keeps the total spent at most ``alpha(t)``; alpha left unspent by the discreteness carries
over. Why rho = 2: between Pocock's early spending (rho about 1), which stops big differences
soonest but loses power at the last look, and O'Brien-Fleming's (rho about 3), which keeps the
last look's power but rarely stops before it; simulated on a Spider2-DBT-like suite
(``spider2local plan``), rho = 2 gives the fixed 5-trial design's power at under half its
trials, rho = 3 costs about 4% more trials for no measurable power.
``t`` is the information fraction ``V / V_projected``, where ``V_projected`` adds to ``V``
the discordance the tasks still in play are expected to add in the remaining rounds,
estimated from their pooled (label-blind) pass rates; the last look spends what is left
(t = 1). The spending depends on the data only through label-blind quantities, so the
false-positive rate is at most alpha whatever the tasks' rates are
(tests/sequential/test_analysis.py checks it by simulation).

**Futility** (:data:`FUTILITY`): after a look that did not cross, the conditional power of
showing a difference of ``min_difference`` (either sign) by the last round is computed from
the normal approximation of ``U`` (a drift of ``min_difference * tasks`` per round, the
projected discordance as its variance, the last look's boundary at the z of the alpha not yet
spent); under 10% both ways, the run stops. Futility never rejects, so it never adds false
positives (a non-binding rule: the boundaries ignore it).

**The answer**: the difference in pass@1 over the paired trials (per task, B's rate minus A's
over the rounds it was in play; a pruned task differs by 0), a repeated confidence interval
(the estimate plus or minus the look's boundary in z units times its standard error, which
covers the difference at every look simultaneously with 95%), and the stage-wise adjusted
p-value (the null probability of crossing at an earlier look, or of a lead at least as large at
this one; a run that never crossed reports at least alpha, since every crossing counts as more
extreme than any non-crossing).
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

ALPHA = 0.05
"""Two-sided false-positive rate over all looks."""
FUTILITY = 0.10
"""Stop when the conditional power of showing ``min_difference`` is under this."""
MAX_ROUNDS = 6
"""Default rounds: one more than the fixed design's 5 trials, which is what pays for the
flaky tasks the label-blind pruning drops after two rounds (with 5 the sequential design's
power at 10 points falls about 2 points short of the fixed 5-trial design's; with 6 it is at
least as high, at under half the trials: docs/statistics.md)."""
MIN_DIFFERENCE = 0.05
PRUNE_AFTER = 2
"""A task is pruned only with at least this many trials on each side."""
RHO = 2.0
"""The exponent of the power-family spending function."""
SPENDING = "Kim-DeMets power family, rho = 2"
NOT_RUN = -1
_NORMAL = statistics.NormalDist()


class Decision(enum.StrEnum):
    B_BETTER = "b-better"
    B_WORSE = "b-worse"
    FUTILITY = "futility"
    """Even ``min_difference`` could no longer be shown within the rounds left."""
    NO_DIFFERENCE = "no-difference"
    """All rounds run (or no task left in play) and the boundary never crossed."""
    UNDECIDED = "undecided"
    """Rounds are still to run (or the run was stopped before deciding)."""

    @property
    def final(self) -> bool:
        return self is not Decision.UNDECIDED

    @property
    def significant(self) -> bool:
        return self in (Decision.B_BETTER, Decision.B_WORSE)


@dataclass(frozen=True)
class Design:
    max_rounds: int = MAX_ROUNDS
    min_difference: float = MIN_DIFFERENCE
    alpha: float = ALPHA
    futility: float = FUTILITY

    def __post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError("max rounds must be at least 1")
        if not 0 <= self.min_difference <= 1:
            raise ValueError("the minimum difference must be in [0, 1] (0: no futility stop)")


@dataclass(frozen=True)
class Look:
    """The analysis after one complete round."""

    round: int
    in_play: int
    """Tasks that ran this round."""
    pruned: int
    """Tasks pruned after this round (label-blind)."""
    discordant: int
    """V: discordant pairs so far."""
    lead: int
    """U: B's wins minus A's wins among them."""
    information: float
    """t, the information fraction the alpha is spent at."""
    boundary: int
    """Cross when ``|U| >= boundary`` (``discordant + 1``: no crossing possible)."""
    spent: float
    """Alpha actually spent through this look (exact crossing probabilities)."""
    conditional_power: float | None
    """Of showing ``min_difference`` by the last round (the larger of the two signs); ``None``
    at a crossing or the last look."""


@dataclass(frozen=True)
class Outcome:
    """Where a sequential comparison stands, from its trials alone."""

    design: Design
    decision: Decision
    looks: tuple[Look, ...]
    tasks: int
    next_round: int | None
    """The round to run next (1-based), ``None`` when decided."""
    next_tasks: tuple[int, ...]
    """Indices of the tasks in play for ``next_round`` (empty when decided)."""
    trials_b: int
    """B's trials the analysis used (the cost)."""
    difference: float
    interval: tuple[float, float]
    """The repeated confidence interval of the difference, at the last look."""
    p_value: float
    """Stage-wise adjusted p-value at the last look (1 before any look)."""

    @property
    def decided_round(self) -> int | None:
        return self.looks[-1].round if self.decision.final and self.looks else None

    @property
    def fixed_trials(self) -> int:
        """B's trials of the fixed design of about the same power: one trial fewer per task
        than the rounds allowed (what ``plan`` finds: at most 6 rounds match 5 fixed trials,
        docs/statistics.md)."""
        return self.tasks * max(1, self.design.max_rounds - 1)


def spending(t: float, alpha: float = ALPHA) -> float:
    """The power-family spending function: cumulative alpha at information fraction ``t``."""
    return float(alpha * min(1.0, max(t, 0.0)) ** RHO)


@lru_cache(maxsize=1024)
def _steps(m: int) -> np.ndarray:
    """P(U increment = 2x - m) for x = 0..m, laid out on the grid -m..m (odd cells 0)."""
    kernel = np.zeros(2 * m + 1)
    kernel[::2] = [math.comb(m, x) / 2 ** m for x in range(m + 1)]
    kernel.flags.writeable = False
    return kernel


class _Walk:
    """The exact null distribution of U over paths that have not crossed yet."""

    def __init__(self) -> None:
        self.mass = np.ones(1)  # cells -V..V
        self.spent = 0.0

    @property
    def size(self) -> int:
        return (len(self.mass) - 1) // 2

    def add(self, m: int) -> None:
        if m > 0:
            self.mass = np.convolve(self.mass, _steps(m))

    def tail(self, lead: int) -> float:
        """P(not crossed before and |U| >= lead)."""
        v = self.size
        if lead > v:
            return 0.0
        lead = max(lead, 0)
        return float(self.mass[: v - lead + 1].sum() + self.mass[v + lead:].sum()) \
            if lead > 0 else float(self.mass.sum())

    def boundary(self, allowed: float) -> int:
        """The smallest b >= 1 with P(|U| >= b) <= allowed; its mass is then spent."""
        v = self.size
        # tails[b] for b = 0..v+1, from the two ends inwards (vectorised cumulative sums)
        folded = self.mass[v:].copy()
        folded[1:] += self.mass[:v][::-1]
        tails = np.concatenate([np.cumsum(folded[::-1])[::-1], [0.0]])
        ok = np.nonzero(tails[1:] <= allowed + 1e-15)[0]
        b = int(ok[0]) + 1
        self.spent += float(tails[b])
        if b <= v:
            self.mass[: v - b + 1] = 0.0
            self.mass[v + b:] = 0.0
        return b


def _pair_variance(passes: np.ndarray, trials: np.ndarray) -> np.ndarray:
    """Per task, the expected discordance of one more pair, ``2 p (1 - p)``, from the pooled
    rate shrunk towards 1/2 (one pseudo-pass and one pseudo-fail), so a task seen once is not
    taken as certain. Label-blind: pooled counts only."""
    p = (passes + 1.0) / (trials + 2.0)
    out: np.ndarray = 2.0 * p * (1.0 - p)
    return out


def analyse(a: np.ndarray, b: np.ndarray, design: Design = Design()) -> Outcome:
    """Replay the sequential comparison over the trials recorded so far.

    ``a`` and ``b`` are ``(tasks, rounds)`` integer arrays (1, 0, or :data:`NOT_RUN`); only the
    first ``design.max_rounds`` columns count. A round is analysed once every task in play has
    both trials of it; the first round still missing some is ``next_round`` (the tasks that
    need it are ``next_tasks``). Run A must have every trial a task in play needs (raises
    ``ValueError`` otherwise: the caller caps the rounds at A's trials). Trials of a task
    after it was pruned, or after the decision, are ignored: the replay is the same whatever
    extra trials exist."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError("a and b must be (tasks, rounds) arrays over the same tasks")
    tasks = a.shape[0]
    k_max = design.max_rounds

    def column(x: np.ndarray, r: int) -> np.ndarray:
        return x[:, r] if r < x.shape[1] else np.full(tasks, NOT_RUN)

    play = np.ones(tasks, dtype=bool)
    pooled_pass = np.zeros(tasks)
    pooled_trials = np.zeros(tasks)
    diff_sum = np.zeros(tasks)  # per task: sum over its rounds of (b - a)
    disc_sum = np.zeros(tasks)  # per task: discordant pairs
    rounds_in = np.zeros(tasks)
    walk = _Walk()
    looks: list[Look] = []
    trials_b = 0
    t_prev = 0.0
    lead = 0
    decision = Decision.UNDECIDED
    next_round: int | None = 1 if tasks else None
    z_crit = math.inf
    for r in range(k_max):
        ca, cb = column(a, r), column(b, r)
        if np.any(ca[play] == NOT_RUN):
            raise ValueError(f"run A has no trial {r + 1} of a task still in play")
        if np.any(cb[play] == NOT_RUN):
            next_round = r + 1
            break
        xa, xb = ca[play], cb[play]
        in_play = int(play.sum())
        trials_b += in_play
        d = xb - xa
        lead += int(d.sum())
        walk.add(int(np.count_nonzero(d)))
        diff_sum[play] += d
        disc_sum[play] += d != 0
        rounds_in[play] += 1
        pooled_pass[play] += xa + xb
        pooled_trials[play] += 2
        # label-blind pruning: pooled all-pass or all-fail, at least PRUNE_AFTER per side
        same = (pooled_pass == 0) | (pooled_pass == pooled_trials)
        prune = play & same & (rounds_in >= PRUNE_AFTER)
        play &= ~prune
        rounds_left = k_max - r - 1 if play.any() else 0
        future = rounds_left * float(
            _pair_variance(pooled_pass[play], pooled_trials[play]).sum())
        v = walk.size
        t = 1.0 if rounds_left == 0 else max(t_prev, min(1.0, v / (v + future)))
        t_prev = t
        bound = walk.boundary(max(0.0, spending(t, design.alpha) - walk.spent))
        z_crit = bound / math.sqrt(v) if 0 < bound <= v else math.inf
        power: float | None = None
        if abs(lead) >= bound:
            decision = Decision.B_BETTER if lead > 0 else Decision.B_WORSE
        elif rounds_left == 0:
            decision = Decision.NO_DIFFERENCE
        elif design.min_difference > 0:
            power = _conditional_power(lead, v, future, rounds_left, tasks, design, walk.spent)
            if power < design.futility:
                decision = Decision.FUTILITY
        looks.append(Look(r + 1, in_play, int(prune.sum()), v, lead, t, bound, walk.spent,
                          power))
        next_round = None if decision.final else r + 2
        if decision.final:
            break
    next_tasks = tuple(int(i) for i in np.nonzero(play)[0]) if next_round else ()
    difference, interval = _estimate(diff_sum, disc_sum, rounds_in, tasks, z_crit)
    p_value = _adjusted_p(looks, walk, decision, design.alpha)
    return Outcome(design, decision, tuple(looks), tasks, next_round, next_tasks, trials_b,
                   difference, interval, p_value)


def _conditional_power(lead: int, v: int, future: float, rounds_left: int, tasks: int,
                       design: Design, spent: float) -> float:
    """P(|U| reaches the last look's boundary with the sign of a true ``min_difference``),
    normal approximation, the larger of the two signs."""
    drift = design.min_difference * tasks * rounds_left
    remaining = max(design.alpha - spent, 1e-12)
    c = _NORMAL.inv_cdf(1 - remaining / 2)
    sd = math.sqrt(future)
    final = c * math.sqrt(v + future)
    up = 1 - _NORMAL.cdf((final - lead - drift) / sd)
    down = _NORMAL.cdf((-final - lead + drift) / sd)
    return max(up, down)


def _estimate(diff_sum: np.ndarray, disc_sum: np.ndarray, rounds_in: np.ndarray, tasks: int,
              z_crit: float) -> tuple[float, tuple[float, float]]:
    seen = rounds_in > 0
    if not seen.any():
        return 0.0, (-1.0, 1.0)
    n = rounds_in[seen]
    difference = float((diff_sum[seen] / n).sum() / tasks)
    se = math.sqrt(float((disc_sum[seen] / n / n).sum())) / tasks
    if not math.isfinite(z_crit) or se == 0.0:
        return difference, (-1.0, 1.0)
    return difference, (max(-1.0, difference - z_crit * se), min(1.0, difference + z_crit * se))


def _adjusted_p(looks: Sequence[Look], walk: _Walk, decision: Decision, alpha: float) -> float:
    """Stage-wise ordering. ``walk`` has had the last look's crossing region removed, so the
    probability of a lead at least as large at the last look is recomputed from the spent
    alpha: at a crossing, the earlier looks' alpha plus the exact tail beyond ``|U|``."""
    if not looks:
        return 1.0
    last = looks[-1]
    earlier = looks[-2].spent if len(looks) > 1 else 0.0
    if decision.significant:
        # the mass removed at this look was P(|U| >= boundary); restore the tail beyond |U|
        return min(1.0, earlier + _tail_at(looks, abs(last.lead)))
    return min(1.0, max(alpha, earlier + walk.tail(abs(last.lead))))


def _tail_at(looks: Sequence[Look], lead: int) -> float:
    """P(no crossing before the last look and |U_last| >= lead), recomputed from the looks'
    discordant counts and boundaries (the walk itself has the crossing cells removed)."""
    walk = _Walk()
    previous = 0
    for look in looks[:-1]:
        walk.add(look.discordant - previous)
        previous = look.discordant
        v = walk.size
        b = look.boundary
        if b <= v:
            walk.mass[: v - b + 1] = 0.0
            walk.mass[v + b:] = 0.0
    walk.add(looks[-1].discordant - previous)
    return walk.tail(lead)

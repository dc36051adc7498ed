"""The headline's wording, once: the terminal, the markdown and the HTML say the same sentences.

Every sentence names its denominator, because "x% solved" means nothing without it (README,
"how to report a score").
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

from spider2local.report.stats import Estimate
from spider2local.report.summary import Headline, Rates, ReplaySummary, RunReport
from spider2local.sequential.record import SequentialRecord

_K = TypeVar("_K", bound=Hashable)


def pct(part: int, whole: int) -> str:
    ratio = Rates.ratio(part, whole)
    return f"{part}/{whole} ({ratio:.1%})" if ratio is not None else f"{part}/{whole}"


def money(value: float | None) -> str:
    return "-" if value is None else f"${value:.2f}"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def run_line(report: RunReport) -> str:
    command = report.agent_command
    if command is not None:
        flat = " ".join(command.split())
        command = repr(flat if len(flat) <= 80 else flat[:79] + "…")
    apis = "+".join(report.agent_apis) if command is not None else None
    who = ", ".join(f"{k} {v}" for k, v in (("agent", report.agent), ("command", command),
                                            ("apis", apis), ("model", report.model)) if v)
    state = "; interrupted" if report.interrupted else ""
    seal = ", UNSEALED" if report.unsealed else ""
    trials = f", {report.trials} trials per task" if report.trials > 1 else ""
    return f"run {report.run_id} ({who + ', ' if who else ''}isolation: {report.isolation}" \
           f"{seal}{trials}{state})"


def percent(value: float) -> str:
    return f"{value:.1%}"


def interval_text(e: Estimate) -> str:
    """``4.4% [1.2%, 9.8%]`` (``exact`` after it when an edge case made it exact)."""
    mark = " exact" if e.interval.method == "exact" else ""
    return f"{percent(e.value)} [{percent(e.interval.low)}, {percent(e.interval.high)}]{mark}"


def _groups(pairs: Sequence[tuple[str, _K]]) -> list[tuple[_K, list[str]]]:
    """Labels with the same key together, in the order each key first appears: a number is
    said once, followed by every denominator it holds for."""
    groups: dict[_K, list[str]] = {}
    for label, key in pairs:
        groups.setdefault(key, []).append(label)
    return list(groups.items())


def _labels(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def shares(part: int, pairs: Sequence[tuple[str, int]]) -> str:
    """``3/6 (50.0%) of attempted; 3/12 (25.0%) of all selected``, and ``4/4 (100.0%) of
    attempted and of all selected`` when the denominators are one number."""
    return "; ".join(f"{pct(part, n)} {_labels(labels)}" for n, labels in _groups(pairs))


def _methods(estimates: Sequence[Estimate]) -> tuple[str, bool]:
    """How the intervals were made, said once; and whether each exact one must be marked
    (only when some are not)."""
    methods = {e.interval.method for e in estimates}
    if methods == {"exact"}:
        return "95% intervals, exact: Clopper-Pearson", False
    if "exact" in methods:
        return "95% intervals, bootstrap over tasks; exact where marked", True
    return "95% intervals, bootstrap over tasks", False


def _interval(e: Estimate, mark: bool) -> str:
    return interval_text(e) if mark else \
        f"{percent(e.value)} [{percent(e.interval.low)}, {percent(e.interval.high)}]"


def pass_at_1_line(report: RunReport) -> str | None:
    """``pass@1 4.4% [1.2%, 9.8%] official; 4.7% [1.3%, 13.1%] with gold and runnable ...``:
    each distinct estimate once with the denominators it holds for, its 95% interval, then the
    standard error of the first. With one trial per task the passed line says all of this."""
    found = report.stats.pass_at_1
    if not found:
        return None
    groups = _groups(list(found))
    methods, mark = _methods([e for e, _ in groups])
    parts = [f"{_interval(e, mark)} {_labels(labels)}" for e, labels in groups]
    first, first_labels = groups[0]
    how = "mean over tasks of trials passed / trials run; " if report.trials > 1 else ""
    return (f"pass@1 {'; '.join(parts)} ({how}{methods}; standard error "
            f"{first.se * 100:.1f} points {first_labels[0]})")


def flaky_line(report: RunReport) -> str | None:
    if report.trials < 2:
        return None
    flaky = report.stats.flaky
    if not flaky:
        return "flaky tasks: none (every task passed all its trials or none)"
    return f"flaky tasks ({len(flaky)}, passed some trials and failed others): " \
           + ", ".join(flaky)


def trials_line(report: RunReport) -> str | None:
    if report.trials < 2:
        return None
    s = report.stats
    return f"trials: {s.trials_run} run of {s.trials_planned} planned " \
           f"({report.trials} per selected task)"


PASS_K_HEADERS = ("k", "pass@k", "pass^k", "tasks")


def pass_k_cells(report: RunReport) -> list[tuple[str, ...]]:
    """The pass@k / pass^k table (only when K > 1): over the tasks attempted with at least k
    trials (those with fewer are left out of that k and counted in the last column)."""
    if report.trials < 2:
        return []
    return [(str(row.k), percent(row.pass_at_k), percent(row.pass_hat_k),
             f"{row.tasks}" + (f" ({row.short} with fewer trials left out)" if row.short
                               else "")) for row in report.stats.pass_k]


RATE_HEADERS = ("task", "passed", "rate", "flaky")


def rate_cells(report: RunReport) -> list[tuple[str, ...]]:
    """Per task: trials passed / trials run (only when K > 1)."""
    if report.trials < 2:
        return []
    return [(t.task_id, f"{t.passed}/{t.run}" + (f" of {t.planned}" if t.run < t.planned
                                                  else ""),
             "-" if t.rate is None else percent(t.rate), "yes" if t.flaky else "")
            for t in report.stats.tasks]


def passed_line(report: RunReport) -> str:
    """``passed 3/68 (4.4% [1.2%, 9.8%]) official; 3/64 (4.7% [..]) with gold and runnable;
    3/10 (30.0% [..]) attempted and selected (95% intervals, ...)``: each ratio once, with its
    interval, followed by every denominator it holds for (one trial per task)."""
    h = report.headline
    found = dict(report.stats.pass_at_1)
    groups = _groups([*h.denominators(), ("selected", h.selected)])
    # a group's interval is its first estimated denominator's: equal counts, equal intervals
    estimates = [next((found[x] for x in labels if x in found), None) for _, labels in groups]
    methods, mark = _methods([e for e in estimates if e is not None])
    parts = []
    for (n, labels), estimate in zip(groups, estimates, strict=True):
        if not n:
            parts.append(f"{h.passed}/{n} {_labels(labels)}")
            continue
        rate = percent(h.passed / n) if estimate is None else _interval(estimate, mark)
        parts.append(f"{h.passed}/{n} ({rate}) {_labels(labels)}")
    tail = f" ({methods})" if any(e is not None for e in estimates) else ""
    return "passed " + "; ".join(parts) + tail + lenient_phrase(h)


def lenient_phrase(h: Headline) -> str:
    """``; of which 2 lenient (...)`` after the pass count, once the passes carry the
    row-aligned check (docs/scoring.md); the official count stays the headline."""
    if not h.row_checked_passes and not h.lenient_passes:
        return ""
    return (f"; of which {h.lenient_passes} lenient (official passes whose rows do not line "
            "up: row_aligned false)")


def classes_line(h: Headline) -> str | None:
    """``failure classes: table_missing 5, wrong_values 2`` (docs/scoring.md)."""
    if not h.failure_classes:
        return None
    return "failure classes: " + ", ".join(f"{name} {count}"
                                           for name, count in h.failure_classes.items())


def cut_line(h: Headline) -> str | None:
    """What attempts cut by an interrupt spent, apart from the finished trials' usage (their
    cost is no trial's) and then in the run's total."""
    if not h.cut_attempts:
        return None
    spent = "an unknown cost" if h.cut_cost_usd is None else money(h.cut_cost_usd)
    total = "" if h.cut_cost_usd is None else \
        f"; the run spent {money((h.cost_usd or 0.0) + h.cut_cost_usd)} in all"
    return (f"{h.cut_attempts} attempt(s) cut by an interrupt spent tokens "
            f"{h.cut_tokens.total:,} and {spent} (not in the totals above{total})")


def free_line(h: Headline, trials: int = 1) -> str:
    if h.free_passes is None:
        return "free passes: not measured (the run recorded no baseline)"
    passes = "passes" if trials == 1 else "passing trials"
    return f"free passes: {h.free_passes} of the {h.passed} {passes} (the untouched start " \
           "database already passes)"


def suspect_line(h: Headline, trials: int = 1) -> str | None:
    if not h.suspect:
        return None
    what = "" if trials == 1 else " trials"
    passes = "passes" if trials == 1 else "passing trials"
    return f"{h.suspect} suspect{what} ({h.suspect_passes} of the {passes}): the agent named " \
           "or opened something outside its workspace; evidence in each result.json " \
           "(integrity_evidence)"


def usage_line(h: Headline, trials_run: int | None = None) -> str:
    """Tokens, cost and task time in total and per task (per trial when ``trials_run`` is
    given: a run of several trials per task)."""
    t = h.tokens
    unit, count = ("trial", trials_run) if trials_run is not None else ("task", h.attempted)
    per = f", {money(h.cost_usd / count)} per {unit}" \
        if h.cost_usd is not None and count else ""
    per_time = f", {seconds(h.seconds / count)} per {unit}" if count else ""
    parts = f" (input {t.input:,}, output {t.output:,}, cache read {t.cache_read:,}, cache " \
        f"write {t.cache_creation:,})" if t.total else ""  # no model: one 0, not five
    return (f"tokens {t.total:,}{parts}; cost {money(h.cost_usd)}{per}; task time "
            f"{seconds(h.seconds)}{per_time}")


def headline_lines(report: RunReport) -> list[str]:
    """The headline, one sentence a line, in the order every format shows it. With one trial
    per task the counts are of tasks; with several, of trials, and pass@1 (the mean of each
    task's rate) replaces the count of passes over the denominators."""
    h, k = report.headline, report.rates
    several = report.trials > 1
    everything = f"of all {'planned' if several else 'selected'}"
    lines = [run_line(report)]
    if several:
        lines += [trials_line(report) or "", pass_at_1_line(report) or "",
                  "trials passed " + shares(k.tasks_passed, [
                      ("of attempted", k.tasks_attempted), (everything, k.tasks_total)])
                  + lenient_phrase(h)]
    else:  # tasks passed of attempted and of all selected are in the passed line
        lines.append(passed_line(report))
    lines += [
        free_line(h, report.trials),
        "tables passed " + shares(k.tables_passed, [("of attempted", k.tables_attempted),
                                                    (everything, k.tables_total)]),
        usage_line(h, report.stats.trials_run if several else None),
    ]
    lines = [line for line in lines if line]
    for extra in (cut_line(h), flaky_line(report), suspect_line(h, report.trials),
                  classes_line(h)):
        if extra:
            lines.append(extra)
    if h.interrupted:
        lines.append(f"{h.interrupted} {'trial' if several else 'task'}(s) interrupted: "
                     f"resume with --run-id {report.run_id}")
    if report.cut_by_budget:
        lines.append(budget_cut_line(report))
    if report.not_run_for_budget:
        lines.append(f"{report.not_run_for_budget} trial(s) not run: the run's budget "
                     f"(--max-cost-usd) was reached; resume with --run-id {report.run_id} "
                     "and a higher --max-cost-usd")
    if report.sequential is not None:
        lines.append(sequential_line(report.sequential))
    if report.replay is not None:
        lines.append(replay_line(report.replay))
    return lines


def replay_line(replay: ReplaySummary) -> str:
    """A replayed run says so, and which trials left their recording: a verdict of a trial
    stopped at a divergence is of what the agent did up to there, not of the recorded run."""
    mode = " (lenient)" if replay.lenient else ""
    head = f"replayed from run {replay.run}{mode}: {replay.trials} trial(s)"
    if not replay.stopped:
        return f"{head}, every one within its recording"
    first_name, first = replay.stopped[0]
    return (f"{head}, {len(replay.stopped)} stopped at a divergence (first: {first_name}: "
            f"{first})")


def sequential_line(record: SequentialRecord) -> str:
    """The answer of a sequential run (``run --until-decided``) in one line: trials not run
    in it are saved, not missing (docs/statistics.md)."""
    return f"sequential, against run {record.against_id}: {record.sentence}"


def budget_cut_line(report: RunReport) -> str:
    """The trials the run's budget stopped mid-way: their verdicts are of unfinished work,
    which a reader must know before comparing pass rates."""
    cap = f" of {money(report.max_cost_usd)}" if report.max_cost_usd is not None else ""
    spent = f", spent {money(report.spent_usd)}" if report.spent_usd is not None else ""
    return (f"{report.cut_by_budget} trial(s) cut by the run's budget{cap} (--max-cost-usd"
            f"{spent}): stopped mid-way and scored as they stood")


TABLE_HEADERS = ("task", "status", "verdict", "tables", "time", "cost", "tokens", "integrity",
                 "note")


def table_cells(report: RunReport) -> list[tuple[str, ...]]:
    """The final table's cells, as text (the terminal and markdown tables)."""
    several = report.trials > 1
    return [(r.name if several else r.task_id, str(r.status), str(r.verdict),
             f"{r.tables_passed}/{r.tables_total}" if r.tables_total else "-",
             seconds(r.seconds), money(r.cost_usd),
             f"{r.tokens.total:,}" if r.tokens.total else "-",
             r.integrity or "-", r.note) for r in report.rows]

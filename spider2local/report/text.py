"""The headline's wording, once: the terminal, the markdown and the HTML say the same sentences.

Every sentence names its denominator, because "x% solved" means nothing without it (README,
"how to report a score").
"""

from __future__ import annotations

from spider2local.report.stats import Estimate
from spider2local.report.summary import Headline, Rates, RunReport


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


def pass_at_1_line(report: RunReport) -> str | None:
    """``pass@1 4.4% [1.2%, 9.8%] official, ...``: each denominator's pass@1 with its 95%
    interval, then the standard error of the first."""
    found = report.stats.pass_at_1
    if not found:
        return None
    parts = [f"{interval_text(e)} {label}" for label, e in found]
    first_label, first = found[0]
    how = "mean over tasks of trials passed / trials run; " if report.trials > 1 else ""
    return (f"pass@1 {', '.join(parts)} ({how}95% intervals, bootstrap over tasks; standard "
            f"error {first.se * 100:.1f} points {first_label})")


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


def passed_line(h: Headline) -> str:
    """``passed 3/68 (4.4%) official, 3/64 (4.7%) with gold, ...``."""
    parts = [f"{pct(h.passed, n)} {label}" for label, n in h.denominators()]
    if h.official is None:  # a run made before the audit's counts were recorded
        parts.append(f"{pct(h.passed, h.selected)} of all selected")
    return "passed " + ", ".join(parts)


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
    return (f"tokens {t.total:,} (input {t.input:,}, output {t.output:,}, cache read "
            f"{t.cache_read:,}, cache write {t.cache_creation:,}); cost {money(h.cost_usd)}"
            f"{per}; task time {seconds(h.seconds)}{per_time}")


def headline_lines(report: RunReport) -> list[str]:
    """The headline, one sentence a line, in the order every format shows it. With one trial
    per task the counts are of tasks; with several, of trials, and pass@1 (the mean of each
    task's rate) replaces the count of passes over the denominators."""
    h, k = report.headline, report.rates
    several = report.trials > 1
    unit = "trials" if several else "tasks"
    lines = [run_line(report)]
    if several:
        lines.append(trials_line(report) or "")
    else:
        lines.append(passed_line(h))
    estimate = pass_at_1_line(report)
    if estimate:
        lines.append(estimate)
    lines += [
        f"{unit} passed {pct(k.tasks_passed, k.tasks_attempted)} of attempted, "
        f"{pct(k.tasks_passed, k.tasks_total)} of all {'planned' if several else 'selected'}",
        free_line(h, report.trials),
        f"tables passed {pct(k.tables_passed, k.tables_attempted)} of attempted, "
        f"{pct(k.tables_passed, k.tables_total)} of all {'planned' if several else 'selected'}",
        usage_line(h, report.stats.trials_run if several else None),
    ]
    for extra in (flaky_line(report), suspect_line(h, report.trials)):
        if extra:
            lines.append(extra)
    if h.interrupted:
        lines.append(f"{h.interrupted} {'trial' if several else 'task'}(s) interrupted: "
                     f"resume with --run-id {report.run_id}")
    if report.not_run_for_budget:
        lines.append(f"{report.not_run_for_budget} trial(s) not run: the run's budget "
                     f"(--max-cost-usd) was reached; resume with --run-id {report.run_id} "
                     "and a higher --max-cost-usd")
    return lines


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

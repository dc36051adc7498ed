"""The headline's wording, once: the terminal, the markdown and the HTML say the same sentences.

Every sentence names its denominator, because "x% solved" means nothing without it (README,
"how to report a score").
"""

from __future__ import annotations

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
    who = ", ".join(f"{k} {v}" for k, v in (("agent", report.agent), ("command", command),
                                            ("model", report.model)) if v)
    state = "; interrupted" if report.interrupted else ""
    return f"run {report.run_id} ({who + ', ' if who else ''}isolation: {report.isolation}" \
           f"{state})"


def passed_line(h: Headline) -> str:
    """``passed 3/68 (4.4%) official, 3/64 (4.7%) with gold, ...``."""
    parts = [f"{pct(h.passed, n)} {label}" for label, n in h.denominators()]
    if h.official is None:  # a run made before the audit's counts were recorded
        parts.append(f"{pct(h.passed, h.selected)} of all selected")
    return "passed " + ", ".join(parts)


def free_line(h: Headline) -> str:
    if h.free_passes is None:
        return "free passes: not measured (the run recorded no baseline)"
    return f"free passes: {h.free_passes} of the {h.passed} passes (the untouched start " \
           "database already passes)"


def suspect_line(h: Headline) -> str | None:
    if not h.suspect:
        return None
    return f"{h.suspect} suspect ({h.suspect_passes} of the passes): the agent named or " \
           "opened something outside its workspace; evidence in each result.json " \
           "(integrity_evidence)"


def usage_line(h: Headline) -> str:
    t = h.tokens
    per = f", {money(h.cost_usd / h.attempted)} per task" \
        if h.cost_usd is not None and h.attempted else ""
    per_time = f", {seconds(h.seconds / h.attempted)} per task" if h.attempted else ""
    return (f"tokens {t.total:,} (input {t.input:,}, output {t.output:,}, cache read "
            f"{t.cache_read:,}, cache write {t.cache_creation:,}); cost {money(h.cost_usd)}"
            f"{per}; task time {seconds(h.seconds)}{per_time}")


def headline_lines(report: RunReport) -> list[str]:
    """The headline, one sentence a line, in the order every format shows it."""
    h, k = report.headline, report.rates
    lines = [
        run_line(report),
        passed_line(h),
        f"tasks passed {pct(k.tasks_passed, k.tasks_attempted)} of attempted, "
        f"{pct(k.tasks_passed, k.tasks_total)} of all selected",
        free_line(h),
        f"tables passed {pct(k.tables_passed, k.tables_attempted)} of attempted, "
        f"{pct(k.tables_passed, k.tables_total)} of all selected",
        usage_line(h),
    ]
    suspect = suspect_line(h)
    if suspect:
        lines.append(suspect)
    if h.interrupted:
        lines.append(f"{h.interrupted} task(s) interrupted: resume with --run-id "
                     f"{report.run_id}")
    if report.not_run_for_budget:
        lines.append(f"{report.not_run_for_budget} trial(s) not run: the run's budget "
                     f"(--max-cost-usd) was reached; resume with --run-id {report.run_id} "
                     "and a higher --max-cost-usd")
    return lines


TABLE_HEADERS = ("task", "status", "verdict", "tables", "time", "cost", "tokens", "integrity",
                 "note")


def table_cells(report: RunReport) -> list[tuple[str, ...]]:
    """The final table's cells, as text (the terminal and markdown tables)."""
    return [(r.label, str(r.status), str(r.verdict),
             f"{r.tables_passed}/{r.tables_total}" if r.tables_total else "-",
             seconds(r.seconds), money(r.cost_usd),
             f"{r.tokens.total:,}" if r.tokens.total else "-",
             r.integrity or "-", r.note) for r in report.rows]

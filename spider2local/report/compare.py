"""``spider2local compare RUN_A RUN_B``: the paired comparison of two runs of one dataset.

Both runs are read from their folders as ``report`` reads them (:func:`.summary.load_report`).
The comparison is paired on the tasks *both* runs attempted (at least one trial with a result
in each): per task the difference of pass rates (B - A), and over them the difference in pass@1
with a 95% paired bootstrap interval, an exact p-value (McNemar's exact test with one trial
each, the sign-flip permutation test with several), the smallest difference these runs could
detect and one plain sentence (:func:`.stats.compare_counts`). A task only one run attempted
(the other did not select it, skipped it, or was cut before it) is listed apart and never
counted as a flip: "B did not run it" is not "B failed it".

A flip is a change of the task's pass rate (with one trial each: pass -> fail or fail ->
pass); a status change keeps the rate but changes how trials ended (failed -> error). Runs of
different datasets are refused: their task ids may coincide while the tasks, gold or
evaluation differ, and the flips would be noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from spider2local.core.printable import printable
from spider2local.core.results import Status
from spider2local.core.table import render_table
from spider2local.exceptions import UserError
from spider2local.report.stats import Paired, TaskCount, compare_counts, p_text, points
from spider2local.report.summary import Row, RunReport, TaskRate, load_report
from spider2local.report.text import sequential_line
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest
from spider2local.run.resume import dataset_identity
from spider2local.sequential.analysis import Decision
from spider2local.sequential.record import SequentialRecord

COMPARE_SCHEMA = 1
"""Version of ``compare --format json`` (moves when a key is renamed or removed)."""


class Change(StrEnum):
    TO_PASS = "fail -> pass"
    """B's pass rate is higher (one trial each: it failed in A and passes in B)."""
    TO_FAIL = "pass -> fail"
    STATUS = "status"
    """Same rate, but the trials ended differently (failed -> error)."""
    SAME = "same"
    ONLY_A = "only in A"
    """Attempted by A only: B did not select it, skipped it, or never got to it."""
    ONLY_B = "only in B"
    NEITHER = "neither"
    """Selected but attempted by neither run."""


@dataclass(frozen=True)
class TaskDelta:
    task_id: str
    a: TaskRate | None
    """The task in run A; ``None`` when A did not select it."""
    b: TaskRate | None
    a_rows: tuple[Row, ...] = ()
    """A's trials of it (with their status, time and cost)."""
    b_rows: tuple[Row, ...] = ()

    @property
    def change(self) -> Change:
        in_a = self.a is not None and self.a.run > 0
        in_b = self.b is not None and self.b.run > 0
        if not (in_a and in_b):
            return Change.ONLY_A if in_a else Change.ONLY_B if in_b else Change.NEITHER
        assert self.a is not None and self.b is not None
        difference = self.b.passed * self.a.run - self.a.passed * self.b.run
        if difference:
            return Change.TO_PASS if difference > 0 else Change.TO_FAIL
        return Change.SAME if _statuses(self.a_rows) == _statuses(self.b_rows) \
            else Change.STATUS

    @property
    def lenient_a(self) -> int:
        """A's lenient passes of it (official passes whose rows do not line up)."""
        return sum(r.lenient for r in self.a_rows)

    @property
    def lenient_b(self) -> int:
        return sum(r.lenient for r in self.b_rows)

    @property
    def seconds(self) -> float | None:
        """B's mean time per trial minus A's."""
        return _delta(_mean([r.seconds for r in self.a_rows]),
                      _mean([r.seconds for r in self.b_rows]))

    @property
    def cost_usd(self) -> float | None:
        """B's mean cost per trial minus A's."""
        return _delta(_mean([r.cost_usd for r in self.a_rows]),
                      _mean([r.cost_usd for r in self.b_rows]))


def _statuses(rows: Sequence[Row]) -> list[str]:
    return sorted(str(r.status) for r in rows if isinstance(r.status, Status))


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


@dataclass(frozen=True)
class Comparison:
    a: RunReport
    b: RunReport
    tasks: tuple[TaskDelta, ...]
    """Every task either run selected, by id."""
    paired: Paired
    """The statistics over :attr:`common`."""

    def changed(self, kind: Change) -> list[TaskDelta]:
        return [t for t in self.tasks if t.change is kind]

    @property
    def common(self) -> list[TaskDelta]:
        """The tasks both runs attempted: what the comparison is paired on."""
        return [t for t in self.tasks
                if t.change not in (Change.ONLY_A, Change.ONLY_B, Change.NEITHER)]

    @property
    def several(self) -> bool:
        return self.a.trials > 1 or self.b.trials > 1

    @property
    def sequential(self) -> SequentialRecord | None:
        """B's sequential record when B was run ``--against`` A (``--until-decided``): its
        answer is the comparison's, since a fixed-design test on trials that stopped when the
        data looked decided would overstate the evidence (docs/statistics.md)."""
        record = self.b.sequential
        return record if record is not None and record.against_id == self.a.run_id else None

    @property
    def regression(self) -> bool:
        """What ``--fail-on-regression`` fails on: B significantly worse, by the sequential
        decision for a sequential run, by the paired test otherwise."""
        if self.sequential is not None:
            return self.sequential.decision is Decision.B_WORSE
        return self.paired.regression

    @property
    def sentence(self) -> str:
        if self.sequential is not None:
            return sequential_line(self.sequential)
        return self.paired.sentence
    def class_transitions(self) -> list[tuple[str, str, int]]:
        """How the failure classes moved from A to B over the paired tasks, trial by trial
        (``pass`` for a pass): ``(from, to, trials)``, most frequent first; unchanged pairs
        are left out."""
        moved: dict[tuple[str, str], int] = {}
        for task in self.common:
            b_rows = {r.trial: r for r in task.b_rows}
            for row in task.a_rows:
                other = b_rows.get(row.trial)
                if other is None or not isinstance(row.status, Status) \
                        or not isinstance(other.status, Status):
                    continue
                pair = (_outcome_word(row), _outcome_word(other))
                if pair[0] != pair[1]:
                    moved[pair] = moved.get(pair, 0) + 1
        return [(a, b, n) for (a, b), n in sorted(moved.items(),
                                                  key=lambda kv: (-kv[1], kv[0]))]


def _outcome_word(row: Row) -> str:
    return "pass" if row.verdict.value == "pass" else row.failure_class or str(row.status)


def transition_lines(c: Comparison) -> list[str]:
    """``wrong_values -> pass: 2`` per kind of move (e.g. compile errors fixed, new wrong
    values)."""
    return [f"{a} -> {b}: {n}" for a, b, n in c.class_transitions()]


def _total(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def compare_reports(report_a: RunReport, report_b: RunReport) -> Comparison:
    """The paired comparison of two reports (see the module docstring)."""
    rates_a = {t.task_id: t for t in report_a.stats.tasks}
    rates_b = {t.task_id: t for t in report_b.stats.tasks}
    rows_a: dict[str, list[Row]] = {}
    rows_b: dict[str, list[Row]] = {}
    for rows, into in ((report_a.rows, rows_a), (report_b.rows, rows_b)):
        for row in rows:
            into.setdefault(row.task_id, []).append(row)
    deltas = tuple(TaskDelta(t, rates_a.get(t), rates_b.get(t), tuple(rows_a.get(t, ())),
                             tuple(rows_b.get(t, ())))
                   for t in sorted(rates_a.keys() | rates_b.keys()))
    both = [d for d in deltas
            if d.change not in (Change.ONLY_A, Change.ONLY_B, Change.NEITHER)]
    paired = compare_counts([TaskCount(d.a.run, d.a.passed) for d in both if d.a],
                            [TaskCount(d.b.run, d.b.passed) for d in both if d.b])
    return Comparison(report_a, report_b, deltas, paired)


def compare_runs(a: RunFolder, b: RunFolder, *, force: bool = False) -> Comparison:
    """Both runs' reports side by side; refuses two datasets unless ``force``. Two agents (or
    two commands of the command agent) are compared: that is what a benchmark of agents is
    for, and every form names each run's agent (only ``merge`` refuses to join them)."""
    first = a.read_manifest() or RunManifest(run_id=a.run_id)
    second = b.read_manifest() or RunManifest(run_id=b.run_id)
    if dataset_identity(first) != dataset_identity(second) and not force:
        raise UserError(f"runs {a.run_id} and {b.run_id} were made on different datasets "
                        f"({first.dataset} and {second.dataset})",
                        path=b.root, fix="compare runs of one dataset (or pass --force)")
    return compare_reports(load_report(a), load_report(b))


def who(report: RunReport) -> str:
    """A run as a comparison names it: its id and its agent (and command)."""
    agent = report.agent or "unknown agent"
    command = f" {report.agent_command!r}" if report.agent_command else ""
    apis = f" with {'+'.join(report.agent_apis)}" if report.agent_command and \
        report.agent_apis else ""
    return f"{report.run_id} (agent {agent}{command}{apis})"


def _money(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else (f"{value:+.2f}$" if sign else f"${value:.2f}")


def _secs(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else (f"{value:+.1f}s" if sign else f"{value:.1f}s")


def _pct(value: float) -> str:
    return f"{value:.1%}"


def _rate_text(rate: TaskRate | None, rows: Sequence[Row], several: bool) -> str:
    if rate is None:
        return "(not selected)"
    if rate.run == 0:
        return f"(not attempted: {rows[0].status})" if rows else "(not attempted)"
    lenient = sum(r.lenient for r in rows)
    if not several:
        return f"{rows[0].status} ({rows[0].verdict}{', lenient' if lenient else ''})"
    return f"{rate.passed}/{rate.run} passed" + (f" ({lenient} lenient)" if lenient else "")


def _headline(c: Comparison) -> list[tuple[str, str, str, str]]:
    p = c.paired
    ka, kb = c.a.rates, c.b.rates
    unit = "trials" if c.several else "tasks"
    time_a = _total([r.seconds for r in c.a.rows])
    time_b = _total([r.seconds for r in c.b.rows])
    per_a = _mean([r.cost_usd for r in c.a.rows])
    per_b = _mean([r.cost_usd for r in c.b.rows])
    return [
        (f"pass@1 on the {p.tasks} tasks both attempted", _pct(p.pass_a), _pct(p.pass_b),
         f"{p.difference * 100:+.1f} points [{p.interval.low * 100:+.1f}, "
         f"{p.interval.high * 100:+.1f}]"),
        (f"{unit} passed", f"{ka.tasks_passed}/{ka.tasks_total}",
         f"{kb.tasks_passed}/{kb.tasks_total}", f"{kb.tasks_passed - ka.tasks_passed:+d}"),
        ("of which lenient (rows do not line up)", str(c.a.headline.lenient_passes),
         str(c.b.headline.lenient_passes),
         f"{c.b.headline.lenient_passes - c.a.headline.lenient_passes:+d}"),
        ("tables passed", f"{ka.tables_passed}/{ka.tables_total}",
         f"{kb.tables_passed}/{kb.tables_total}", f"{kb.tables_passed - ka.tables_passed:+d}"),
        ("cost", _money(c.a.cost_usd), _money(c.b.cost_usd),
         _money(_delta(c.a.cost_usd, c.b.cost_usd), sign=True)),
        ("cost per trial", _money(per_a), _money(per_b),
         _money(_delta(per_a, per_b), sign=True)),
        (f"time (sum of {unit})", _secs(time_a), _secs(time_b),
         _secs(_delta(time_a, time_b), sign=True)),
    ]


def statistics_lines(c: Comparison) -> list[str]:
    """The test, the detectable difference and the sentence, one line each."""
    p = c.paired
    detectable = "no difference could be significant with so few tasks" \
        if p.detectable is None else f"about {points(p.detectable)} points"
    return [
        f"test: {p.test}, {p_text(p.p_value)}; {p.b_better} task(s) better in B, "
        f"{p.a_better} better in A, {p.tasks - p.b_better - p.a_better} the same",
        f"interval: 95% paired {p.interval.method} over tasks; smallest difference detectable "
        f"at 80% power: {detectable} (trial variance {p.trial_variance:.3f}, see "
        "docs/statistics.md)",
        p.sentence if c.sequential is None else
        f"(the fixed-design test above does not hold for trials that stopped when the answer "
        f"looked known; the sequential answer does) {c.sentence}",
    ]


def _task_rows(c: Comparison, deltas: Sequence[TaskDelta]
               ) -> list[tuple[str, str, str, str, str]]:
    return [(t.task_id, _rate_text(t.a, t.a_rows, c.several),
             _rate_text(t.b, t.b_rows, c.several), _secs(t.seconds, sign=True),
             _money(t.cost_usd, sign=True)) for t in deltas]


def _sections(c: Comparison) -> list[tuple[Change, str]]:
    if c.several:
        flips = [(Change.TO_FAIL, "lower pass rate in B"), (Change.TO_PASS,
                                                            "higher pass rate in B")]
    else:
        flips = [(Change.TO_FAIL, "pass -> fail"), (Change.TO_PASS, "fail -> pass")]
    return [*flips, (Change.STATUS, "status changed, same verdict"),
            (Change.ONLY_A, "attempted only in A (not paired, not a flip)"),
            (Change.ONLY_B, "attempted only in B (not paired, not a flip)")]


TASK_HEADERS = ("task", "A", "B", "time delta", "cost delta")


def _lenient(c: Comparison) -> list[TaskDelta]:
    """Tasks with a lenient pass in either run (the verdicts stand; this says which passes
    the row-aligned check does not confirm)."""
    return [t for t in c.tasks if t.lenient_a or t.lenient_b]


def _closing(c: Comparison) -> str:
    neither = len(c.changed(Change.NEITHER))
    return (f"{len(c.changed(Change.SAME))} task(s) unchanged, {len(c.common)} in both runs"
            + (f", {neither} attempted by neither" if neither else ""))


def render_compare(c: Comparison) -> str:
    """The terminal form: the statistics, the headline side by side, each kind of change,
    and (with several trials) every paired task's rates side by side."""
    lines = [f"A = {who(c.a)}, B = {who(c.b)}", *statistics_lines(c), "",
             render_table(("", "A", "B", "B - A"), _headline(c)), ""]
    for kind, title in _sections(c):
        found = c.changed(kind)
        lines.append(f"{title}: {len(found)}")
        if found:
            lines += [render_table(TASK_HEADERS, _task_rows(c, found), max_width=40), ""]
    moves = transition_lines(c)
    lines += [f"failure classes, A -> B: {len(moves)} kind(s) of change", *moves, ""]
    lenient = _lenient(c)
    if lenient:
        lines += [f"lenient passes (official passes whose rows do not line up): {len(lenient)} "
                  "task(s)", render_table(TASK_HEADERS, _task_rows(c, lenient), max_width=40),
                  ""]
    if c.several:
        lines += ["per task (paired)", render_table(TASK_HEADERS, _task_rows(c, c.common),
                                                    max_width=40), ""]
    lines.append(_closing(c))
    return "\n".join(lines).rstrip()


def _md_cell(value: str) -> str:
    return printable(" ".join(value.split())).replace("|", "\\|")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


def render_compare_markdown(c: Comparison) -> str:
    """The same, in GitHub-flavoured markdown (a step summary, a pull-request comment)."""
    parts = [f"## Compare `{_md_cell(who(c.a))}` (A) with `{_md_cell(who(c.b))}` (B)", "",
             f"**{_md_cell(c.sentence)}**", "",
             *(f"- {_md_cell(line)}" for line in statistics_lines(c)[:2]), "",
             _md_table(("", "A", "B", "B - A"), _headline(c)), ""]
    for kind, title in _sections(c):
        found = c.changed(kind)
        parts.append(f"### {title.replace('->', '→')}: {len(found)}")
        parts.append("")
        if found:
            parts += [_md_table(TASK_HEADERS, _task_rows(c, found)), ""]
    moves = transition_lines(c)
    parts += [f"### failure classes, A → B: {len(moves)}", "",
              *(f"- {_md_cell(m)}" for m in moves), ""]
    lenient = _lenient(c)
    if lenient:
        parts += [f"### lenient passes (rows do not line up): {len(lenient)}", "",
                  _md_table(TASK_HEADERS, _task_rows(c, lenient)), ""]
    if c.several:
        parts += ["### per task (paired)", "", _md_table(TASK_HEADERS, _task_rows(c, c.common)),
                  ""]
    parts.append(_closing(c) + ".")
    return "\n".join(parts)


def _side(rate: TaskRate | None) -> dict[str, Any] | None:
    if rate is None:
        return None
    return {"trials_run": rate.run, "trials_passed": rate.passed, "rate": rate.rate}


def compare_json(c: Comparison) -> dict[str, Any]:
    """``compare --format json``: the statistics, then every task of either run."""
    p = c.paired
    return {
        "schema_version": COMPARE_SCHEMA,
        "a": c.a.run_id, "b": c.b.run_id,
        "agents": {side: {"agent": r.agent, "command": r.agent_command,
                          "apis": list(r.agent_apis)} for side, r in (("a", c.a), ("b", c.b))},
        "paired": {
            "tasks": p.tasks, "trials_a": list(p.trials_a), "trials_b": list(p.trials_b),
            "pass_at_1_a": p.pass_a, "pass_at_1_b": p.pass_b, "difference": p.difference,
            "interval": asdict(p.interval), "p_value": p.p_value, "test": p.test,
            "alpha": p.alpha, "significant": p.significant, "regression": p.regression,
            "b_better": p.b_better, "a_better": p.a_better,
            "trial_variance": p.trial_variance, "detectable_difference": p.detectable,
            "sentence": p.sentence,
        },
        "sequential": c.sequential.to_json() if c.sequential is not None else None,
        "regression": c.regression,
        "class_transitions": [{"from": a, "to": b, "trials": n}
                              for a, b, n in c.class_transitions()],
        "failure_classes": {"a": dict(c.a.headline.failure_classes),
                            "b": dict(c.b.headline.failure_classes)},
        "lenient_passes": {"a": c.a.headline.lenient_passes,
                           "b": c.b.headline.lenient_passes},
        "only_a": [t.task_id for t in c.changed(Change.ONLY_A)],
        "only_b": [t.task_id for t in c.changed(Change.ONLY_B)],
        "tasks": [{"id": t.task_id, "change": t.change.value, "a": _side(t.a),
                   "b": _side(t.b), "seconds_delta": t.seconds, "cost_usd_delta": t.cost_usd,
                   "lenient_a": t.lenient_a, "lenient_b": t.lenient_b}
                  for t in c.tasks],
    }

"""``spider2local compare RUN_A RUN_B``: what changed between two runs of one dataset.

Both runs are read from their folders as ``report`` reads them (:func:`.summary.load_report`),
so a compare shows the verdicts each report shows. A flip is a change of the official verdict
(a task that passed and no longer does, whatever it became, or the reverse); a status change
keeps the verdict but changes how the task ended (failed -> error, passed -> timeout with a
result). Runs of different datasets are refused: their task ids may coincide while the tasks,
gold or evaluation differ, and the flips would be noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from spider2local.exceptions import UserError
from spider2local.report.printable import printable
from spider2local.report.summary import Row, RunReport, Verdict, agent_command_of, load_report
from spider2local.report.table import render_table
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest
from spider2local.run.resume import dataset_identity


class Change(StrEnum):
    TO_PASS = "fail -> pass"
    TO_FAIL = "pass -> fail"
    STATUS = "status"
    SAME = "same"


@dataclass(frozen=True)
class TaskDelta:
    task_id: str
    a: Row | None
    """The task in run A; ``None`` when A did not select it."""
    b: Row | None

    @property
    def change(self) -> Change:
        passed_a = self.a is not None and self.a.verdict is Verdict.PASS
        passed_b = self.b is not None and self.b.verdict is Verdict.PASS
        if passed_a != passed_b:
            return Change.TO_PASS if passed_b else Change.TO_FAIL
        status_a = self.a.status if self.a else None
        status_b = self.b.status if self.b else None
        return Change.SAME if status_a == status_b else Change.STATUS

    @property
    def seconds(self) -> float | None:
        return _delta(self.a.seconds if self.a else None, self.b.seconds if self.b else None)

    @property
    def cost_usd(self) -> float | None:
        return _delta(self.a.cost_usd if self.a else None, self.b.cost_usd if self.b else None)


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


@dataclass(frozen=True)
class Comparison:
    a: RunReport
    b: RunReport
    tasks: tuple[TaskDelta, ...]
    """Every task either run selected, by id."""

    def changed(self, kind: Change) -> list[TaskDelta]:
        return [t for t in self.tasks if t.change is kind]

    @property
    def common(self) -> list[TaskDelta]:
        return [t for t in self.tasks if t.a is not None and t.b is not None]


def _total(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def compare_runs(a: RunFolder, b: RunFolder, *, force: bool = False) -> Comparison:
    """Both runs' reports side by side; refuses two datasets, or two agents (or two commands
    of the command agent), unless ``force``."""
    first = a.read_manifest() or RunManifest(run_id=a.run_id)
    second = b.read_manifest() or RunManifest(run_id=b.run_id)
    if dataset_identity(first) != dataset_identity(second) and not force:
        raise UserError(f"runs {a.run_id} and {b.run_id} were made on different datasets "
                        f"({first.dataset} and {second.dataset})",
                        path=b.root, fix="compare runs of one dataset (or pass --force)")
    agents = [(m.agent, agent_command_of(m)) for m in (first, second)]
    if agents[0] != agents[1] and not force:
        def who(agent: tuple[Any, str | None]) -> str:
            return f"{agent[0]}" + (f" ({agent[1]!r})" if agent[1] else "")

        raise UserError(f"runs {a.run_id} and {b.run_id} were made by different agents "
                        f"({who(agents[0])} and {who(agents[1])})", path=b.root,
                        fix="compare runs of one agent, or pass --force to compare agents")
    report_a, report_b = load_report(a), load_report(b)
    rows_a = {r.task_id: r for r in report_a.rows}
    rows_b = {r.task_id: r for r in report_b.rows}
    ids = sorted(rows_a.keys() | rows_b.keys())
    return Comparison(report_a, report_b,
                      tuple(TaskDelta(t, rows_a.get(t), rows_b.get(t)) for t in ids))


def _money(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else (f"{value:+.2f}$" if sign else f"${value:.2f}")


def _secs(value: float | None, sign: bool = False) -> str:
    return "-" if value is None else (f"{value:+.1f}s" if sign else f"{value:.1f}s")


def _row_text(row: Row | None) -> str:
    return "(not selected)" if row is None else f"{row.status} ({row.verdict})"


def _headline(c: Comparison) -> list[tuple[str, str, str, str]]:
    ka, kb = c.a.rates, c.b.rates
    time_a = _total([r.seconds for r in c.a.rows])
    time_b = _total([r.seconds for r in c.b.rows])
    return [
        ("tasks passed", f"{ka.tasks_passed}/{ka.tasks_total}",
         f"{kb.tasks_passed}/{kb.tasks_total}", f"{kb.tasks_passed - ka.tasks_passed:+d}"),
        ("tables passed", f"{ka.tables_passed}/{ka.tables_total}",
         f"{kb.tables_passed}/{kb.tables_total}", f"{kb.tables_passed - ka.tables_passed:+d}"),
        ("cost", _money(c.a.cost_usd), _money(c.b.cost_usd),
         _money(_delta(c.a.cost_usd, c.b.cost_usd), sign=True)),
        ("time (sum of tasks)", _secs(time_a), _secs(time_b),
         _secs(_delta(time_a, time_b), sign=True)),
    ]


def _task_rows(deltas: Sequence[TaskDelta]) -> list[tuple[str, str, str, str, str]]:
    return [(t.task_id, _row_text(t.a), _row_text(t.b), _secs(t.seconds, sign=True),
             _money(t.cost_usd, sign=True)) for t in deltas]


SECTIONS = ((Change.TO_FAIL, "pass -> fail"), (Change.TO_PASS, "fail -> pass"),
            (Change.STATUS, "status changed, same verdict"))
TASK_HEADERS = ("task", "A", "B", "time delta", "cost delta")


def render_compare(c: Comparison) -> str:
    """The terminal form: the headline side by side, then each kind of change."""
    lines = [f"A = {c.a.run_id}, B = {c.b.run_id}",
             render_table(("", "A", "B", "B - A"), _headline(c)), ""]
    for kind, title in SECTIONS:
        found = c.changed(kind)
        lines.append(f"{title}: {len(found)}")
        if found:
            lines += [render_table(TASK_HEADERS, _task_rows(found), max_width=40), ""]
    lines.append(f"{len(c.changed(Change.SAME))} task(s) unchanged, {len(c.common)} in both runs")
    return "\n".join(lines).rstrip()


def _md_cell(value: str) -> str:
    return printable(" ".join(value.split())).replace("|", "\\|")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(out)


def render_compare_markdown(c: Comparison) -> str:
    """The same, in GitHub-flavoured markdown (a step summary, a pull-request comment)."""
    parts = [f"## Compare `{_md_cell(c.a.run_id)}` (A) with `{_md_cell(c.b.run_id)}` (B)", "",
             _md_table(("", "A", "B", "B - A"), _headline(c)), ""]
    for kind, title in SECTIONS:
        found = c.changed(kind)
        parts.append(f"### {title.replace('->', '→')}: {len(found)}")
        parts.append("")
        if found:
            parts += [_md_table(TASK_HEADERS, _task_rows(found)), ""]
    parts.append(f"{len(c.changed(Change.SAME))} task(s) unchanged, "
                 f"{len(c.common)} in both runs.")
    return "\n".join(parts)

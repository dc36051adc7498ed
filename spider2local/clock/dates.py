"""Infer the date each task's gold was built on, from the data and the project (never today).

Spider2-DBT publishes no build date, yet projects that read the clock only reproduce their gold
on the right date. Evidence, strongest first:

* **verified**: a clock-reading model rebuilt under the fake clock (a temporary copy of the
  project on a copy of the gold database, ``dbt run --select <model>``) equals its gold table;
* **date-spine**: a gold table of such a model holds consecutive days ending on the build date
  (the probe build measures any offset the project adds, e.g. "up to yesterday");
* **month-spine**: consecutive month starts: this fixes the month, not the day. The whole month
  is recorded in the evidence and its FIRST day chosen (unless a stronger candidate narrows it);
* **age-column**: an integer column plus a date column of the same row is one constant date
  ("days since" recomputed against its source date).

A spine built by ``dbt_utils.date_spine`` (or dbt's own copy) whose ``end_date`` reads the clock
excludes its end: a daily spine ending on D-1 was built on D, a month spine ending in the month
before D's was built in D's month. The heuristics apply that (see :class:`SpineEnd`), so the
unverified shortcut (``--no-verify``, ``audit``) gives the day the gold was built, not the one
before.

Projects that never read the clock (:mod:`spider2local.clock.reads`) get no date at all. A task
with clock reads but no evidence gets no date either: a guess without a reason is worse than
the suite's default, which is at least labelled as one.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb

from spider2local.clock.dbt import run_dbt
from spider2local.clock.faketime import Clock, find_library, find_real_dbt
from spider2local.clock.reads import ClockScan, SpineEnd, scan_clock_reads, unshipped_models
from spider2local.dataset.task import TaskSpec
from spider2local.db import catalog
from spider2local.db.connect import open_database
from spider2local.db.sql import identifier, literal, qualified
from spider2local.dbtproject.files import confine_profile, profile_db_path
from spider2local.proc.tempdirs import owned_tempdir
from spider2local.safepath import child
from spider2local.suite.edit import DateRecord
from spider2local.suite.model import Confidence, DateMethod, DateSource, Suite

BUILD_TIMEOUT = 300.0
_PRIORITY = {DateMethod.DATE_SPINE: 3, DateMethod.AGE_COLUMN: 2, DateMethod.MONTH_SPINE: 1}


@dataclass(frozen=True)
class Candidate:
    """One heuristic reading of a gold table: the date it points at and how sure it is."""

    method: DateMethod
    model: str
    column: str
    date: dt.date
    window: tuple[dt.date, dt.date]
    """Every date in this range explains the evidence equally well."""
    detail: str
    last: dt.date
    """The gold column's last value (a probe rebuild's last value is compared with it)."""


@dataclass(frozen=True)
class Derivation:
    """The conclusion for one task, ready to be written into the suite file."""

    task: str
    date: dt.date | None
    method: DateMethod | None
    evidence: str
    confidence: Confidence | None

    def record(self) -> DateRecord:
        return DateRecord(self.task, self.date, self.method, self.evidence, self.confidence)


async def derive_task(task: TaskSpec, *, verify: bool = True) -> Derivation:
    """Derive one task's date (see the module docstring). ``task`` must have gold."""
    scan = scan_clock_reads(task.project_dir)
    assert task.gold is not None
    if not scan.reads_clock:
        return _clock_free(task, task.gold.db, task.gold.params.condition_tabs)
    candidates = gold_candidates(task.gold.db, scan.models, scan)
    if not candidates:
        return Derivation(task.id, None, None,
                          f"{scan.summary(2)}; no date spine, month spine or age column in the "
                          "gold tables of those models: date unknown", None)
    if verify:
        for cand in candidates:
            verified = await verify_candidate(task, cand)
            if verified is not None:
                graded = await check_graded(task, verified)
                return _conclude(task.id, scan, verified, verified=True, graded=graded)
    return _conclude(task.id, scan, candidates[0], verified=False)


@dataclass(frozen=True)
class GradedCheck:
    """The graded tables rebuilt at the ends of a verified candidate's window."""

    rebuilt: tuple[str, ...]
    """Graded models the project ships SQL for (rebuilt and compared with gold)."""
    unshipped: tuple[str, ...]
    """Graded models the agent writes: their SQL is unknown, so they cannot be rebuilt."""
    reproduced: tuple[dt.date, ...]
    """The dates checked (the window's ends) at which every rebuilt table equals gold."""
    checked: tuple[dt.date, ...]

    def window(self) -> tuple[dt.date, dt.date] | None:
        """The dates shown to reproduce gold: both ends reproduce -> the whole window (the
        evidence's window is one of equal explanations); else the one end that does."""
        if not self.reproduced:
            return None
        return (self.reproduced[0], self.reproduced[-1]) \
            if self.reproduced == self.checked else (self.reproduced[0], self.reproduced[0])


async def check_graded(task: TaskSpec, cand: Candidate) -> GradedCheck:
    """Rebuild the graded models the project ships at the first and the last date of
    ``cand``'s window and compare each with its gold table. A verified candidate alone says
    the clock-reading model (a calendar spine, often) was built on that date; what is scored
    is the graded tables, and only their rebuild says the date reproduces gold (xero001's
    spine matched while nothing graded was checked, and was labelled "high")."""
    assert task.gold is not None
    graded = list(dict.fromkeys(task.gold.params.condition_tabs))
    unshipped = tuple(unshipped_models(task.project_dir, graded))
    rebuilt = tuple(m for m in graded if m not in unshipped)
    lo, hi = cand.window
    days = tuple(sorted({cand.date, lo, hi}))
    if not rebuilt:
        return GradedCheck(rebuilt, unshipped, (), ())
    reproduced = tuple([day for day in days if await _graded_reproduce(task, rebuilt, day)])
    return GradedCheck(rebuilt, unshipped, reproduced, days)


async def _graded_reproduce(task: TaskSpec, models: Sequence[str], day: dt.date) -> bool:
    """Whether ``dbt run --select <models>`` at ``day``, on a copy of the gold database,
    gives tables equal to gold (a failed build is a no)."""
    assert task.gold is not None
    with owned_tempdir("dates") as tmp:
        project = _scratch_project(task, tmp)
        if project is None:
            return False
        env = Clock(day, find_library()).faked_env(os.environ)
        result = await run_dbt(project, ["run", "--select", *models], env=env,
                               timeout=BUILD_TIMEOUT, dbt_executable=str(find_real_dbt()))
        db = profile_db_path(project)
        if not result.ok or db is None:
            return False
        # Trusted, as the gold beside it is (db.connect): the file is what the dataset's own
        # dbt project just built with this process's rights, so locking it down would
        # guard against nothing that build could not already do.
        with open_database(db, untrusted=False) as con:
            con.execute(f"attach {literal(task.gold.db)} as gold (read_only)")
            tables = _tables(con)
            return all(m.lower() in tables
                       and _same_table(con, tables[m.lower()], f"gold.{tables[m.lower()]}")
                       for m in models)


def _clock_free(task: TaskSpec, gold_db: Path, graded: Sequence[str]) -> Derivation:
    """No shipped SQL reads the clock. That is the whole story only when every graded model is
    shipped: the agent writes the others, and their SQL may read the clock, so the verdict is
    then at most "medium", and "low" when their gold tables hold date evidence. That evidence is
    only named, not used as the date: a spine in clock-free data (daily revenue) is common, and
    a wrong fake date would hurt more than the suite's default."""
    clean = "no model, macro or package model reads the clock"
    unknown = unshipped_models(task.project_dir, graded)
    if not unknown:
        return Derivation(task.id, None, DateMethod.CLOCK_INDEPENDENT, clean, Confidence.HIGH)
    caveat = (f"{clean} as shipped, but {len(unknown)} graded model(s) not shipped: their SQL "
              f"is unknown ({', '.join(unknown)})")
    candidates = gold_candidates(gold_db, unknown)
    if not candidates:
        return Derivation(task.id, None, DateMethod.CLOCK_INDEPENDENT,
                          f"{caveat}; their gold tables show no date evidence", Confidence.MEDIUM)
    best = candidates[0]
    return Derivation(task.id, None, DateMethod.CLOCK_INDEPENDENT,
                      f"{caveat}; {best.detail}: if that SQL reads the clock, the gold may have "
                      f"been built on {best.date} (not used; set a manual date to use it)",
                      Confidence.LOW)


def _conclude(task: str, scan: ClockScan, cand: Candidate, *, verified: bool,
              graded: GradedCheck | None = None) -> Derivation:
    reads = scan.summary(1)
    if verified:
        lo, hi = cand.window
        how = (f"rebuilding {cand.model} at {cand.date} reproduces its gold table"
               + (f" (any date in {lo}..{hi} explains the spine; chose the first)"
                  if lo != hi else ""))
        method = DateMethod.VERIFIED if lo == hi else cand.method
        confidence, graded_text = _graded_verdict(cand, graded)
        return Derivation(task, cand.date, method,
                          f"{reads}; {cand.detail}; {how}{graded_text}", confidence)
    confidence = Confidence.MEDIUM if cand.method in (DateMethod.DATE_SPINE,
                                                      DateMethod.AGE_COLUMN) else Confidence.LOW
    lo, hi = cand.window
    window = (f"; any date in {lo}..{hi} explains it, chose the first (nothing narrows it)"
              if lo != hi else "")
    return Derivation(task, cand.date, cand.method,
                      f"{reads}; {cand.detail}{window}; not verified by a rebuild", confidence)


def _graded_verdict(cand: Candidate, graded: GradedCheck | None) -> tuple[Confidence, str]:
    """The confidence a verified candidate earns, and the evidence of the graded rebuild:
    "high" only when rebuilding the graded tables at the date reproduces their gold."""
    if graded is None:
        return Confidence.HIGH, ""
    names = ", ".join(graded.rebuilt)
    not_shipped = (f"; graded {', '.join(graded.unshipped)} not shipped (the agent writes "
                   "it), so not rebuilt" if graded.unshipped else "")
    if not graded.rebuilt:
        return Confidence.MEDIUM, (f"{not_shipped}: the date is that of {cand.model}, not "
                                   "checked against any graded table")
    window = graded.window()
    if window is None or cand.date not in graded.reproduced:
        return Confidence.MEDIUM, (f"; but rebuilding the graded {names} at "
                                   f"{', '.join(map(str, graded.checked))} does not reproduce "
                                   f"gold{not_shipped}")
    lo, hi = window
    checked = ", ".join(map(str, graded.checked))
    span = (f"every date in {lo}..{hi} reproduces gold (checked {checked})" if lo != hi
            else f"{lo} reproduces gold (checked {checked})")
    return Confidence.HIGH, f"; rebuilding the graded {names}: {span}{not_shipped}"


def gold_candidates(gold_db: Path, models: Iterable[str],
                    scan: ClockScan | None = None) -> list[Candidate]:
    """Heuristic candidates from the gold tables named like ``models``, best first. ``scan``
    tells which models end a ``date_spine`` at the clock (an exclusive end)."""
    found: list[Candidate] = []
    with open_database(gold_db, untrusted=False) as con:
        tables = _tables(con)
        for model in models:
            if model.lower() in tables:
                spine = scan.spine_end(model) if scan is not None else None
                found += _table_candidates(con, tables[model.lower()], model, spine)
    return sorted(found, key=lambda c: -_PRIORITY[c.method])


def _tables(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Lower-case table name -> quoted ``schema.table`` (``main`` first, then by schema, the
    first schema wins)."""
    out: dict[str, str] = {}
    for rel in sorted(catalog.relations(con), key=lambda r: r.schema != "main"):
        out.setdefault(rel.name.lower(), qualified(rel.schema, rel.name))
    return out


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(str(r[0]), str(r[1]).upper()) for r in con.execute(f"describe {table}").fetchall()]


def _table_candidates(con: duckdb.DuckDBPyConnection, table: str, model: str,
                      spine_end: SpineEnd | None = None) -> list[Candidate]:
    cols = _columns(con, table)
    dates = [n for n, t in cols if t == "DATE" or t.startswith("TIMESTAMP")]
    ints = [n for n, t in cols if t in ("INTEGER", "BIGINT", "SMALLINT", "HUGEINT", "TINYINT")]
    found = [_exclusive_end(c, spine_end) for d in dates
             if (c := _spine(con, table, model, d)) is not None]
    found += [c for d in dates for i in ints if (c := _age(con, table, model, d, i)) is not None]
    return found


def _spine(con: duckdb.DuckDBPyConnection, table: str, model: str,
           col: str) -> Candidate | None:
    as_date = f"cast({identifier(col)} as date)"
    row = con.execute(
        f"select min({as_date}), max({as_date}), count(distinct {as_date}), "
        f"bool_and(day({as_date}) = 1) "
        f"from {table}").fetchone()
    if row is None or row[0] is None or row[2] < 2:
        return None
    lo, hi, n, firsts = row
    if (hi - lo).days + 1 == n:
        return Candidate(DateMethod.DATE_SPINE, model, col, hi, (hi, hi),
                         f"gold {model}.{col} is a daily spine {lo}..{hi}", hi)
    months = (hi.year - lo.year) * 12 + hi.month - lo.month + 1
    if firsts and months == n:
        return Candidate(DateMethod.MONTH_SPINE, model, col, hi, (hi, _month_end(hi)),
                         f"gold {model}.{col} is a month spine {lo}..{hi}", hi)
    return None


def _exclusive_end(cand: Candidate, spine: SpineEnd | None) -> Candidate:
    """Apply ``date_spine``'s exclusive end: the spine stops one period (plus the end's own
    offset) before the build date. Without such a call, or with an end this module cannot
    read, the candidate stays (the verified rebuild measures any offset)."""
    if spine is None:
        return cand
    call = f"{spine.where} date_spine(datepart={spine.datepart!r}) ends at the clock"
    if spine.offset is None:
        return replace(cand, detail=f"{cand.detail}; {call} through an expression not read "
                                    "here: date taken as the spine's end")
    last = cand.last
    periods = 1 - spine.offset
    if cand.method is DateMethod.DATE_SPINE and spine.datepart == "day":
        day = last + dt.timedelta(days=periods)
        return replace(cand, date=day, window=(day, day),
                       detail=f"{cand.detail}; {call}{_plus(spine.offset)}, excluding it: "
                              f"built on {day}")
    if cand.method is DateMethod.MONTH_SPINE and spine.datepart == "month":
        start = _add_months(last, periods)
        return replace(cand, date=start, window=(start, _month_end(start)),
                       detail=f"{cand.detail}; {call}{_plus(spine.offset)}, excluding its "
                              f"month: built in {start:%Y-%m}")
    return cand


def _plus(offset: int) -> str:
    return f" {offset:+d} {'period' if abs(offset) == 1 else 'periods'}" if offset else ""


def _add_months(first: dt.date, months: int) -> dt.date:
    index = first.year * 12 + first.month - 1 + months
    return dt.date(index // 12, index % 12 + 1, 1)


def _age(con: duckdb.DuckDBPyConnection, table: str, model: str, date_col: str,
         int_col: str) -> Candidate | None:
    date_name, int_name = identifier(date_col), identifier(int_col)
    total = f"cast({date_name} as date) + cast({int_name} as integer)"
    row = con.execute(
        f"select count(distinct {total}), min({total}), count(*) from {table} "
        f"where {date_name} is not null and {int_name} is not null").fetchone()
    if row is None or row[0] != 1 or row[2] < 3:
        return None
    day = row[1]
    return Candidate(DateMethod.AGE_COLUMN, model, int_col, day, (day, day),
                     f"gold {model}.{date_col} + {int_col} is {day} on all {row[2]} rows", day)


def _month_end(day: dt.date) -> dt.date:
    nxt = (day.replace(day=28) + dt.timedelta(days=4)).replace(day=1)
    return nxt - dt.timedelta(days=1)


async def verify_candidate(task: TaskSpec, cand: Candidate) -> Candidate | None:
    """Rebuild ``cand.model`` under the fake clock; return the candidate (corrected for any
    offset the project adds) when the rebuilt table equals the gold table, else ``None``."""
    assert task.gold is not None
    gold_db = task.gold.db
    with owned_tempdir("dates") as tmp:
        project = _scratch_project(task, Path(tmp))
        if project is None:
            return None
        built = await _build(project, cand, cand.date, gold_db)
        if built is True:
            return cand
        if isinstance(built, dt.date):
            shift = _shift(cand, built)  # the probe showed the project's offset
            if shift != cand and await _build(project, shift, shift.date, gold_db) is True:
                return shift
    return None


def _shift(cand: Candidate, built_max: dt.date) -> Candidate:
    """The candidate moved by the offset the probe build measured."""
    if cand.method is DateMethod.MONTH_SPINE:
        probe_months = built_max.year * 12 + built_max.month
        gold_months = cand.last.year * 12 + cand.last.month
        start = _add_months(cand.date.replace(day=1), gold_months - probe_months)
        return replace(cand, date=start, window=(start, _month_end(start)))
    day = cand.date + (cand.last - built_max)
    return replace(cand, date=day, window=(day, day))


def _same_table(con: duckdb.DuckDBPyConnection, table: str, gold_table: str) -> bool:
    """Equal as multisets of rows; different shapes (a set operation error) are not equal."""
    try:
        same = con.execute(
            f"select (select count(*) from {table}) = (select count(*) from {gold_table}) "
            f"and not exists (select * from {table} except all select * from {gold_table}) "
            f"and not exists (select * from {gold_table} except all select * from {table})"
        ).fetchone()
    except duckdb.Error:
        return False
    return bool(same is not None and same[0])


def _scratch_project(task: TaskSpec, tmp: Path) -> Path | None:
    """A copy of the project (no databases, no build output) on a copy of the gold database."""
    project = child(tmp, task.id)
    shutil.copytree(task.project_dir, project, symlinks=True,
                    ignore=shutil.ignore_patterns("*.duckdb", "*.duckdb.wal", "target", "logs"))
    try:  # else the gold copy below, and dbt, would write where the profile names: the dataset
        confine_profile(project, task.project_dir)
    except ValueError:
        return None
    target = profile_db_path(project)
    if target is None or task.gold is None:
        return None
    shutil.copyfile(task.gold.db, target)
    return project


async def _build(project: Path, cand: Candidate, day: dt.date,
                 gold_db: Path) -> bool | dt.date | None:
    """True if the rebuilt table equals gold; else the rebuilt column's max (None if no build)."""
    env = Clock(day, find_library()).faked_env(os.environ)
    result = await run_dbt(project, ["run", "--select", cand.model], env=env,
                           timeout=BUILD_TIMEOUT, dbt_executable=str(find_real_dbt()))
    db = profile_db_path(project)
    if not result.ok or db is None or result.status_of(cand.model) != "success":
        return None
    with open_database(db, untrusted=False) as con:  # trusted: see _graded_reproduce
        con.execute(f"attach {literal(gold_db)} as gold (read_only)")
        table = _tables(con)[cand.model.lower()]
        gold_table = f"gold.{table}"
        if _same_table(con, table, gold_table):
            return True
        if cand.method is DateMethod.AGE_COLUMN:
            return None
        row = con.execute(f"select max(cast({identifier(cand.column)} as date)) "
                          f"from {table}").fetchone()
    return row[0] if row is not None and isinstance(row[0], dt.date) else None


async def derive_all(tasks: Sequence[TaskSpec], *, verify: bool = True) -> list[Derivation]:
    """Derive every task that has gold, one at a time (each rebuild is a dbt process)."""
    return [await derive_task(t, verify=verify) for t in tasks if t.has_gold]


def undated_clock_readers(tasks: Iterable[TaskSpec]) -> tuple[TaskSpec, ...]:
    """The tasks whose shipped SQL reads the clock but which run at the suite default date
    (nothing recorded for them: no date, and not marked clock-independent)."""
    return tuple(t for t in tasks
                 if t.date_source is DateSource.DEFAULT
                 and t.settings.date_method is not DateMethod.CLOCK_INDEPENDENT
                 and t.project_dir.is_dir() and scan_clock_reads(t.project_dir).reads_clock)


def undated_warning(tasks: Iterable[TaskSpec], suite: Suite, *, limit: int = 8) -> str | None:
    """One line for ``run`` and ``list`` (stderr): which clock-reading tasks run at the suite
    default and how to record their own dates; ``None`` when there are none. A date that
    ``audit`` merely suggests is never used, so this is the only place the gap shows."""
    undated = undated_clock_readers(tasks)
    if not undated:
        return None
    ids = [t.id for t in undated]
    shown = ", ".join(ids[:limit]) + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")
    return (f"{len(ids)} task(s) read the clock but have no date in {suite.path}, so their dbt "
            f"runs at the suite default {suite.defaults.date}: {shown}; record their dates with "
            "`spider2local derive-dates` (or set [tasks.<id>] date by hand)")


def derivation_rows(derivations: Sequence[Derivation]) -> list[tuple[str, str, str, str, str]]:
    return [(d.task, d.date.isoformat() if d.date else "-", d.method or "unknown",
             d.confidence or "-", d.evidence) for d in derivations]

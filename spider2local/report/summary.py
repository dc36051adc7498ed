"""The report model: one frozen :class:`RunReport` rebuilt from the run folder on disk.

Never from the runner's memory: the same report must come out after a resume, a re-score, a
merge of shards, or for a run another machine made, with no credentials and without the
dataset. Every renderer (:mod:`.terminal`, :mod:`.markdown`, :mod:`.jsonout`, :mod:`.junit`,
:mod:`.html`) reads this model and nothing else of the run folder (the HTML adds the per-task
files through :mod:`.details`).

The honest headline (README, "how to report a score"): passes over the official denominator,
over the tasks with a gold database, over the runnable ones and over the attempted ones. The
first three are the dataset audit's counts recorded in run.json when the run started
(:func:`spider2local.audit.tasks.denominators`), never numbers written here; a run made before
they were recorded shows only what its folder knows. How many passes are free (the untouched
start database already passes: measured per task at the run's start) and how many are suspect
(the integrity scan's mark, read defensively: a result without one counts as clean) are shown
beside it, because a pass rate means little without them.

Table rates count each graded table of a task; a task that errored before scoring counts all
its graded tables (from the manifest) as failed.

Trials: a run may hold K independent trials of each task. :attr:`RunReport.rows` has one row
per (task, trial), K per selected task (a trial without a result says why, like a task
without one); the counts of :class:`Rates` and :class:`Headline` are then counts of trials,
and the per-task view (:attr:`RunStats.tasks`: trials run, trials passed) feeds the
statistics of :mod:`.stats`: pass@1 with its interval over every denominator above, pass@k
and pass^k, the flaky tasks. A run made before trials existed is a 1-trial run, and every
number of it reads as it always did.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from spider2local.core.codec import dump
from spider2local.core.results import Integrity, Status, TaskResult
from spider2local.core.verdicts import RowDiff, TaskScore
from spider2local.evaluation.serialize import failing_tables
from spider2local.report.stats import (
    Estimate,
    PassK,
    TaskCount,
    flaky_tasks,
    pass_at_1,
    pass_k_table,
)
from spider2local.run import cut as cut_record
from spider2local.run.cut import CutAttempt
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest
from spider2local.sequential.record import SequentialRecord, read_record

TrialKey = tuple[str, int]
"""A result's address in a run: ``(task_id, trial)``."""


class NotAttempted(StrEnum):
    """A selected task without a result: it counts in "of all selected", never "attempted"."""

    SKIPPED = "skipped"
    """It cannot run (a dataset problem or a suite exclusion); the note says why."""
    INTERRUPTED = "interrupted"
    """It started, and the run was stopped (a signal, kill -9) before it finished; a resume
    runs it again."""
    NOT_RUN = "not run"
    """It could run but has no result yet (never started; a resume runs it)."""
    NOT_NEEDED = "not needed"
    """A trial a sequential run (``run --until-decided``) never needed: the comparison was
    decided, or the task was pruned, before it. Saved, not missing: no resume runs it."""


class Verdict(StrEnum):
    """The official verdict as the table shows it."""

    PASS = "pass"
    FAIL = "fail"
    NONE = "-"
    """Not scored: no gold, an error before scoring, or no result at all."""


SUSPECT = Integrity.SUSPECT.value
CLEAN = Integrity.CLEAN.value


@dataclass(frozen=True)
class Tokens:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_creation: int = 0

    @property
    def total(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_creation

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(self.input + other.input, self.output + other.output,
                      self.cache_read + other.cache_read,
                      self.cache_creation + other.cache_creation)


@dataclass(frozen=True)
class Row:
    task_id: str
    status: Status | NotAttempted
    """The result's status, or why there is no result."""
    verdict: Verdict
    tables_passed: int
    tables_total: int
    seconds: float | None
    cost_usd: float | None
    note: str = ""
    """Why it failed or did not run: the error's stage and message, or the failing tables and
    the first diagnostic, or the reason it was skipped."""
    integrity: str | None = None
    """``clean`` or ``suspect`` from the result (``None`` without a result); a result that
    carries no mark (written before the scan existed) reads as ``clean``."""
    free: bool | None = None
    """Whether the untouched start database already passes (``None``: not measured)."""
    tokens: Tokens = field(default_factory=Tokens)
    turns: int = 0
    durations: Mapping[str, float] | None = None
    """Seconds per runner step (prepare, agent, score...), as result.json has them."""
    failing_tables: tuple[str, ...] = ()
    error_stage: str | None = None
    error_kind: str | None = None
    error_message: str | None = None
    diagnostics: str = ""
    """The per-table verdicts and diagnostics as ``score`` prints them (empty: not scored)."""
    trial: int = 1
    """Which trial of the task this row is (1-based)."""
    cut_by_budget: bool = False
    """The run's budget (``--max-cost-usd``) was spent while it ran and its session was stopped
    there (scored as it stood)."""
    row_aligned: bool | None = None
    """The row-aligned check beside the official verdict (docs/scoring.md): None when the
    verdict failed, the check was undecided, or the result predates it."""
    lenient_tables: tuple[str, ...] = ()
    """Graded tables that pass officially although their rows do not line up."""
    row_diffs: tuple[tuple[str, RowDiff], ...] = ()
    """(table, row diff) for every table that fails, officially or row-aligned."""
    failure_class: str | None = None
    """Why a finished trial did not pass, in one word (:mod:`spider2local.core.failure`)."""
    failure_detail: str = ""

    @property
    def lenient(self) -> bool:
        """An official pass whose rows do not line up (the verdict stays a pass)."""
        return self.verdict is Verdict.PASS and self.row_aligned is False

    @property
    def name(self) -> str:
        """``task#trial``: how a row is named where trials are told apart (JUnit, anchors)."""
        return f"{self.task_id}#{self.trial}"


@dataclass(frozen=True)
class TaskRate:
    """One task over its trials."""

    task_id: str
    run: int
    """Trials with a result (the pass rate's denominator)."""
    passed: int
    planned: int
    """Trials the run meant to make of it (K)."""
    free: bool | None = None

    @property
    def count(self) -> TaskCount:
        return TaskCount(self.run, self.passed)

    @property
    def rate(self) -> float | None:
        return self.passed / self.run if self.run else None

    @property
    def flaky(self) -> bool:
        return 0 < self.passed < self.run


@dataclass(frozen=True)
class RunStats:
    """The statistics every format shows (see :mod:`.stats` for how each is computed)."""

    trials: int = 1
    """Trials per task the run planned (K)."""
    tasks: tuple[TaskRate, ...] = ()
    """Every selected task, in the selection's order."""
    pass_at_1: tuple[tuple[str, Estimate], ...] = ()
    """(denominator label, estimate), in the headline's order."""
    pass_k: tuple[PassK, ...] = ()
    """pass@k and pass^k for k = 1..K over the attempted tasks."""
    flaky: tuple[str, ...] = ()
    trials_run: int = 0
    trials_planned: int = 0

    def estimate(self, label: str) -> Estimate | None:
        return next((e for lab, e in self.pass_at_1 if lab == label), None)


@dataclass(frozen=True)
class Rates:
    tasks_passed: int
    tasks_attempted: int
    tasks_total: int
    tables_passed: int
    tables_attempted: int
    tables_total: int
    tasks_suspect: int = 0
    passed_suspect: int = 0
    """Of ``tasks_passed``, how many are suspect (their verdict is kept, shown apart)."""

    @staticmethod
    def ratio(part: int, whole: int) -> float | None:
        return part / whole if whole else None


@dataclass(frozen=True)
class Headline:
    """The numbers every format leads with (see the module docstring)."""

    passed: int
    official: int | None
    """The dataset's task count (68 for Spider2-DBT); ``None``: the run did not record it."""
    with_gold: int | None
    """Tasks with a gold database (64 for Spider2-DBT)."""
    runnable: int | None
    """Tasks runnable on the machine that made the run."""
    attempted: int
    selected: int
    free_passes: int | None
    """Passes whose untouched start database already passes; ``None``: not measured."""
    suspect: int
    suspect_passes: int
    interrupted: int
    tables_passed: int
    tables_attempted: int
    tokens: Tokens
    cost_usd: float | None
    seconds: float
    """Task time summed over tasks (the run's wall time is shorter with --jobs > 1)."""
    stage_seconds: Mapping[str, float]
    """Summed per runner step over every task: where the time went."""
    cut_attempts: int = 0
    """Attempts cut by an interrupt (no result; a resume re-ran them): what they spent is not
    in ``tokens`` or ``cost_usd``, which are the finished trials' (:mod:`spider2local.run.cut`).
    """
    cut_tokens: Tokens = field(default_factory=lambda: Tokens())
    cut_cost_usd: float | None = None
    lenient_passes: int = 0
    """Of ``passed``, official passes whose rows do not line up (``row_aligned`` false)."""
    failure_classes: Mapping[str, int] = field(default_factory=dict)
    """Finished trials that did not pass, counted by ``failure_class`` (most frequent first)."""
    row_checked_passes: int = 0
    """Of ``passed``, how many carry a row-aligned verdict (results scored before the check
    carry none: then the headline says nothing about lenient passes)."""

    def denominators(self) -> list[tuple[str, int]]:
        """``(label, denominator)`` in the order they are quoted; unknown ones are left out."""
        pairs = [("official", self.official), ("with gold", self.with_gold),
                 ("runnable", self.runnable), ("attempted", self.attempted)]
        return [(label, n) for label, n in pairs if n is not None]


@dataclass(frozen=True)
class ReplaySummary:
    """What ``run --replay`` made of the run: which recorded run its trials replayed, and
    which of them stopped at a divergence (the agent asked something its recording never
    answered), with the divergence's message, named as the table names them."""

    run: str
    trials: int
    lenient: bool
    stopped: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run, "trials": self.trials, "lenient": self.lenient,
                "stopped": [{"trial": name, "message": message}
                            for name, message in self.stopped]}


def replay_summary(rows: Sequence[Row], results: Mapping[TrialKey, TaskResult],
                   trials: int) -> ReplaySummary | None:
    """The :class:`ReplaySummary` of a replayed run's results (None: no trial was replayed).
    A result's ``replayed`` record is read defensively: the file is the agent's neighbour."""
    names = {(r.task_id, r.trial): r.name if trials > 1 else r.task_id for r in rows}
    runs, lenient, stopped, count = set(), False, [], 0
    for (tid, trial), result in sorted(results.items()):
        record = result.replayed
        if not isinstance(record, Mapping):
            continue
        count += 1
        runs.add(str(record.get("run")))
        lenient = lenient or record.get("lenient") is True
        if isinstance(record.get("stopped"), str):
            stopped.append((names.get((tid, trial), tid), str(record["stopped"])))
    if not count:
        return None
    return ReplaySummary(", ".join(sorted(runs)), count, lenient, tuple(stopped))


@dataclass(frozen=True)
class RunReport:
    run_id: str
    rows: tuple[Row, ...]
    rates: Rates
    headline: Headline
    isolation: str = "none"
    """The isolation mode the run recorded (``none`` when it recorded none)."""

    @property
    def unsealed(self) -> bool:
        """Made with ``--isolation none``: its agents could reach gold and the scorer, and only
        detection watched them. Every report format says so (docs/isolation.md)."""
        return self.isolation == "none"
    agent: str | None = None
    agent_command: str | None = None
    """The shell command of a command agent (``--agent-command``, ``[agents.NAME]``)."""
    agent_apis: tuple[str, ...] = ()
    """The model APIs it was served (``--agent-api``, ``[agents.NAME] apis``)."""
    model: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    interrupted: bool = False
    dataset: str | None = None
    stats: RunStats = field(default_factory=RunStats)

    @property
    def trials(self) -> int:
        return self.stats.trials
    not_run_for_budget: int = 0
    """Trials left unstarted because the run's budget (``--max-cost-usd``) was reached."""
    max_cost_usd: float | None = None
    """The run's budget as its last invocation set it (None: none)."""
    spent_usd: float | None = None
    """What the run's budget counted as spent (run.json), cut attempts included."""
    sequential: SequentialRecord | None = None
    """The answer of a ``run --against RUN_A --until-decided`` (its ``sequential.json``)."""
    replay: ReplaySummary | None = None
    """What a ``run --replay`` replayed (None: not a replay)."""

    @property
    def cut_by_budget(self) -> int:
        """Trials the run's budget stopped mid-way (counted from their results, so a resume
        or a merge keeps them; ``not_run_for_budget`` is the last invocation's)."""
        return sum(r.cut_by_budget for r in self.rows)

    @property
    def cost_usd(self) -> float | None:
        return self.headline.cost_usd


def _verdict(result: TaskResult) -> Verdict:
    if result.passed is None:
        return Verdict.NONE
    return Verdict.PASS if result.passed else Verdict.FAIL


def _integrity(result: TaskResult) -> str:
    """The scan's mark, read defensively: absent (older results, or a runner without the scan)
    or unknown values read as clean; only an explicit ``suspect`` is suspect."""
    value = getattr(result, "integrity", None)
    return SUSPECT if str(getattr(value, "value", value)) == SUSPECT else CLEAN


def score_of(result: TaskResult) -> TaskScore | None:
    """The per-table score a result holds, or None (a result without one; a hand-edited score
    makes the whole result.json unreadable: the task counts as unfinished)."""
    return result.score


def _note(result: TaskResult, failing: Sequence[str], first: str,
          lenient: Sequence[str] = ()) -> str:
    parts = []
    if result.error is not None:
        parts.append(f"{result.error.stage.value}: {result.error.message}")
    if result.passed is False:
        parts.append(f"failed {', '.join(failing)}: {first}" if failing else first)
    if result.passed and lenient:
        parts.append(f"lenient pass: the rows of {', '.join(lenient)} do not line up "
                     "(row_aligned false)")
    return "; ".join(p for p in parts if p)


def _row_facts(score: TaskScore | None, passed: bool | None
               ) -> tuple[bool | None, tuple[str, ...], tuple[tuple[str, RowDiff], ...]]:
    """(row_aligned, lenient tables, row diffs) of a result's score; the task's row-aligned
    verdict only when its official verdict passed (the score's own verdict is the result's)."""
    if score is None:
        return None, (), ()
    aligned = score.row_aligned if passed else None
    lenient = tuple(t.name for t in score.tables if t.lenient) if passed else ()
    diffs = tuple((t.name, t.row_diff) for t in score.tables if t.row_diff is not None)
    return aligned, lenient, diffs


def _row(result: TaskResult, graded: int, free: bool | None) -> Row:
    """The row of one finished trial."""
    failing, first, text = failing_tables(result.score)
    aligned, lenient, diffs = _row_facts(score_of(result), result.passed)
    failure, detail = result.failure
    u = result.usage
    error = result.error
    return Row(result.task_id, result.status, _verdict(result), result.tables_passed,
               result.tables_total or graded, result.durations.get("total"), u.cost_usd,
               _note(result, failing, first, lenient), _integrity(result), free,
               Tokens(u.input_tokens, u.output_tokens, u.cache_read_tokens,
                      u.cache_creation_tokens), u.turns, dict(result.durations), failing,
               error.stage.value if error else None, error.kind.value if error else None,
               error.message if error else None, text, result.trial,
               result.cut_by_budget, aligned, lenient, diffs,
               None if failure is None else failure.value, detail)


def _selection(manifest: RunManifest | None,
               results: Mapping[TrialKey, TaskResult]) -> list[dict[str, Any]]:
    if manifest is not None and manifest.tasks:
        return [dump(t) for t in manifest.tasks]
    graded: dict[str, int] = {}
    for (tid, _), r in sorted(results.items()):
        graded.setdefault(tid, r.tables_total)
    return [{"id": tid, "tables": tables, "skipped": None} for tid, tables in graded.items()]


def planned_trials(manifest: RunManifest | None,
                   results: Mapping[TrialKey, TaskResult]) -> int:
    """K: the run's ``trials`` setting (read defensively; absent before trials existed: 1),
    raised to the highest trial found, so no finished trial is ever left out of the report."""
    value = manifest.setting("trials") if manifest is not None else None
    planned = value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else 1
    return max([planned, *(trial for _, trial in results)])


def was_interrupted(manifest: RunManifest | None) -> bool:
    """Whether the run's last invocation was stopped (:attr:`RunManifest.was_interrupted`)."""
    return manifest is not None and manifest.was_interrupted


def build_rows(selection: Sequence[Mapping[str, Any]],
               results: Mapping[TrialKey, TaskResult] | Mapping[str, TaskResult],
               *, interrupted: bool = False, started: frozenset[str] = frozenset(),
               trials: int = 1) -> list[Row]:
    """``trials`` rows per selected task, one per trial. Without a result: skipped (cannot
    run), interrupted (it started, in ``started``, and the run was stopped) or not run.
    ``results`` is keyed by (task, trial); a mapping by task id alone is read as trial 1."""
    found: dict[TrialKey, TaskResult] = {
        (key if isinstance(key, tuple) else (key, result.trial)): result
        for key, result in results.items()}
    rows = []
    for item in selection:
        tid, graded = str(item["id"]), int(item.get("tables") or 0)
        free = item.get("free") if isinstance(item.get("free"), bool) else None
        for trial in range(1, trials + 1):
            result = found.get((tid, trial))
            if result is not None:
                rows.append(_row(result, graded, free))
            elif item.get("skipped"):
                rows.append(Row(tid, NotAttempted.SKIPPED, Verdict.NONE, 0, graded, None,
                                None, str(item["skipped"]), free=free, trial=trial))
            elif interrupted and tid in started:
                rows.append(Row(tid, NotAttempted.INTERRUPTED, Verdict.NONE, 0, graded, None,
                                None, "cut by an interrupt; a resume runs it again",
                                free=free, trial=trial))
            else:
                rows.append(Row(tid, NotAttempted.NOT_RUN, Verdict.NONE, 0, graded, None, None,
                                free=free, trial=trial))
    return rows


def compute_rates(rows: Sequence[Row]) -> Rates:
    attempted = [r for r in rows if isinstance(r.status, Status)]
    return Rates(
        tasks_passed=sum(r.verdict is Verdict.PASS for r in rows),
        tasks_attempted=len(attempted), tasks_total=len(rows),
        tables_passed=sum(r.tables_passed for r in rows),
        tables_attempted=sum(r.tables_total for r in attempted),
        tables_total=sum(r.tables_total for r in rows),
        tasks_suspect=sum(r.integrity == SUSPECT for r in rows),
        passed_suspect=sum(r.integrity == SUSPECT and r.verdict is Verdict.PASS for r in rows),
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def task_rates(rows: Sequence[Row], trials: int = 1) -> list[TaskRate]:
    """Per task, in row order: trials with a result and trials passed."""
    grouped: dict[str, list[Row]] = {}
    for r in rows:
        grouped.setdefault(r.task_id, []).append(r)
    return [TaskRate(tid, sum(isinstance(r.status, Status) for r in group),
                     sum(r.verdict is Verdict.PASS for r in group), trials, group[0].free)
            for tid, group in grouped.items()]


def compute_stats(rows: Sequence[Row], headline: Headline, trials: int = 1) -> RunStats:
    """pass@1 over each of the headline's denominators (those the run knows; "of all
    selected" when it recorded none), pass@k and pass^k over the attempted tasks, the flaky
    tasks. A denominator smaller than the tasks attempted (a hand-edited run.json) has no
    estimate rather than a wrong one."""
    tasks = task_rates(rows, trials)
    counts = [t.count for t in tasks if t.run]
    labels = headline.denominators()
    if headline.official is None:
        labels.append(("of all selected", headline.selected))
    estimates = []
    for label, size in labels:
        try:
            estimates.append((label, pass_at_1(counts, size)))
        except ValueError:  # no tasks, or fewer than attempted
            continue
    return RunStats(
        trials=trials, tasks=tuple(tasks), pass_at_1=tuple(estimates),
        pass_k=tuple(pass_k_table(counts, trials)),
        flaky=tuple(flaky_tasks({t.task_id: t.count for t in tasks})),
        trials_run=sum(t.run for t in tasks), trials_planned=len(rows))


def compute_headline(rows: Sequence[Row], rates: Rates,
                     denominators: Mapping[str, Any] | None,
                     cut_attempts: Sequence[CutAttempt] = ()) -> Headline:
    counts = denominators if isinstance(denominators, Mapping) else {}
    passes = [r for r in rows if r.verdict is Verdict.PASS]
    measured = [r for r in rows if isinstance(r.status, Status) and r.free is not None]
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    stages: dict[str, float] = {}
    for r in rows:
        for step, secs in (r.durations or {}).items():
            if step != "total":
                stages[step] = stages.get(step, 0.0) + secs
    tokens = Tokens()
    for r in rows:
        tokens += r.tokens
    cut = cut_record.total(cut_attempts)
    return Headline(
        passed=rates.tasks_passed, official=_count(counts.get("official")),
        with_gold=_count(counts.get("with_gold")), runnable=_count(counts.get("runnable")),
        attempted=len({r.task_id for r in rows if isinstance(r.status, Status)}),
        selected=len({r.task_id for r in rows}),
        free_passes=sum(bool(r.free) for r in passes) if measured else None,
        suspect=rates.tasks_suspect, suspect_passes=rates.passed_suspect,
        interrupted=sum(r.status is NotAttempted.INTERRUPTED for r in rows),
        tables_passed=rates.tables_passed, tables_attempted=rates.tables_attempted,
        tokens=tokens, cost_usd=sum(costs) if costs else None,
        seconds=sum(r.seconds or 0.0 for r in rows), stage_seconds=stages,
        cut_attempts=len(cut_attempts), cut_tokens=Tokens(
            cut.input_tokens, cut.output_tokens, cut.cache_read_tokens,
            cut.cache_creation_tokens), cut_cost_usd=cut.cost_usd,
        lenient_passes=sum(r.lenient for r in passes),
        failure_classes=class_counts(rows),
        row_checked_passes=sum(r.row_aligned is not None for r in passes))


def class_counts(rows: Sequence[Row]) -> dict[str, int]:
    """Trials per failure class, most frequent first (ties by name)."""
    counts: dict[str, int] = {}
    for r in rows:
        if r.failure_class:
            counts[r.failure_class] = counts.get(r.failure_class, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def isolation_of(manifest: RunManifest | Mapping[str, Any] | None) -> str:
    """The isolation mode a run recorded, read defensively (a string, or a mapping with a
    ``mode``); ``none`` for runs that recorded nothing, which had no isolation."""
    if isinstance(manifest, RunManifest):
        return manifest.isolation_mode
    try:  # run.json's one reading of it, whatever shape a version wrote
        return RunManifest.from_json({"isolation": manifest.get("isolation")}
                                     if manifest else {}).isolation_mode
    except ValueError:
        return "none"


def agent_command_of(manifest: RunManifest | None) -> str | None:
    """The command a command agent ran, as run.json's settings recorded it."""
    value = manifest.setting("agent_command") if manifest is not None else None
    return value if isinstance(value, str) else None


def agent_apis_of(manifest: RunManifest | None) -> tuple[str, ...]:
    """The model APIs a command agent was served, as run.json's settings recorded them."""
    value = manifest.setting("agent_apis") if manifest is not None else None
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


def _started(folder: RunFolder, task_id: str, trial: int = 1) -> bool:
    """Whether the trial's folder exists (a run began it); a link in its place is not ours."""
    try:
        path = folder.trial_dir(task_id, trial)
    except Exception:  # a link or a bad id: not a folder of this run
        return False
    return path.is_dir() and not path.is_symlink()


def load_report(folder: RunFolder) -> RunReport:
    """The report of the run in ``folder`` (needs nothing else: no dataset, no credentials)."""
    report = build_report(folder.run_id, folder.read_manifest(), folder.trial_results(),
                          started=lambda tid: _started(folder, tid),
                          cut_attempts=cut_record.read(folder.root))
    record = read_record(folder.root)
    return replace(report, rows=unneeded(report.rows, record), sequential=record)


def unneeded(rows: tuple[Row, ...], record: SequentialRecord | None) -> tuple[Row, ...]:
    """The trials a finished sequential run never ran are *not needed*, not "not run" (which
    says a resume would run them): its decision, or the pruning before it, made them
    unnecessary. The counts are the same either way (neither is attempted)."""
    if record is None or not record.decision.final:
        return rows
    note = (f"not needed: the sequential comparison against run {record.against_id} ended "
            f"({record.decision.value})")
    return tuple(replace(r, status=NotAttempted.NOT_NEEDED, note=note)
                 if r.status is NotAttempted.NOT_RUN else r for r in rows)


def build_report(run_id: str, manifest: RunManifest | None,
                 results: Mapping[TrialKey, TaskResult], *,
                 started: Callable[[str], bool] = lambda tid: False,
                 cut_attempts: Sequence[CutAttempt] = ()) -> RunReport:
    """The report of a run from its manifest and its trials' results (what
    :func:`load_report` read from the folder); ``started`` says whether a task without a
    result was begun."""
    interrupted = was_interrupted(manifest)
    selection = _selection(manifest, results)
    done = {tid for tid, _ in results}
    begun = frozenset(str(t["id"]) for t in selection
                      if str(t["id"]) not in done and started(str(t["id"])))
    trials = planned_trials(manifest, results)
    rows = tuple(build_rows(selection, results, interrupted=interrupted, started=begun,
                            trials=trials))
    rates = compute_rates(rows)
    headline = compute_headline(rows, rates, manifest.denominators if manifest else None,
                                cut_attempts)
    return RunReport(
        run_id, rows, rates, headline,
        isolation=isolation_of(manifest), agent=manifest.agent if manifest else None,
        agent_command=agent_command_of(manifest), agent_apis=agent_apis_of(manifest),
        model=manifest.model if manifest else None,
        started_at=manifest.started_at if manifest else None,
        finished_at=manifest.finished_at if manifest else None, interrupted=interrupted,
        dataset=manifest.dataset if manifest else None,
        stats=compute_stats(rows, headline, trials),
        not_run_for_budget=(manifest.not_run_for_budget or 0) if manifest else 0,
        max_cost_usd=_number(manifest.setting("max_cost_usd")) if manifest else None,
        spent_usd=manifest.spent_usd if manifest else None,
        replay=replay_summary(rows, results, trials))


def _number(value: object) -> float | None:
    """A number run.json's settings hold, read defensively (a hand-edited file)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)

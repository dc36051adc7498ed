"""Deadlines of the stages that read the agent's database (checkpoint, score), fitted to the
task: the one owner of the rule (:func:`derive`).

Why: a fixed ``--stage-timeout`` (600 s) must fit the slowest honest stage of any task, so a
graded table left as a view that never finishes held a task for 600 s per stage (a task whose
agent deadline was 45 s was still not done after 240 s; issue 33). But each task's honest cost
is known before any agent starts: the run's free-pass baseline
(:func:`~spider2local.sandbox.scoring.score_starts_sandboxed`) snapshots and scores every
untouched start database in one reader child and reports, per task, the seconds each took
(:class:`StageCosts`). An agent's finished database is the start database plus the graded
tables, of the size gold has, so its honest checkpoint and score cost about what that work
cost on the start database; a stage that takes ten times as long (and at least half a minute)
is held by what the agent left, and fails as the agent's doing
(:class:`~spider2local.exceptions.DeadlinePassed`). Where nothing was measured (the baseline
child died, no start database) the stage keeps ``--stage-timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass

FACTOR = 10.0
"""How many times the measured cost a stage may take. The measure is taken once, at the run's
start, with no agent running; the stage itself runs beside ``--jobs`` agents and dbt runs on a
shared machine (2 cores here: dbt's own time measured 2-4.5x slower under load, NOTES.md) and
reads a database that gained the graded tables. 10x covers that with room to spare and still
ends a hang in seconds to a minute for every task measured (0.1-3 s each)."""
FLOOR = 30.0
"""Seconds a derived deadline never goes below: each stage also starts a fresh sandboxed
interpreter importing DuckDB (and pandas for the scorer), 1.0-1.3 s idle and 2.6-3.3 s under
load, which the measure in an already started child does not include, and the timer's own
resolution makes sub-second measures meaningless. 30 s is ten times the worst start measured."""

CHECKPOINT, SCORE = "checkpoint", "score"


@dataclass(frozen=True)
class StageCosts:
    """Seconds the baseline child spent on one task's untouched start database: opening and
    snapshotting it (``checkpoint``'s measure: the same file opened and its catalog read, as
    a checkpoint opens it and replays its WAL) and scoring it against gold (``score``'s)."""

    checkpoint: float | None = None
    score: float | None = None

    def of(self, stage: str) -> float | None:
        return {CHECKPOINT: self.checkpoint, SCORE: self.score}.get(stage)


@dataclass(frozen=True)
class StageDeadline:
    """A stage's deadline and, in words, where it comes from (said in the result's error
    when it passes, and in the task's transcript)."""

    stage: str
    seconds: float
    basis: str
    derived: bool

    def to_json(self) -> dict[str, object]:
        return {"seconds": round(self.seconds, 3), "derived": self.derived, "basis": self.basis}


def derive(stage: str, measured: float | None, cap: float) -> StageDeadline:
    """The deadline of ``stage``: :data:`FACTOR` times ``measured`` (its seconds on the task's
    untouched start database at the run's start), at least :data:`FLOOR`, never above ``cap``
    (``--stage-timeout``, also the deadline when nothing was measured)."""
    if measured is None or measured < 0:
        return StageDeadline(stage, cap, "--stage-timeout (no cost measured on the task's "
                                         "start database at the run's start)", False)
    seconds = min(cap, max(FLOOR, FACTOR * measured))
    basis = (f"derived from {measured:.2f}s, what the {stage} work cost on the task's "
             f"untouched start database at the run's start: {FACTOR:g}x, at least {FLOOR:g}s, "
             f"at most --stage-timeout {cap:g}s")
    return StageDeadline(stage, seconds, basis, True)


def deadlines(costs: StageCosts | None, cap: float) -> dict[str, StageDeadline]:
    """Every stage's :func:`derive` for one task (``costs`` ``None``: nothing measured)."""
    costs = costs or StageCosts()
    return {stage: derive(stage, costs.of(stage), cap) for stage in (CHECKPOINT, SCORE)}

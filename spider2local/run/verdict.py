"""The verdict of one trial, as its result records it: the one owner of the status rule.

The runner (scoring a workspace) and ``score RUN_DIR`` (re-scoring a kept database) used to
decide the status each on its own; the rule is here once: a score that passes is ``passed``,
one that does not is ``failed``, and a trial that reached its deadline is ``timeout`` whatever
its score (the official benchmark scores what a timed-out agent left, and the report shows the
timeout). An error before any score is ``error`` with its :class:`TaskError`; no gold is
``unscored``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from spider2local.core.results import ErrorKind, Stage, Status, TaskError
from spider2local.core.verdicts import TaskScore


@dataclass(frozen=True)
class Verdict:
    """The verdict fields of a :class:`~spider2local.core.results.TaskResult`."""

    status: Status
    passed: bool | None = None
    tables_passed: int = 0
    tables_total: int = 0
    score: TaskScore | None = None
    """The evaluation's verdict in full (per-table verdicts and diagnostics)."""
    error: TaskError | None = None

    @classmethod
    def scored(cls, score: TaskScore, *, timed_out: bool = False,
               error: TaskError | None = None) -> Verdict:
        """The verdict of a scored database (see the module docstring for the rule)."""
        verdict = cls(Status.PASSED if score.passed else Status.FAILED, score.passed,
                      score.tables_passed, score.tables_total, score, error)
        return verdict.timed_out() if timed_out else verdict

    @classmethod
    def errored(cls, error: TaskError, *, tables_total: int = 0) -> Verdict:
        """No verdict: a stage failed before any score (``error.kind`` says whose fault)."""
        return cls(Status.ERROR, error=error, tables_total=tables_total)

    @classmethod
    def refused(cls, error: TaskError, *, tables_total: int) -> Verdict:
        """A database the agent made unscoreable (a link out of its workspace): failed, with
        every graded table counted as failed."""
        return cls(Status.FAILED, False, 0, tables_total, error=error)

    @classmethod
    def unscored(cls) -> Verdict:
        return cls(Status.UNSCORED)

    def timed_out(self) -> Verdict:
        return replace(self, status=Status.TIMEOUT)

    def after_agent(self, agent_error: str | None, *, timed_out: bool,
                    infrastructure: bool) -> Verdict:
        """The verdict with how the agent's work ended: a deadline makes it ``timeout``, and
        the agent's error is recorded beside the verdict (unless a later stage's is)."""
        verdict = self.timed_out() if timed_out else self
        if (timed_out or agent_error) and verdict.error is None:
            kind = (ErrorKind.TIMEOUT if timed_out else ErrorKind.INFRASTRUCTURE
                    if infrastructure else ErrorKind.AGENT)
            verdict = replace(verdict, error=TaskError(Stage.AGENT, kind, agent_error or ""))
        return verdict

    def fields(self) -> dict[str, Any]:
        """As keyword arguments of ``TaskResult`` (or ``dataclasses.replace`` of one)."""
        return {"status": self.status, "passed": self.passed,
                "tables_passed": self.tables_passed, "tables_total": self.tables_total,
                "score": self.score, "error": self.error}

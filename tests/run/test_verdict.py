"""The one status rule, shared by the runner and ``score RUN_DIR``."""

from __future__ import annotations

from spider2local.core.results import ErrorKind, Stage, Status, TaskError
from spider2local.core.verdicts import TableScore, TaskScore
from spider2local.run.verdict import Verdict


def table(name: str, passed: bool) -> TableScore:
    return TableScore(name=name, passed=passed, gold_rows=1, result_rows=1)


def test_scored_timed_out_and_agent_errors() -> None:
    good = TaskScore(True, (table("a", True),))
    bad = TaskScore(False, (table("a", True), table("b", False)))
    assert Verdict.scored(good).status is Status.PASSED
    failed = Verdict.scored(bad)
    assert (failed.status, failed.passed, failed.tables_passed, failed.tables_total) == \
        (Status.FAILED, False, 1, 2)
    # a deadline is a timeout whatever the score, and the verdict is kept beside it
    late = Verdict.scored(good).after_agent("deadline", timed_out=True, infrastructure=False)
    assert (late.status, late.passed) == (Status.TIMEOUT, True)
    assert late.error is not None and late.error.kind is ErrorKind.TIMEOUT
    # rescore of a timed-out trial keeps the timeout (the same rule)
    assert Verdict.scored(bad, timed_out=True).status is Status.TIMEOUT
    crashed = Verdict.scored(bad).after_agent("boom", timed_out=False, infrastructure=True)
    assert crashed.status is Status.FAILED and crashed.error is not None
    assert crashed.error.kind is ErrorKind.INFRASTRUCTURE
    # a later stage's error is not replaced by the agent's
    scoring = Verdict.errored(TaskError(Stage.SCORE, ErrorKind.EXCEPTION, "x"))
    assert scoring.after_agent("boom", timed_out=False, infrastructure=False).error == \
        scoring.error
    assert Verdict.unscored().fields()["status"] is Status.UNSCORED

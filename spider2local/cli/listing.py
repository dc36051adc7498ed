"""``spider2local list``: what a dataset holds and whether each task can run."""

from __future__ import annotations

from typing import Any

from spider2local.core.table import render_table
from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.run.selection import Shard, select_tasks
from spider2local.suite.model import DateMethod, DateSource


def _date_text(task: TaskSpec) -> str:
    """The date ``run`` will use (``TaskSpec.date``) and whose it is."""
    method = task.settings.date_method
    if task.date_source is DateSource.TASK:
        return f"{task.date} ({method or 'set'})"
    if method is DateMethod.CLOCK_INDEPENDENT:
        return f"{task.date} (default; clock-independent)"
    return f"{task.date} (default)"


def listed_tasks(data: Dataset, subset: str | None = None) -> tuple[TaskSpec, ...]:
    """The tasks ``list`` shows: all of them, or those ``run --subset SUBSET`` would select
    (resolved by the run's own selection, so an unknown subset or a subset naming unknown ids
    is the same one-line error as in ``run``)."""
    if subset is None:
        return data.tasks
    chosen = set(select_tasks(data, subset=subset).ids)
    return tuple(t for t in data.tasks if t.id in chosen)


def listing_text(data: Dataset, subset: str | None = None) -> str:
    tasks = listed_tasks(data, subset)
    rows = [(t.id, t.status, _date_text(t), ", ".join(t.graded_tables) or "-") for t in tasks]
    runnable = sum(t.runnable for t in tasks)
    table = render_table(("task", "status", "fake date", "graded tables"), rows, max_width=70)
    counted = (f"{len(tasks)} tasks" if subset is None
               else f"{len(tasks)} of {len(data.tasks)} tasks in subset {subset!r}")
    return f"{table}\n\n{counted}, {runnable} runnable ({data.root})"


def warning_lines(data: Dataset) -> list[str]:
    """The dataset's file-level warnings (skipped lines, evaluations without a task) as printed
    on stderr by ``list`` and at the start of ``run``."""
    return [f"warning: {warning}" for warning in data.warnings]


def listing_json(data: Dataset, subset: str | None = None) -> dict[str, Any]:
    return {
        "dataset": str(data.root),
        "suite": str(data.suite.path),
        "subset": subset,
        "warnings": list(data.warnings),
        "tasks": [{
            "id": t.id,
            "runnable": t.runnable,
            "status": t.status,
            "problems": [str(p) for p in t.problems],
            "excluded": t.excluded,
            "note": t.settings.note,
            "fake_date": t.date.isoformat(),
            "date_source": t.date_source,
            "date_method": t.settings.date_method,
            "date_evidence": t.settings.date_evidence,
            "graded_tables": list(t.graded_tables),
            "has_gold": t.has_gold,
            "has_solution": t.solution_dir is not None,
        } for t in listed_tasks(data, subset)],
    }


def shard_matrix(data: Dataset, count: int, subset: str | None = None,
                 trials: int = 1) -> dict[str, Any]:
    """The shards of ``run --subset SUBSET --shard K/N --trials T``, as a GitHub Actions matrix
    (``{"include": [{"shard": "K/N", "tasks": n, "trials": T, "ids": [...]}, ...]}``, given to
    ``strategy.matrix`` through ``fromJSON``). Computed by the selection ``run`` uses, so each
    matrix job runs exactly its row. Empty shards (more shards than tasks) are left out: a job
    that selects nothing would still pay for a runner. The object holds only ``include``,
    as any other key would become a matrix dimension.

    Trials run inside each shard's job (every row carries ``trials``), not as a matrix
    dimension of their own: the job's ``--jobs`` limiter then interleaves the trials of its
    tasks (trial 1 of each first, so a job cut by its time limit or the budget is still an
    even sample), a task's trials share one dataset download and setup, every (task, trial)
    lives in exactly one job so ``merge`` joins disjoint pieces, and the matrix stays within
    GitHub's 256 jobs; more shards give the same parallelism."""
    rows = []
    for index in range(1, count + 1):
        ids = select_tasks(data, subset=subset, shard=Shard(index, count)).ids
        if ids:
            rows.append({"shard": f"{index}/{count}", "tasks": len(ids), "trials": trials,
                         "ids": list(ids)})
    return {"include": rows}


def shard_text(matrix: dict[str, Any]) -> str:
    rows = [(r["shard"], r["tasks"], r.get("trials", 1), " ".join(r["ids"]))
            for r in matrix["include"]]
    return render_table(("shard", "tasks", "trials", "ids"), rows, max_width=90)

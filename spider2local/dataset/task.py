"""The task model: what the runner knows about one task, its gold, and a loaded dataset.

:mod:`.load` builds these from upstream's layout; every later stage reads them.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from pathlib import Path

from spider2local.core import upstream
from spider2local.dataset.problems import Problem
from spider2local.evaluation.params import EvalParams
from spider2local.suite.model import DateSource, Suite, TaskSettings

TASKS_FILE = upstream.TASKS_FILE
EVAL_FILE = upstream.EVAL_FILE


@dataclass(frozen=True)
class Gold:
    """What a task is scored against: a gold database that exists and reads as DuckDB, and the
    evaluation parameters naming the graded tables in it. One value, so "has gold" is a single
    ``is not None`` and no caller can hold a database without its parameters or the reverse."""

    db: Path
    params: EvalParams


@dataclass(frozen=True)
class TaskSpec:
    """Everything the runner needs to know about one task, and why it may not run."""

    id: str
    instruction: str
    project_dir: Path
    start_db: Path | None
    gold: Gold | None
    """``None`` when the task cannot be scored (its reason is among ``problems``)."""
    settings: TaskSettings
    date: dt.date
    """The fake date every dbt process of this task sees (``Suite.run_date``)."""
    date_source: DateSource
    """Whether ``date`` is the task's own or the suite default."""
    graded_tables: tuple[str, ...] = ()
    """The tables the evaluation config grades, known even when the gold file is missing or
    unusable (listings and the audit still name them); ``gold.params.condition_tabs`` when
    there is gold."""
    problems: tuple[Problem, ...] = ()
    solution_dir: Path | None = None

    @property
    def dataset_root(self) -> Path:
        """The dataset folder the task was loaded from (its project is ``examples/<id>``)."""
        return self.project_dir.parent.parent

    @property
    def eval_file(self) -> Path:
        return self.dataset_root / EVAL_FILE

    @property
    def excluded(self) -> str | None:
        return self.settings.exclude

    @property
    def runnable(self) -> bool:
        return not self.problems and self.excluded is None

    @property
    def has_gold(self) -> bool:
        return self.gold is not None

    @property
    def status(self) -> str:
        """One short phrase for listings: ``runnable``, ``excluded: …`` or the first problem."""
        if self.excluded is not None:
            return f"excluded: {self.excluded}"
        if self.problems:
            more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            return f"{self.problems[0]}{more}"
        return "runnable"


@dataclass(frozen=True)
class Dataset:
    root: Path
    suite: Suite
    tasks: tuple[TaskSpec, ...]
    warnings: tuple[str, ...] = ()

    def ids(self) -> tuple[str, ...]:
        return tuple(t.id for t in self.tasks)

    def get(self, task_id: str) -> TaskSpec | None:
        return self._by_id.get(task_id)

    @functools.cached_property
    def _by_id(self) -> dict[str, TaskSpec]:
        """Ids to specs, the first of duplicates (as the old scan found): a scan per lookup made
        selecting 20,000 ids take 27 s (see benchmarks/selection.py)."""
        index: dict[str, TaskSpec] = {}
        for task in self.tasks:
            index.setdefault(task.id, task)
        return index

"""What a suite file says, as frozen data: dataset root, run defaults, per-task settings, subsets.

:mod:`.load` builds these from ``tasks.toml`` (strictly); :mod:`.edit` writes keys back in place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from spider2local.sandbox.isolation import Isolation

SAMPLE = "sample"
"""The dataset root value that means "the bundled sample suite"."""

DEFAULT_DATE = dt.date(2024, 9, 15)
"""Fallback fake date. Spider2-DBT's gold was built around mid-September 2024 (no official date
exists); any fixed date beats today's, which makes results drift with the calendar."""



class DateMethod(StrEnum):
    """How a task's fake date was found (``spider2local.clock.dates`` explains each)."""

    VERIFIED = "verified"
    DATE_SPINE = "date-spine"
    MONTH_SPINE = "month-spine"
    AGE_COLUMN = "age-column"
    MANUAL = "manual"
    """Set by a person; derive-dates keeps it unless it verifies another date."""
    CLOCK_INDEPENDENT = "clock-independent"
    """The project never reads the clock: any date gives the same result."""


class DateSource(StrEnum):
    """Whose date a task runs at (:meth:`Suite.run_date` decides; every command shows it)."""

    TASK = "task"
    """The task's own ``date`` in the suite file."""
    DEFAULT = "default"
    """The suite's ``[run] date``: the task has none of its own."""


class Confidence(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


MIN_THINKING_BUDGET = 1024
"""The Messages API's smallest extended-thinking budget (tokens)."""

BUILTIN_SUBSETS = ("all", "runnable", "has-gold")


@dataclass(frozen=True)
class RunDefaults:
    """Run settings a suite can set; command-line options override them."""

    jobs: int = 3
    timeout: float = 1800.0
    max_turns: int = 150
    """Large Spider2-DBT tasks (a dozen models, fix rounds) need well over 100 turns."""
    model: str = "claude-sonnet-4-5"
    agent: str = "claude"
    retries: int = 2
    date: dt.date = DEFAULT_DATE
    max_budget_usd: float | None = None
    verify_rounds: int = 2
    skills: tuple[str, ...] | None = None
    """Skills installed for every task; ``None`` means every skill in ``skills/``."""
    isolation: Isolation = Isolation.AUTO
    """The agent sandbox: auto, namespace or none (:mod:`spider2local.sandbox.isolation`)."""
    thinking_budget: int | None = None
    """Extended thinking tokens per model reply; ``None`` (the default) turns thinking off."""
    warm_dbt: bool = True
    """A warm dbt server per workspace (:mod:`spider2local.clock.warm`); false: every dbt call
    is a cold process (``--warm-dbt off``, for comparison)."""


@dataclass(frozen=True)
class TaskSettings:
    """What the suite file says about one task. Every field is optional."""

    date: dt.date | None = None
    date_method: DateMethod | None = None
    date_evidence: str | None = None
    date_confidence: Confidence | None = None
    exclude: str | None = None
    note: str | None = None
    """Free text shown by ``list --json`` and ``audit`` (e.g. a known upstream defect)."""
    skills: tuple[str, ...] = ()
    skip_skills: tuple[str, ...] = ()
    solution: Path | None = None
    timeout: float | None = None
    max_turns: int | None = None
    thinking_budget: int | None = None


@dataclass(frozen=True)
class Suite:
    """A parsed suite file."""

    path: Path
    dataset: str | Path
    """``SAMPLE`` or the absolute path of an upstream ``spider2-dbt`` folder."""
    defaults: RunDefaults = field(default_factory=RunDefaults)
    tasks: Mapping[str, TaskSettings] = field(default_factory=dict)
    subsets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sha256: str = ""

    def settings(self, task_id: str) -> TaskSettings:
        return self.tasks.get(task_id, TaskSettings())

    def run_date(self, task_id: str) -> tuple[dt.date, DateSource]:
        """The one answer to "which date will this task's dbt see": its own date in the suite
        file, else the suite default. Nothing derived on the fly counts: a date is used only
        once written (``derive-dates``), so ``run``, ``list`` and ``audit`` always agree."""
        own = self.settings(task_id).date
        return (own, DateSource.TASK) if own is not None else (self.defaults.date,
                                                                DateSource.DEFAULT)

    def with_dataset(self, dataset: str | Path | None) -> Suite:
        """Return a copy whose dataset root is overridden (the ``--dataset`` option)."""
        if dataset is None:
            return self
        root: str | Path = SAMPLE if str(dataset) == SAMPLE else Path(dataset).expanduser()
        return Suite(self.path, root, self.defaults, self.tasks, self.subsets, self.sha256)

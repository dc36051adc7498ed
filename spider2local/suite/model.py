"""What a suite file says, as frozen data: dataset root, run defaults, per-task settings, subsets.

:mod:`.load` builds these from ``tasks.toml`` (strictly); :mod:`.edit` writes keys back in place.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from spider2local.suite import options
from spider2local.suite.options import COMMAND_APIS as COMMAND_APIS
from spider2local.suite.options import DEFAULT_DATE as DEFAULT_DATE
from spider2local.suite.options import MIN_THINKING_BUDGET as MIN_THINKING_BUDGET
from spider2local.suite.options import Isolation as Isolation

SAMPLE = "sample"
"""The dataset root value that means "the bundled sample suite"."""

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


BUILTIN_SUBSETS = ("all", "runnable", "has-gold")


class RunDefaults:
    """The suite's ``[run]`` values over the defaults of the settings table
    (:mod:`.options`): every setting has a value here, whether the suite set it or not.
    Command-line options override them (:meth:`spider2local.run.settings.RunSettings.
    from_defaults`). Immutable; typed properties for the settings code reads by name."""

    __slots__ = ("_values",)
    _values: dict[str, Any]

    def __init__(self, **values: Any) -> None:
        known = {s.name for s in options.suite_keys()}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"not suite settings: {', '.join(unknown)}")
        merged = {s.name: s.default for s in options.suite_keys()}
        merged.update(values)
        object.__setattr__(self, "_values", merged)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("RunDefaults is immutable")

    def get(self, name: str) -> Any:
        """The value of setting ``name`` (its table default when the suite left it out)."""
        values: dict[str, Any] = self._values
        return values[name] if name in values else options.default(name)

    def values(self) -> dict[str, Any]:
        return dict(self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDefaults) and self.values() == other.values()

    def __hash__(self) -> int:
        return hash(tuple(sorted((k, repr(v)) for k, v in self._values.items())))

    def __repr__(self) -> str:
        return f"RunDefaults({self._values!r})"

    @property
    def agent(self) -> str:
        return str(self.get("agent"))

    @property
    def model(self) -> str:
        return str(self.get("model"))

    @property
    def date(self) -> dt.date:
        value: dt.date = self.get("date")
        return value

    @property
    def isolation(self) -> Isolation:
        return Isolation(self.get("isolation"))

    @property
    def skills(self) -> tuple[str, ...] | None:
        """Skills installed for every task; ``None`` means every skill in ``skills/``."""
        value: tuple[str, ...] | None = self.get("skills")
        return value


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
class CommandAgentSpec:
    """A command-line agent the suite defines once (``[agents.NAME]``), run by
    ``--agent NAME`` as the ``command`` agent (:mod:`spider2local.agents.command`)."""

    command: str
    """The shell command, run with ``sh -c`` in the task's project folder."""
    pass_env: tuple[str, ...] = ()
    """Variables of the runner's environment handed to it by name (its API key...)."""
    read_only: tuple[Path, ...] = ()
    """Extra folders it needs read-only inside the sandbox (its own install)."""
    usage: str | None = None
    """How its usage is read: ``file`` (the usage file), ``claude-json`` (``claude -p
    --output-format json`` on stdout) or ``mini-swe-agent`` (its trajectory); None: ``file``."""
    apis: tuple[str, ...] = ()
    """The model APIs it calls (``anthropic``, ``openai``), each only through the gateway."""

    def options(self) -> dict[str, Any]:
        return {"command": self.command, "pass_env": self.pass_env,
                "read_only": self.read_only, "usage": self.usage, "apis": self.apis}


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
    agents: Mapping[str, CommandAgentSpec] = field(default_factory=dict)
    """Command-line agents defined by name (``[agents.NAME]``)."""

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
        return Suite(self.path, root, self.defaults, self.tasks, self.subsets, self.sha256,
                     self.agents)

"""Every run setting, declared once: its parser, default, command-line flag, ``[run]`` key and
resume rule.

A setting used to be listed in about eight places (the suite's defaults, the suite parser's
keys, the run settings and their defaults, the resume lists, the command line), with its
default in three; adding one meant editing them all, and missing one was a silent bug. Now
:data:`SETTINGS` is the one list: ``cli/`` turns it into ``run``'s options, :mod:`.load` into
the keys a ``[run]`` table may hold, :mod:`spider2local.run.settings` into the settings of an
invocation and :mod:`spider2local.run.resume` into what a resume keeps or compares. Adding a
:class:`Setting` here is enough to have a flag, a suite key and a resume rule; code that needs
the value reads ``RunSettings.value(name)`` (or gets a typed field of its own).

Validation lives in the parsers, so ``--trials 0`` and ``[run] trials = 0`` are refused with
the same phrase (the command line as ``--trials: ...``, the suite as ``file: run.trials: ...``;
one line, exit 2). Plain data: no click here (``cli/`` is the only click importer).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

MIN_THINKING_BUDGET = 1024
"""The Messages API's smallest extended-thinking budget (tokens)."""

COMMAND_APIS = ("anthropic", "openai")
"""The model APIs a command agent may declare (``apis``, ``--agent-api``): each reached only
through its session's gateway (:mod:`spider2local.gateway`), which holds the real credential."""

DEFAULT_DATE = dt.date(2024, 9, 15)
"""Fallback fake date. Spider2-DBT's gold was built around mid-September 2024 (no official date
exists); any fixed date beats today's, which makes results drift with the calendar."""


BUILT_IN_AGENT_NAMES = ("claude", "command", "noop", "reference", "replay")
"""The built-in agents' names, which a suite's ``[agents.NAME]`` may not take. Declared here,
below the agents, so the suite loader can refuse them without importing any agent; the registry
(:mod:`spider2local.agents.registry`) maps each to its class and refuses to load if the two
lists differ."""


class Isolation(StrEnum):
    """What the user asks for (``--isolation``, ``[run] isolation``)."""

    AUTO = "auto"
    NAMESPACE = "namespace"
    NONE = "none"


class Resume(StrEnum):
    """What a resume (``run --run-id X``) does with a setting the first invocation recorded."""

    REMEMBERED = "remembered"
    """Left out, the recorded value is used; given, the new value applies (``--jobs``)."""
    MUST_MATCH = "must match"
    """Left out, the recorded value is used; given and different, the resume is refused: the
    run's verdicts would mix two experiments (``--timeout``, ``--model``)."""
    FREE = "free"
    """Each invocation uses its own value; nothing is taken from run.json."""


class Parser(Protocol):
    """Turns a value from the command line (text) or a suite file (a TOML value) into the
    setting's value; raises :class:`ValueError` with one phrase (``must be positive, not 0``)
    that both places quote."""

    @property
    def metavar(self) -> str: ...

    def __call__(self, value: object, *, text: bool) -> Any: ...


def _shown(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() \
        if isinstance(value, bool) else str(value)


_KINDS = {int: "an integer", float: "a number", str: "a string", list: "a list",
          bool: "true or false", dict: "a table"}


def _kind(value: object) -> str:
    return _KINDS.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Integer:
    """A whole number of at least ``minimum`` (``unit`` names what it counts in errors)."""

    minimum: int = 1
    unit: str = ""
    metavar: str = "N"

    def __call__(self, value: object, *, text: bool) -> int:
        if text:
            try:
                number = int(str(value).strip())
            except ValueError:
                raise ValueError(f"must be an integer, not {_shown(value)}") from None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer, not {_kind(value)}")
        else:
            number = value
        if number < self.minimum:
            unit = f" {self.unit}" if self.unit else ""
            wanted = ("positive" if self.minimum == 1 else "0 or more" if self.minimum == 0
                      else f"at least {self.minimum}{unit}")
            raise ValueError(f"must be {wanted}, not {number}")
        return number


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


@dataclass(frozen=True)
class Duration:
    """Seconds, as a number or written with units: ``90``, ``90s``, ``10m``, ``1h30m``,
    ``1.5h`` (``--timeout 10m`` was refused). Positive and finite, as :class:`Positive`."""

    metavar: str = "DURATION"

    def __call__(self, value: object, *, text: bool) -> float:
        if isinstance(value, str):
            raw = value.strip().lower()
            match = _DURATION.fullmatch(raw)
            if not raw or match is None or not any(match.groups()):
                try:  # other numbers ('nan', '-5', '1e3') go to the number rule
                    number = float(raw)
                except ValueError:
                    raise ValueError(f"must be a duration such as 90, 90s, 10m or 1h30m, "
                                     f"not {_shown(value)}") from None
                return Positive(self.metavar)(number, text=False)
            hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
            return Positive(self.metavar)(hours * 3600 + minutes * 60 + seconds, text=False)
        return Positive(self.metavar)(value, text=text)


@dataclass(frozen=True)
class Positive:
    """A number above 0 that is neither NaN nor infinite: every comparison with NaN is false,
    so a plain range check lets it through, and ``--timeout nan`` once wrote invalid JSON."""

    metavar: str = "NUMBER"

    def __call__(self, value: object, *, text: bool) -> float:
        if text:
            try:
                number = float(str(value).strip())
            except ValueError:
                raise ValueError(f"must be a number, not {_shown(value)}") from None
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number, not {_kind(value)}")
        else:
            number = float(value)
        if number <= 0 or not math.isfinite(number):
            raise ValueError(f"must be positive and finite, not {_shown(number)}")
        return number


_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?")
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class Size:
    """Bytes, as a number or with a binary unit: ``4G``, ``512M``, ``4GiB``, ``1000``.
    Hand-written: four units are all a setting needs, no library of sizes is a dependency."""

    metavar: str = "SIZE"

    def __call__(self, value: object, *, text: bool) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"must be a size such as 4G or 512M, not {_kind(value)}")
        match = _SIZE.fullmatch(str(value).strip().upper())
        if match is None or float(match[1]) <= 0:
            raise ValueError(f"must be a size such as 4G or 512M, not {_shown(value)}")
        return int(float(match[1]) * _UNITS[match[2]])


@dataclass(frozen=True)
class Text:
    metavar: str = "TEXT"

    def __call__(self, value: object, *, text: bool) -> str:
        if not isinstance(value, str):
            raise ValueError(f"must be a string, not {_kind(value)}")
        if not value.strip():
            raise ValueError("must not be empty")
        return value


@dataclass(frozen=True)
class Choice:
    """One of ``choices()`` (a function: the agent names are the registry's, read lazily)."""

    choices: Callable[[], Sequence[str]]
    metavar: str = "CHOICE"

    def __call__(self, value: object, *, text: bool) -> str:
        if not isinstance(value, str):
            raise ValueError(f"must be a string, not {_kind(value)}")
        allowed = tuple(self.choices())
        if value not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
        return value


@dataclass(frozen=True)
class Flag:
    """On or off. On the command line a flag given is on; absent, the suite or resume decides."""

    metavar: str = ""

    def __call__(self, value: object, *, text: bool) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, not {_kind(value)}")
        return value


@dataclass(frozen=True)
class OnOff:
    """On or off, both spelt out: ``on``/``off`` on the command line, true/false in a suite
    (for a setting that is on by default, which a plain flag could not turn off)."""

    metavar: str = "[on|off]"

    def __call__(self, value: object, *, text: bool) -> bool:
        if text:
            if value not in ("on", "off"):
                raise ValueError(f"must be on or off, not {_shown(value)}")
            return value == "on"
        if not isinstance(value, bool):
            raise ValueError(f"must be true or false, not {_kind(value)}")
        return value


@dataclass(frozen=True)
class Folder:
    """A folder path (checked by whoever uses it: :func:`spider2local.run.settings.kit_dirs`)."""

    metavar: str = "DIR"

    def __call__(self, value: object, *, text: bool) -> Path:
        if isinstance(value, Path):
            return value
        if not isinstance(value, str) or not value:
            raise ValueError(f"must be a path, not {_kind(value)}")
        return Path(value)


@dataclass(frozen=True)
class Names:
    """A list of strings (the suite's skill names)."""

    metavar: str = "NAMES"

    def __call__(self, value: object, *, text: bool) -> tuple[str, ...]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError("must be a list of strings")
        return tuple(value)


@dataclass(frozen=True)
class Apis:
    """Model API names of :data:`COMMAND_APIS`: one per ``--agent-api`` (the flag repeats), a
    list in run.json; duplicates dropped, the order kept (the gateway's upstreams follow it)."""

    metavar: str = "API"
    repeatable: bool = True
    """The flag may be given several times (``cli/`` joins the values)."""

    def __call__(self, value: object, *, text: bool) -> tuple[str, ...]:
        names = (value,) if isinstance(value, str) else value
        if not isinstance(names, (list, tuple)) or not all(isinstance(v, str) for v in names):
            raise ValueError(f"must be a list of API names, not {_kind(value)}")
        unknown = [n for n in names if n not in COMMAND_APIS]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not one of {', '.join(COMMAND_APIS)}")
        return tuple(dict.fromkeys(names))


def _apis_compared(recorded: Any) -> Any:
    """A run made before the setting existed declared no API; a list read back from run.json
    equals the tuple the run was planned with."""
    return tuple(recorded) if isinstance(recorded, (list, tuple)) else ()


@dataclass(frozen=True)
class Date:
    metavar: str = "YYYY-MM-DD"

    def __call__(self, value: object, *, text: bool) -> dt.date:
        if isinstance(value, dt.datetime):
            raise ValueError("must be a date, not a date-time (write it as 2024-09-15)")
        if isinstance(value, dt.date):
            return value
        if isinstance(value, str):
            try:
                return dt.date.fromisoformat(value)
            except ValueError:
                pass
        raise ValueError(f"bad date {_shown(value)} (write it as YYYY-MM-DD, e.g. 2024-09-15)")


@dataclass(frozen=True)
class AgentName:
    """An agent's name: a built-in, an installed plugin, ``package.module:Class`` or an agent
    the suite defines (``[agents.NAME]``). Only its form is checked here; whether it loads is
    the registry's to say (:func:`spider2local.run.plan.plan_run`, one line naming it)."""

    metavar: str = "AGENT"

    def __call__(self, value: object, *, text: bool) -> str:
        if not isinstance(value, str):
            raise ValueError(f"must be a string, not {_kind(value)}")
        if not value.strip() or value != value.strip():
            raise ValueError(f"must be an agent name, not {_shown(value)}")
        return value


def _sandboxed(mode: Any) -> Any:
    """The isolation as far as verdicts care: "not-needed" (an agent that runs no untrusted
    code) and a manifest from before isolation was recorded both ran without a sandbox, so they
    compare equal to "none"; a reference run made before this field existed stays resumable."""
    return "none" if mode in (None, "none", "not-needed") else mode


def _isolation_resumed(mode: Any) -> Any:
    """The mode a run used is what a resume asks for; "not-needed" resolves again."""
    return mode if mode in ("namespace", "none") else None


@dataclass(frozen=True)
class Setting:
    """One run setting (see the module docstring)."""

    name: str
    """The key under ``[run]``, in run.json's ``settings`` and of ``RunSettings.value``."""
    parser: Parser
    default: Any
    help: str
    resume: Resume = Resume.REMEMBERED
    flag: str | None = ""
    """The command-line flag; ``""``: ``--`` and the name with dashes; ``None``: no flag."""
    suite: bool = True
    """Whether a suite's ``[run]`` table may set it."""
    recorded: bool = True
    """Whether it is a setting of the run (in run.json); ``False`` for suite-only defaults
    that shape something else (the default fake date of tasks without one)."""
    compared: Callable[[Any], Any] | None = None
    """How a recorded value is compared for :attr:`Resume.MUST_MATCH` (default: as is, an
    absent one as the default: a run made before the setting existed ran with its default)."""
    resumed: Callable[[Any], Any] | None = None
    """How a recorded value becomes the option of a resume (default: parsed again)."""

    @property
    def option(self) -> str | None:
        if self.flag is None:
            return None
        return self.flag or "--" + self.name.replace("_", "-")

    def parse(self, value: object, *, text: bool) -> Any:
        return self.parser(value, text=text)

    def compare_value(self, recorded: Any) -> Any:
        if self.compared is not None:
            return self.compared(recorded)
        return self.default if recorded is None else recorded

    def resume_value(self, recorded: Any) -> Any:
        """The recorded value as a resume's option (``None``: nothing usable recorded)."""
        if self.resumed is not None:
            return self.resumed(recorded)
        if recorded is None:
            return None
        try:
            return self.parse(recorded, text=False)
        except ValueError:  # a hand-edited run.json: the suite's default applies
            return None


SETTINGS: tuple[Setting, ...] = (
    Setting("agent", AgentName(), "claude",
            "The agent: claude, noop, reference, replay, command (with --agent-command), an "
            "installed plugin (entry point group spider2local.agents), package.module:Class, "
            "or an agent of the suite's [agents] table. Default: the suite's.",
            Resume.MUST_MATCH),
    Setting("agent_command", Text(metavar="COMMAND"), None,
            "For --agent command: the shell command that runs the agent (sh -c, in the task's "
            "project folder, in the sandbox). Suite agents ([agents.NAME]) record theirs.",
            Resume.MUST_MATCH, suite=False),
    Setting("agent_apis", Apis(), (),
            "For --agent command: a model API the command calls (anthropic, openai; "
            "repeatable), served by the task's gateway with the runner's key; under "
            "--isolation namespace nothing else of the network is reachable (none: no "
            "network). Suite agents ([agents.NAME] apis) record theirs.",
            Resume.MUST_MATCH, flag="--agent-api", suite=False, compared=_apis_compared),
    Setting("jobs", Integer(), 3,
            "Trials at a time (of every task: one limit for the whole run)."),
    Setting("trials", Integer(), 1,
            "Independent trials of each task, each in a fresh workspace and agent session; "
            "a resume with a higher number runs only the new trials."),
    Setting("timeout", Duration(), 1800.0,
            "Time per task for the agent stage, in seconds or as 90s, 10m, 1h30m (the dbt runs "
            "it starts included; scoring comes on top); its processes are killed at the "
            "deadline.", Resume.MUST_MATCH),
    Setting("retries", Integer(minimum=0), 2, "Retries of infrastructure errors."),
    Setting("max_turns", Integer(), 300,
            "Agent turns per task (real runs took 100-300; the timeout is what bounds time "
            "and cost).", Resume.MUST_MATCH),
    Setting("thinking_budget", Integer(minimum=MIN_THINKING_BUDGET, unit="tokens"), None,
            "Extended thinking tokens per model reply (default: the suite's; off).",
            Resume.MUST_MATCH),
    Setting("model", Text(metavar="MODEL"), "claude-sonnet-4-5",
            "The model (agents that call one).", Resume.MUST_MATCH),
    Setting("max_budget_usd", Positive(metavar="USD"), None,
            "The agent's own spending cap per task (its session stops there).",
            Resume.MUST_MATCH),
    Setting("max_cost_usd", Positive(metavar="USD"), None,
            "A budget for the whole run, charged at the model gateway: once the spent cost "
            "reaches it running trials are stopped (scored as they stand) and no new trial "
            "starts; a resume with a higher cap continues."),
    Setting("verify_rounds", Integer(minimum=0), 2,
            "Verifier rounds after the agent's work.", Resume.MUST_MATCH),
    Setting("templates", Flag(), False,
            "Give each declared model without SQL a starting file (its YML columns, its refs "
            "and a TODO), still listed as a stub.", Resume.MUST_MATCH, suite=False,
            compared=bool),
    Setting("stage_timeout", Duration(), 600.0,
            "Time for each stage after the agent (checkpoint, score, scan, collect) at most; "
            "checkpoint and score get a deadline fitted to what their work cost on the "
            "task's start database when the run began. A task whose leftovers make one hang "
            "fails with that reason."),
    Setting("workspace_size", Size(), 4 * 2**30,
            "Disk a task's workspace may hold (e.g. 4G): past it the agent is stopped and its "
            "work scored; a disk it filled is its doing, not the machine's."),
    Setting("prompts_dir", Folder(), None,
            "A prompts folder to use instead of the bundled one (A/B of two kits).",
            flag="--prompts", suite=False),
    Setting("skills_dir", Folder(), None,
            "A skills folder to use instead of the bundled one (A/B of two kits).",
            flag="--skills", suite=False),
    Setting("keep", Flag(), False, "Keep each workspace and print its path.", suite=False),
    Setting("keep_db", Flag(), False, "Keep each result database (needed by `score`).",
            suite=False),
    Setting("isolation", Choice(lambda: [i.value for i in Isolation]), Isolation.AUTO.value,
            "Agent sandbox: namespace (refuse to run without it), none, or auto (namespace "
            "where it works, else none with a warning). Default: the suite's, else auto.",
            Resume.MUST_MATCH, compared=_sandboxed, resumed=_isolation_resumed),
    Setting("warm_dbt", OnOff(), True,
            "A warm dbt server per workspace, forking each dbt call from a process that "
            "imported dbt once (default: the suite's, else on); off: every dbt call is a "
            "cold process."),
    Setting("skills", Names(), None,
            "Skills installed for every task (default: every skill in skills/).",
            Resume.FREE, flag=None),
    Setting("date", Date(), DEFAULT_DATE,
            "The fake date of tasks without their own.", Resume.FREE, flag=None,
            recorded=False),
)
"""Every run setting, in the order ``run --help`` lists them."""

_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The setting called ``name`` (a KeyError for an unknown one: a bug, not bad input)."""
    return _table()[name]


def _table() -> dict[str, Setting]:
    """By name; rebuilt when :data:`SETTINGS` was extended (a plug-in, a test adding one)."""
    if len(_BY_NAME) != len(SETTINGS) or any(_BY_NAME.get(s.name) is not s for s in SETTINGS):
        _BY_NAME.clear()
        _BY_NAME.update({s.name: s for s in SETTINGS})
    return _BY_NAME


def settings() -> tuple[Setting, ...]:
    """The table as it is now (read it through this, not an import of :data:`SETTINGS`: a
    module that imported the tuple would not see a setting added later)."""
    _table()
    return SETTINGS


def default(name: str) -> Any:
    return setting(name).default


def suite_keys() -> tuple[Setting, ...]:
    return tuple(s for s in settings() if s.suite)


def flags() -> tuple[Setting, ...]:
    return tuple(s for s in settings() if s.option is not None)


def recorded() -> tuple[Setting, ...]:
    return tuple(s for s in settings() if s.recorded)


def with_rule(rule: Resume) -> tuple[Setting, ...]:
    return tuple(s for s in recorded() if s.resume is rule)

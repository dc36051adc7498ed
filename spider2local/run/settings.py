"""How the tasks of one invocation run: settings, per-task limits and the skills each task gets.

Kept apart from the runner because the planner (validation before anything starts), ``shell``
(the same workspace as the agent) and the runner must all compute these the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from spider2local.agents.contract import AgentLimits
from spider2local.agents.registry import Capabilities, capabilities, is_agent_name
from spider2local.dataset.task import TaskSpec
from spider2local.exceptions import UserError
from spider2local.gateway.replay import ReplaySource
from spider2local.resources import prompts_dir, skills_dir
from spider2local.sandbox.isolation import IsolationMode
from spider2local.suite import options
from spider2local.suite.model import RunDefaults


def _default(name: str) -> Any:
    return options.default(name)


@dataclass(frozen=True)
class RunSettings:
    """How every task of one invocation runs (the command line over the suite's defaults).

    Each field that the settings table (:mod:`spider2local.suite.options`) declares takes its
    default from there; a table setting without a field of its own is in :attr:`extra` (read
    it with :meth:`value`). The rest are resolved or internal: the capabilities and isolation
    the plan resolved once, the workspace parent and retry backoff tests set."""

    agent: str
    jobs: int = _default("jobs")
    trials: int = _default("trials")
    """Independent trials of each task (each a fresh workspace and agent session)."""
    timeout: float = _default("timeout")
    """Seconds for a task's agent stage; the agent's processes are killed when it passes."""
    retries: int = _default("retries")
    max_turns: int = _default("max_turns")
    model: str | None = None
    max_budget_usd: float | None = _default("max_budget_usd")
    max_cost_usd: float | None = _default("max_cost_usd")
    """The whole run's budget (:class:`~spider2local.run.runner.RunBudget`): once the cost
    spent reaches it, the gateways refuse requests (running trials stop) and no trial starts."""
    verify_rounds: int = _default("verify_rounds")
    skills: tuple[str, ...] = ()
    keep: bool = False
    keep_db: bool = False
    keep_graded: bool = _default("keep_graded")
    """Keep each scored trial's graded tables in its run folder (:mod:`.graded`);
    ``--no-keep-graded`` turns it off."""
    stage_timeout: float = 600.0
    """Seconds for each stage after the agent (checkpoint, score, scan, collect): a stage the
    agent's leftovers make hang fails the task with that reason (:mod:`.watchdog`). Far above
    what the real tasks take (the largest gold scores in about a second)."""
    workspace_size: int = 4 * 1024**3
    """Bytes of disk a task's workspace may hold (``--workspace-size``): past it the agent's
    processes are killed and the work is scored as it stands, and a full disk with the
    workspace past it is the agent's doing, never ``infrastructure`` (:mod:`.runner`)."""
    retry_backoff: float = 5.0
    """Seconds before the first retry of an infrastructure failure; doubled each time."""
    workspace_parent: Path | None = None
    """Where workspaces are made (default: the system temp folder)."""
    isolation: IsolationMode = IsolationMode.NONE
    """The isolation every task of this invocation gets, as resolved once by the plan
    (:func:`spider2local.sandbox.isolation.choose_isolation`); never ``auto``."""
    thinking_budget: int | None = _default("thinking_budget")
    """Extended thinking tokens per reply; None: off. A task's own setting wins."""
    templates: bool = False
    """``--templates``: a starting SQL file for each declared model without one."""
    prompts_dir: Path | None = None
    skills_dir: Path | None = None
    """``--prompts DIR`` / ``--skills DIR``: a kit to use instead of the bundled one (an A/B
    comparison of two kits on the same tasks); None: the bundled folders."""
    capabilities: Capabilities | None = None
    """What the agent can do, resolved once (:func:`resolve_capabilities`); ``None`` in a
    RunSettings made by hand, which resolves it from the name on first use."""
    replay: ReplaySource | None = None
    """``run --replay RUN``: each trial's model gateway answers from trial k of RUN's same
    task instead of any API (:mod:`spider2local.gateway.replay`)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Values of table settings that have no field here (recorded in run.json)."""

    def __post_init__(self) -> None:
        if self.capabilities is None:
            object.__setattr__(self, "capabilities", resolve_capabilities(self.agent))

    @property
    def caps(self) -> Capabilities:
        assert self.capabilities is not None  # set by __post_init__
        return self.capabilities

    def value(self, name: str) -> Any:
        """The value of table setting ``name``, field or not."""
        if name in _FIELDS:
            return getattr(self, name)
        return self.extra.get(name, options.default(name))

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("capabilities", "extra")}
        data.update(self.extra)
        data["skills"] = list(self.skills)
        data.pop("isolation")  # recorded once, as run.json's ``isolation`` record
        for key in ("workspace_parent", "prompts_dir", "skills_dir"):
            data[key] = None if data[key] is None else str(data[key])
        if self.replay is not None:
            data["replay"] = {"run": self.replay.run_id, "folder": str(self.replay.folder),
                              "lenient": self.replay.lenient, "until": self.replay.until}
        return data

    @property
    def skills_root(self) -> Path:
        """Where this run's skills come from (raises ResourceMissing for a broken install)."""
        return self.skills_dir if self.skills_dir is not None else skills_dir()

    @property
    def prompts_root(self) -> Path:
        return self.prompts_dir if self.prompts_dir is not None else prompts_dir()

    @classmethod
    def from_defaults(cls, defaults: RunDefaults, skills: Sequence[str],
                      **overrides: Any) -> RunSettings:
        """The suite's [run] defaults, with every non-None override (the command line) on
        top; every setting of the table has a value (the table's default at worst)."""
        base: dict[str, Any] = {}
        for s in options.recorded():
            base[s.name] = defaults.get(s.name) if s.suite else s.default
        base.pop("isolation", None)  # the plan resolves the requested isolation to a mode
        base["skills"] = tuple(skills)
        base.update({k: v for k, v in overrides.items() if v is not None})
        caps = base.get("capabilities") or resolve_capabilities(base["agent"])
        base["capabilities"] = caps
        if not caps.model:
            base["model"] = None  # only an agent that calls a model records one, --model or not
        extra = {k: base.pop(k) for k in list(base) if k not in _FIELDS and k != "capabilities"}
        return cls(**base, extra=extra)


_FIELDS = frozenset(f.name for f in fields(RunSettings)) - {"capabilities", "extra"}


def resolve_capabilities(agent: str) -> Capabilities:
    """The agent's declared capabilities, looked up once per invocation (the plan does it;
    :class:`RunSettings` carries them). The plan has already refused unknown names; an agent
    given to the runner directly (tests, a library user's factory) declares nothing."""
    return capabilities(agent) if is_agent_name(agent) else Capabilities()


def wants_warm_dbt(settings: RunSettings) -> bool:
    """Whether each workspace gets a warm dbt server (:mod:`spider2local.clock.warm`): asked
    for (``--warm-dbt``, ``[run] warm_dbt``), and an agent that calls a model or runs a
    model's commands (the Claude session, a command agent: many dbt calls: build, read the
    error, fix, build again). The offline agents run one ``dbt run`` per task,
    which a server cannot speed up (it pays the same imports once, plus its own start-up,
    competing with the other tasks for the CPU: benchmarks/bench_dbt.py measures the
    reference agent's whole run both ways)."""
    caps = settings.caps
    return bool(settings.value("warm_dbt")) and (caps.model or caps.sandboxed)


def limits_for(task: TaskSpec, settings: RunSettings) -> AgentLimits:
    """Per-task suite settings (timeout, max_turns) override the run's."""
    return AgentLimits(max_turns=task.settings.max_turns or settings.max_turns,
                       timeout=task.settings.timeout or settings.timeout, model=settings.model,
                       max_budget_usd=settings.max_budget_usd,
                       verify_rounds=settings.verify_rounds, skills=settings.skills,
                       thinking_budget=task.settings.thinking_budget
                       or settings.thinking_budget)


def suite_skills(defaults: RunDefaults, caps: Capabilities,
                 root: Path | None = None) -> tuple[str, ...]:
    """Skills to install: the suite's list, or every folder of ``root`` (default: the bundled
    skills/) holding a SKILL.md when it names none. Only agents that read skills get them; the
    others get a workspace without them."""
    if not caps.skills:
        return ()
    if defaults.skills is not None:
        return defaults.skills
    try:
        base = root if root is not None else skills_dir()
    except FileNotFoundError:
        return ()
    return tuple(sorted(p.name for p in base.iterdir() if (p / "SKILL.md").is_file()))


def task_skills(task: TaskSpec, settings: RunSettings) -> tuple[str, ...]:
    """The run's skills plus the task's own, minus its skip_skills (agents that read skills)."""
    if not settings.caps.skills:
        return ()
    skip = set(task.settings.skip_skills)
    names = [*settings.skills, *task.settings.skills]
    return tuple(dict.fromkeys(n for n in names if n not in skip))


def available_skills(root: Path | None = None) -> tuple[str, ...]:
    """Folder names of ``root`` (default: the installed ``skills/``): what a workspace can be
    given."""
    try:
        base = root if root is not None else skills_dir()
    except FileNotFoundError:
        return ()
    return tuple(sorted(p.name for p in base.iterdir() if p.is_dir()))


def check_skills(tasks: Sequence[TaskSpec], settings: RunSettings, suite_path: Path) -> None:
    """Refuse unknown skill names before anything runs.

    Found at prepare time instead, an unknown name fails every task with an error result (and
    exit 0), and those results then block a resume: a typo must cost one line, not a run.
    ``skip_skills`` are checked too: a misspelt skip silently skips nothing.
    """
    if not settings.caps.skills:
        return
    known = set(available_skills(settings.skills_dir))
    keys = [("run.skills", settings.skills)]
    for task in tasks:
        keys += [(f"tasks.{task.id}.skills", task.settings.skills),
                 (f"tasks.{task.id}.skip_skills", task.settings.skip_skills)]
    for key, names in keys:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UserError(f"{key}: unknown skill(s) {', '.join(map(repr, unknown))}",
                            path=suite_path,
                            fix=f"available skills: {', '.join(sorted(known)) or '(none)'}")


PROMPT_FILES = ("agent.md", "verifier.md", "verify_request.md", "fix_request.md")
"""The templates a prompts folder must hold (what :mod:`spider2local.agents.prompts`
fills)."""


def kit_dirs(prompts: Path | None, skills: Path | None) -> tuple[Path | None, Path | None]:
    """Check ``--prompts DIR`` and ``--skills DIR`` before anything runs and return them
    absolute (run.json records them; a resume from another folder must find the same ones).

    A folder that is not there, a prompts folder missing a template, or a skills folder with no
    ``<name>/SKILL.md`` is one line naming the folder and what it needs."""
    if prompts is not None:
        prompts = prompts.expanduser().resolve()
        missing = [n for n in PROMPT_FILES if not (prompts / n).is_file()]
        if not prompts.is_dir() or missing:
            raise UserError("--prompts: not a prompts folder"
                            + (f" (missing {', '.join(missing)})" if prompts.is_dir() else ""),
                            path=prompts,
                            fix=f"give a folder holding {', '.join(PROMPT_FILES)}, e.g. a copy "
                                "of the bundled prompts/")
    if skills is not None:
        skills = skills.expanduser().resolve()
        if not skills.is_dir() or not any(skills.glob("*/SKILL.md")):
            raise UserError("--skills: not a skills folder", path=skills,
                            fix="give a folder of <name>/SKILL.md, e.g. a copy of the bundled "
                                "skills/")
    return prompts, skills

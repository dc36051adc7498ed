"""The agent registry: agent names, their classes, and what each class can do.

The one module of ``agents/`` that the rest of spider2local imports. Everything the run must know
about an agent before it starts one (does it take a model, read skills, need a reference
solution or credentials) is asked of the agent's class through :func:`capabilities`, never
decided by comparing names. Each agent module is imported only when its name is asked for, so
``make_agent("noop")`` never imports claude_agent_sdk and ``spider2local --help`` imports no
agent at all.

Three ways to name an agent: a built-in name (:data:`_BUILT_IN`), the name of an entry point in
the :data:`ENTRY_POINT_GROUP` group of an installed package (a plugin), or ``package.module:Class``
(any importable class). Plugins are held to the same contract (:mod:`spider2local.agents.contract`:
a ``name`` and an ``async def run(self, ctx)``) and declare their :class:`Capabilities` on the
class as the built-in agents do; one that fails to import or lacks the contract is one line
naming it (exit 2), never a traceback.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spider2local.exceptions import CredentialsError, UserError
from spider2local.suite.options import BUILT_IN_AGENT_NAMES

if TYPE_CHECKING:
    from spider2local.agents.contract import Agent

AgentFactory = Callable[..., "Agent"]

_BUILT_IN: dict[str, str] = {
    "noop": "spider2local.agents.noop:NoopAgent",
    "reference": "spider2local.agents.reference:ReferenceAgent",
    "replay": "spider2local.agents.replay:ReplayAgent",
    "claude": "spider2local.agents.claude.session:ClaudeAgent",
    "command": "spider2local.agents.command:CommandAgent",
}
"""``module:class`` of every built-in agent, imported on first use."""
BUILT_IN_AGENTS = BUILT_IN_AGENT_NAMES
if set(_BUILT_IN) != set(BUILT_IN_AGENTS):  # the suite's reserved names are exactly ours
    raise RuntimeError(f"spider2local.suite.options.BUILT_IN_AGENT_NAMES {BUILT_IN_AGENTS} "
                       f"differ from the registry's {sorted(_BUILT_IN)}")


@dataclass(frozen=True)
class Capabilities:
    """What an agent class declares about itself (its ``capabilities`` class attribute)."""

    model: bool = False
    """Calls a model: ``--model`` applies and is recorded (other agents record none)."""
    skills: bool = False
    """Reads the skills installed into the workspace (others get a workspace without them)."""
    skills_dir: str = ".claude/skills"
    """Where in the project the agent reads skills, relative (the runner installs each skill
    folder there, before the agent starts). The default is Claude Code's folder, which every
    agent declaring ``skills`` got before this field existed."""
    needs_solution: bool = False
    """Only meaningful on tasks that have a reference solution (others are skipped)."""
    credentials: tuple[str, ...] = ()
    """Environment variables of which at least one must be set (not blank) for it to run."""
    sandboxed: bool = False
    """Runs untrusted code (a model's shell commands): started inside the namespace sandbox
    when the run's isolation allows (``--isolation``). Agents that only run spider2local's own
    code and dbt in-process need none."""

    def credential_in(self, env: Mapping[str, str]) -> str | None:
        """The first credential variable set in ``env``. The one rule for "are credentials
        set", for ``run`` and ``doctor`` alike: a variable holding only spaces is not set."""
        return next((v for v in self.credentials if env.get(v, "").strip()), None)

    def has_credentials(self, env: Mapping[str, str]) -> bool:
        return not self.credentials or self.credential_in(env) is not None

    def check_credentials(self, agent: str, env: Mapping[str, str]) -> None:
        """Raise :class:`CredentialsError` (one line, exit 2) unless :meth:`has_credentials`."""
        if not self.has_credentials(env):
            raise CredentialsError(f"--agent {agent} needs credentials",
                                   fix="set " + " or ".join(self.credentials))


@dataclass(frozen=True)
class ApiStatus:
    """How one tiny real request to an agent's model API went (``doctor --check-api``)."""

    ok: bool
    detail: str


ENTRY_POINT_GROUP = "spider2local.agents"
"""The entry-point group third-party agent packages register their classes in."""


def _plugins() -> dict[str, importlib.metadata.EntryPoint]:
    """The installed plugins by name (a built-in name always wins: a plugin cannot hide one)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
            if ep.name not in _BUILT_IN}


def agent_names() -> tuple[str, ...]:
    """Built-in agents and installed plugins (``module:Class`` names are not listed)."""
    return tuple(sorted({*_BUILT_IN, *_plugins()}))


def is_agent_name(name: str) -> bool:
    """Whether ``name`` names an agent at all (without importing it)."""
    return name in _BUILT_IN or ":" in name or name in _plugins()


def agent_class(name: str) -> AgentFactory:
    """The class (or factory) behind ``name``, importing its module on first use; checked
    against the contract (raises a one-line :class:`UserError` naming the agent)."""
    if name in _BUILT_IN:
        return _load(name, _BUILT_IN[name])
    plugin = _plugins().get(name)
    if plugin is not None:
        return _load(name, plugin.value, entry_point=True)
    if ":" in name:
        return _load(name, name)
    raise UserError(f"unknown agent {name!r}",
                    fix=f"choose from: {', '.join(agent_names())}; or name a class as "
                        "package.module:Class, or install a package with a "
                        f"{ENTRY_POINT_GROUP!r} entry point")


def _load(name: str, target: str, *, entry_point: bool = False) -> AgentFactory:
    module, _, attr = target.partition(":")
    where = f"agent {name!r}" + (f" (entry point {ENTRY_POINT_GROUP}: {target})"
                                 if entry_point else "")
    if not module or not attr:
        raise UserError(f"{where}: {target!r} is not package.module:Class",
                        fix="name the class as package.module:Class")
    try:
        found: Any = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
    except ImportError as exc:
        raise UserError(f"{where} could not be imported: {type(exc).__name__}: {exc}",
                        fix="install the package that provides it, or fix its module path"
                        ) from None
    except AttributeError:
        raise UserError(f"{where}: module {module!r} has no {attr!r}",
                        fix="check the class name after the ':'") from None
    except Exception as exc:  # a plugin's own import-time bug: its fault, one line
        raise UserError(f"{where} failed while importing: {type(exc).__name__}: {exc}",
                        fix="fix the plugin (run python -c 'import "
                            f"{module}' to see the traceback)") from None
    problem = contract_problem(found)
    if problem is not None:
        raise UserError(f"{where} does not implement the agent contract: {problem}",
                        fix="see docs/agents.md, 'Agents as plugins': a class with a name and "
                            "async def run(self, ctx) -> AgentOutcome")
    factory: AgentFactory = found
    return factory


def contract_problem(factory: Any) -> str | None:
    """What keeps ``factory`` from being an agent class (None: nothing). Checked on the class,
    before any instance exists, so a broken plugin fails before the run starts."""
    if not callable(factory):
        return f"{factory!r} is not a class"
    run = getattr(factory, "run", None)
    if run is None:
        return "it has no run method"
    if not inspect.iscoroutinefunction(run):
        return "its run method is not async (async def run(self, ctx))"
    if inspect.isclass(factory) and not isinstance(getattr(factory, "name", None), str):
        return "it has no name (a class attribute: name = '...')"
    found = getattr(factory, "capabilities", None)
    if found is not None and not isinstance(found, Capabilities):
        return "its capabilities attribute is not a spider2local Capabilities"
    return None


def capabilities(name: str) -> Capabilities:
    """What the agent ``name`` can do (see :class:`Capabilities`)."""
    found = getattr(agent_class(name), "capabilities", None)
    return found if isinstance(found, Capabilities) else Capabilities()


def tool_version(name: str) -> str | None:
    """The version of the external tool the agent drives (for ``doctor``), ``None`` when it
    drives none. Raises :class:`~spider2local.exceptions.Spider2LocalError` when the tool is
    missing."""
    probe: Callable[[], str] | None = getattr(agent_class(name), "tool_version", None)
    return probe() if probe is not None else None


def api_status(name: str, env: Mapping[str, str], model: str,
               timeout: float) -> ApiStatus | None:
    """One tiny real request to the API the agent ``name`` calls, with the credentials of
    ``env`` (for ``doctor --check-api``); ``None`` when the agent calls no API."""
    probe: Callable[..., ApiStatus] | None = getattr(agent_class(name), "check_api", None)
    return probe(env, model, timeout) if probe is not None else None


def takes_option(name: str, option: str) -> bool:
    """Whether the agent's class accepts ``option`` (a keyword of its constructor)."""
    return option in inspect.signature(agent_class(name)).parameters


def make_agent(name: str, **options: Any) -> Agent:
    """Build the agent called ``name``; unknown names and options are one-line UserErrors."""
    factory = agent_class(name)
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        raise UserError(f"agent {name!r}: bad options ({exc})") from None
    return factory(**options)

"""The agent registry: agent names, their classes, and what each class can do.

The one module of ``agents/`` that the rest of spider2local imports. Everything the run must know
about an agent before it starts one (does it take a model, read skills, need a reference
solution or credentials) is asked of the agent's class through :func:`capabilities`, never
decided by comparing names. Each agent module is imported only when its name is asked for, so
``make_agent("noop")`` never imports claude_agent_sdk and ``spider2local --help`` imports no
agent at all.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spider2local.exceptions import CredentialsError, UserError

if TYPE_CHECKING:
    from spider2local.run.contract import Agent

AgentFactory = Callable[..., "Agent"]

_BUILT_IN: dict[str, str] = {
    "noop": "spider2local.agents.noop:NoopAgent",
    "reference": "spider2local.agents.reference:ReferenceAgent",
    "replay": "spider2local.agents.replay:ReplayAgent",
    "claude": "spider2local.agents.claude.session:ClaudeAgent",
}
"""``module:class`` of every built-in agent, imported on first use."""


@dataclass(frozen=True)
class Capabilities:
    """What an agent class declares about itself (its ``capabilities`` class attribute)."""

    model: bool = False
    """Calls a model: ``--model`` applies and is recorded (other agents record none)."""
    skills: bool = False
    """Reads the skills installed into the workspace (others get a workspace without them)."""
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


def agent_names() -> tuple[str, ...]:
    return tuple(sorted(_BUILT_IN))


def agent_class(name: str) -> AgentFactory:
    """The class (or factory) behind ``name``, importing its module on first use."""
    if name not in _BUILT_IN:
        raise UserError(f"unknown agent {name!r}", fix=f"choose from: {', '.join(agent_names())}")
    module, _, attr = _BUILT_IN[name].partition(":")
    factory: AgentFactory = getattr(importlib.import_module(module), attr)
    return factory


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

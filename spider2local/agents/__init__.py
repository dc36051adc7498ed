"""Agents: whatever does a task's work inside a prepared workspace (see :mod:`.base`).

The registry maps a name to a factory. ``noop``, ``reference`` and ``replay`` are built in;
heavier agents register themselves when their module is imported, and that import happens only
when the name is asked for: ``make_agent("noop")`` never imports claude_agent_sdk.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from spider2local.agents.base import Agent
from spider2local.agents.noop import NoopAgent
from spider2local.agents.reference import ReferenceAgent
from spider2local.agents.replay import ReplayAgent
from spider2local.exceptions import UserError

AgentFactory = Callable[..., Agent]

_FACTORIES: dict[str, AgentFactory] = {
    "noop": NoopAgent,
    "reference": ReferenceAgent,
    "replay": ReplayAgent,
}
_LAZY: dict[str, str] = {"claude": "spider2local.agents.claude"}
"""Agents whose module calls :func:`register` on import; imported only when asked for."""


def register(name: str, factory: AgentFactory) -> None:
    """Make ``make_agent(name, **options)`` call ``factory(**options)``."""
    _FACTORIES[name] = factory


def agent_names() -> tuple[str, ...]:
    return tuple(sorted({*_FACTORIES, *_LAZY}))


def make_agent(name: str, **options: Any) -> Agent:
    """Build the agent called ``name``; unknown names and options are one-line UserErrors."""
    if name not in _FACTORIES and name in _LAZY:
        importlib.import_module(_LAZY[name])
    factory = _FACTORIES.get(name)
    if factory is None:
        raise UserError(f"unknown agent {name!r}", fix=f"choose from: {', '.join(agent_names())}")
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        raise UserError(f"agent {name!r}: bad options ({exc})") from None
    return factory(**options)

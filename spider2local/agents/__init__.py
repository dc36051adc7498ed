"""Agents: whatever does a task's work inside a prepared workspace.

A leaf of the package: nothing outside ``agents/`` imports from here except
:mod:`spider2local.agents.registry` (``make_agent`` and each agent's capabilities). The contract an
agent implements, :mod:`spider2local.agents.contract`, belongs to the run that hands the work out.
``claude/`` is the only importer of claude_agent_sdk; ``noop``, ``reference`` and ``replay`` are
the offline baselines.
"""

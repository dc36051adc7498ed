"""Agents: whatever does a task's work inside a prepared workspace (see :mod:`.base`)."""

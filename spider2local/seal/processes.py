"""A session's processes: the marker every one of them carries, and the sweep that ends them.

The SDK does not start the Claude CLI in a process group of its own, and a command agent's
children may leave theirs; what they all keep is their environment. So each session gets a
random marker in :data:`MARKER_ENV`, inherited by everything it starts (the warm dbt server
included), and the sweep kills every process that carries it.
"""

from __future__ import annotations

import functools

from spider2local.proc.kill import KILL_GRACE, akill_processes
from spider2local.proc.procfs import carrying_env

MARKER_ENV = "SPIDER2LOCAL_AGENT_RUN"
"""Set in the CLI's environment and inherited by everything it starts: how the sweep finds a
session's processes (the SDK does not start the CLI in its own process group)."""


async def sweep(marker: str, grace: float = KILL_GRACE) -> list[int]:
    """Kill every process of the session (those whose environment carries
    ``MARKER_ENV=marker``) with the one kill policy of :mod:`spider2local.proc.kill`; returns
    the pids signalled. Never stopped halfway by a cancellation."""
    result = await akill_processes(functools.partial(carrying_env, MARKER_ENV, marker),
                                   grace=grace)
    return list(result.signalled)

"""Which isolation a run uses: the ``--isolation`` choice, resolved once per run.

``auto`` uses the namespace sandbox where it works and goes on without it elsewhere (macOS,
kernels or containers that forbid unprivileged user namespaces), with a warning and the fact
recorded; ``namespace`` refuses to start without it; ``none`` never builds one. Agents that run
no untrusted code (no model, no shell: noop, reference, replay) need none: their tasks record
``not-needed`` instead of pretending to be isolated or blaming the machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from spider2local.exceptions import UserError
from spider2local.sandbox.probe import Probe, probe
from spider2local.suite.options import Isolation


class IsolationMode(StrEnum):
    """What a run actually uses; recorded in run.json and in every result.json."""

    NAMESPACE = "namespace"
    """The agent's whole process tree runs in the sandbox (:mod:`.launcher`), its network
    sealed: the model gateway is its only way out (:mod:`.network`)."""
    NONE = "none"
    """The agent runs with the runner's rights: only detection guards the run."""
    NOT_NEEDED = "not-needed"
    """The agent runs no untrusted code (no model, no shell), so nothing is sandboxed."""


@dataclass(frozen=True)
class IsolationRecord:
    """The isolation a run used, as run.json records it (``isolation``): the one record of it.
    Every reader asks :attr:`spider2local.run.manifest.RunManifest.isolation_mode`; a run that
    recorded none had no isolation. (A result's ``isolation`` is its trial's own: a merged run
    can join a sealed and an unsealed source.)"""

    requested: Isolation | None = None
    """What was asked for (``--isolation``, ``[run] isolation``); ``None`` in runs that only
    recorded the mode."""
    mode: IsolationMode = IsolationMode.NONE
    reason: str | None = None
    """Why this mode (the probe's finding, or ``isolation none was asked for``)."""


@dataclass(frozen=True)
class IsolationChoice:
    requested: Isolation
    mode: IsolationMode
    reason: str
    warning: str | None = None
    """One line to print at the start of the run (``auto`` fell back to ``none``)."""

    @property
    def record(self) -> IsolationRecord:
        """What run.json keeps of the choice (the warning is printed, not recorded)."""
        return IsolationRecord(self.requested, self.mode, self.reason)


def choose_isolation(requested: Isolation, *, sandboxed: bool, agent: str,
                     check: Callable[[], Probe] | None = None) -> IsolationChoice:
    """Resolve ``requested`` for an agent; probes the machine at most once (cached).

    Raises :class:`UserError` (exit 2) when ``namespace`` is asked for and cannot work here.
    """
    if not sandboxed:
        return IsolationChoice(requested, IsolationMode.NOT_NEEDED,
                               f"--agent {agent} runs no untrusted code (no model, no shell)")
    if requested is Isolation.NONE:
        return IsolationChoice(requested, IsolationMode.NONE, "isolation none was asked for")
    found = (check or probe)()
    if found.ok:
        return IsolationChoice(requested, IsolationMode.NAMESPACE,
                               "user, mount, PID and network namespaces work here; the agent's "
                           "network is sealed: only its model gateway is reachable")
    if requested is Isolation.NAMESPACE:
        raise UserError(f"isolation namespace is not available here: {found.reason}",
                        fix=f"{found.fix}; or run with --isolation none or auto")
    return IsolationChoice(requested, IsolationMode.NONE, found.reason,
                           warning=f"warning: running WITHOUT isolation ({found.reason}); "
                                   f"the agent can reach gold and the scorer. To isolate: "
                                   f"{found.fix}")

"""Whose fault is a full disk, or a locked database, once the agent has run: the one owner of
those rules.

:mod:`.faults` calls a full disk the machine's (``infrastructure``: never scored, run again by a
resume). That is only true while the agent did not fill it: an agent can write until the file
system its workspace lives on is full (a small tmpfs, a nearly full laptop disk) while its
workspace stays under ``--workspace-size`` (4 GiB by default), leave a WAL, and the checkpoint
then fails with ENOSPC. Called the machine's, that buys the agent a free re-roll on every
resume. So the runner records, when it makes a workspace, how much was free on its file system
and how much the workspace held (:class:`Room`), and asks :func:`agents_doing` about any
ENOSPC or EDQUOT after the agent started.

The rule, and why:

- the workspace grew past ``--workspace-size``: the agent's, whatever else happened (its
  processes are killed at that size; a disk that fills before the watchdog's next look is
  still its doing);
- else, the workspace grew by at least half of what was free when it was made, and by at least
  :data:`MIN_BLAMED_GROWTH`: the agent's. Half, because a disk that ran out while the agent
  wrote most of what was free was filled by the agent, while one that another process (a
  sibling task, a download, the user) filled leaves the workspace's share small; a process
  racing the agent for the same space leaves one of them with at most about half of it, so
  "at least half" names the writer that took the most. The floor, because a disk that was
  already nearly full (less than the floor free) runs out under any honest agent's ordinary
  writing (dbt's logs and ``target/``, a rebuilt table): that disk is the machine's fault.
- else (a disk already nearly full, or filled by something else while the agent stayed small,
  or a workspace whose free space could not be measured): the machine's, as before.

Growth is measured as the workspace's allocated blocks (:func:`spider2local.workspace.tree.
disk_usage`), so a sparse file counts what it takes, and only what is inside the workspace
counts: an agent that writes elsewhere on the disk (possible without a sandbox) is not caught
by this rule, and stays ``infrastructure``.

The other free re-roll is a lock: without a sandbox an agent can leave a detached process
(``env -i``, ``cd /``, a double fork) holding the task's database open, and the checkpoint then
fails on DuckDB's lock, which :mod:`.faults` reads as another process's: the machine's. But
after the agent stage the database lives in the task's private workspace, and the runner has
killed every process holding it (:func:`spider2local.proc.reap.areap` with the database's
files); a lock that is still there can only be the agent's doing (:func:`held_database`).
"""

from __future__ import annotations

from dataclasses import dataclass

from spider2local.core.faults import is_locked

MIN_BLAMED_GROWTH = 16 * 2**20
"""Bytes the workspace must have grown by at least for a full disk to be the agent's: a few
dbt runs' logs, manifests and rebuilt tables of a real task stay below it, so a disk with less
than this free when the workspace was made (already nearly full) stays the machine's fault."""


@dataclass(frozen=True)
class Room:
    """The workspace's file system when the workspace was made, before the agent started."""

    free: int
    """Bytes free there for the runner's user (``statvfs``: the blocks reserved for root count
    only when the runner is root, because only then can the agent's processes use them)."""
    used: int
    """Bytes the workspace itself held (its allocated blocks)."""


def mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def too_big(used: int, limit: int) -> str:
    """The reason given when the workspace grew past ``--workspace-size``."""
    return (f"the workspace grew past --workspace-size ({mib(used)} > {mib(limit)}); "
            "the agent's processes were killed")


def agents_doing(room: Room | None, used: int, limit: int, *, disk_full: bool) -> str | None:
    """Why a machine fault after the agent started is the agent's doing (the reason, with the
    figures, for the error message), or ``None`` when it is the machine's.

    ``used``: the workspace's bytes now; ``limit``: ``--workspace-size``; ``room``: what
    :class:`Room` recorded (``None`` when the file system could not be measured); ``disk_full``:
    the fault is ENOSPC or EDQUOT (:func:`spider2local.core.faults.is_disk_full`). A workspace
    past its limit makes any machine fault the agent's (it went past what it was allowed, and
    its processes were being killed for it); the free-space rule only reads a full disk."""
    if used > limit:
        return too_big(used, limit)
    if room is None or not disk_full:
        return None
    grown = used - room.used
    if grown >= MIN_BLAMED_GROWTH and 2 * grown >= room.free:
        return (f"the agent filled the disk: its workspace grew by {mib(grown)}, and "
                f"{mib(room.free)} was free when it was made (growth of at least half of "
                f"that, and at least {mib(MIN_BLAMED_GROWTH)}, is the agent's doing)")
    return None


def held_database(exc: BaseException) -> str | None:
    """Why a checkpoint's failure is the agent's doing when the task's database was still
    locked (see the module doc), or ``None`` when ``exc`` is no lock."""
    if not is_locked(exc):
        return None
    return ("the task's database was still locked after the agent stage, once every process "
            "holding it had been killed: a process the agent left (or made unkillable) held it")

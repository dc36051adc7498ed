"""The checkpoint before scoring: the agent's database folded into one file, opened by us
only where the workspace rule allows, in a reader sandbox of its own."""

from __future__ import annotations

import os
from pathlib import Path

from spider2local.db.locks import DatabaseLocked, LockWait
from spider2local.exceptions import ScoringError
from spider2local.sandbox.dbreads import checkpoint_sandboxed
from spider2local.sandbox.reply import ReaderDuckDBError
from spider2local.workspace.guard import (
    LockedOut,
    database_files,
)

CHECKPOINT_LOCK_WAIT = LockWait(seconds=3.0, max_delay=0.5)
"""How long a just-killed dbt may keep its lock before the checkpoint gives up."""


def checkpoint_database(db: Path, *, root: Path, timeout: float | None = None) -> None:
    """Fold the WAL into ``db`` so the file alone is complete (what gets scored and kept).

    ``db`` must be a plain file in the workspace ``root`` (:mod:`.guard`): this opens it
    read-write, and a symlink the agent left would open gold or the dataset instead. External
    access is off: the file's views and macros are the agent's SQL, run here outside the
    sandbox. A just-killed dbt may still hold the lock for a moment: retry briefly. Raises
    :class:`ScoringError` when the file is missing (opening it would create an empty one),
    stays locked, or is not a DuckDB file; :class:`OutsideWorkspace` (a ScoringError) when it
    is not a plain file of the workspace, and its :class:`LockedOut` when the agent made it
    unopenable (:func:`_refused_to_us`): the agent's doing, scored as no result. ``timeout``:
    seconds after which the sandboxed child is killed (default: its own generous one), so that
    a stage deadline leaves no checkpoint running behind it.
    """
    try:
        database_files(root, db)
        refused = _refused_to_us(db)
    except FileNotFoundError:
        raise ScoringError(f"{db}: result database missing") from None
    except PermissionError as exc:  # a folder on the way made untraversable
        refused = exc.strerror or "Permission denied"
    if refused is not None:
        raise LockedOut(f"{db}: the agent made its database unopenable ({refused}: a mode "
                        "or attribute changed in the workspace)")
    try:  # in a reader sandbox holding the database's folder alone (spider2local.sandbox.dbreads)
        waited = checkpoint_sandboxed(db, CHECKPOINT_LOCK_WAIT.seconds, timeout=timeout)
    except ReaderDuckDBError as exc:  # corrupt or not DuckDB: waiting would not help
        raise ScoringError(f"{db}: cannot checkpoint: {exc}") from exc
    if waited is not None:
        raise ScoringError(f"{db}: still locked by another process after {waited:.1f}s; "
                           "cannot checkpoint") from DatabaseLocked(
                               RuntimeError("Could not set lock on file"), 0, waited)


def _refused_to_us(db: Path) -> str | None:
    """What the OS says when the runner cannot open ``db`` (or its WAL) read-write, as
    DuckDB's checkpoint must; ``None`` when it can.

    Asked here, before DuckDB, because DuckDB's message has no errno: "permission denied" on a
    file the runner made writable is the agent's ``chmod``/``chattr``, while a read-only file
    system (EROFS, the machine's) is left for DuckDB to report."""
    for path in (db, db.with_name(db.name + ".wal")):
        try:
            os.close(os.open(path, os.O_RDWR | os.O_NOFOLLOW))
        except FileNotFoundError:
            continue  # no WAL
        except PermissionError as exc:  # EACCES, EPERM
            return exc.strerror or "Permission denied"
    return None

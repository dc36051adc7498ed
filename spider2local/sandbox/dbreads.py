"""The checkpoint and the database snapshot, each run by ``python -I -m
spider2local.sandbox.dbreads`` in a reader sandbox of its own (:mod:`spider2local.sandbox.readers`).

The checkpoint opens the agent's database read-write (it folds the WAL into the file before
scoring): its sandbox holds that database's folder and nothing else of the host. The snapshot
reads a workspace copy of the start database (a dataset file: untrusted input too): its sandbox
holds that one file. The callers check the path first (:mod:`spider2local.workspace.guard`).
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from spider2local.db.snapshot import DbSnapshot, FileIdentity
from spider2local.exceptions import DatasetError

MODULE = "spider2local.sandbox.dbreads"
CHECKPOINT_TIMEOUT = 600.0
SNAPSHOT_TIMEOUT = 300.0
"""Generous: a reader that takes longer is stuck (a checkpoint of the largest Spider2-DBT files
takes seconds), and the task must not wait for ever."""


def checkpoint_sandboxed(db: Path, lock_seconds: float, *,
                         timeout: float | None = None) -> float | None:
    """CHECKPOINT ``db`` in its sandbox, retrying ``lock_seconds`` on a lock; ``None`` when done,
    else the seconds waited on a lock that stayed. Raises what the child raised. The child is
    killed after ``timeout`` seconds (default :data:`CHECKPOINT_TIMEOUT`)."""
    from spider2local.sandbox.readers import ReaderFiles, ask_reader_sync
    from spider2local.sandbox.reply import result_of

    folder = Path(os.path.realpath(db.parent))
    answer = ask_reader_sync(MODULE, {"job": "checkpoint", "db": str(folder / db.name),
                                      "lock_seconds": lock_seconds},
                             ReaderFiles(writable=(folder,)),
                             timeout=CHECKPOINT_TIMEOUT if timeout is None else timeout)
    waited = result_of(answer)
    return None if waited is None else float(waited)


def snapshot_sandboxed(db: Path) -> dict[str, Any]:
    """The snapshot's JSON data of ``db``, read in its sandbox."""
    from spider2local.sandbox.readers import ReaderFiles, ask_reader_sync, bound
    from spider2local.sandbox.reply import result_of

    real = Path(os.path.realpath(db))
    answer = ask_reader_sync(MODULE, {"job": "snapshot", "db": str(real), "label": db.name},
                             ReaderFiles(read_only=bound([real])), timeout=SNAPSHOT_TIMEOUT)
    data = result_of(answer)
    assert isinstance(data, dict)
    return data


CACHE_ENTRIES = 256
"""Snapshots kept per process at most (the newest): a run of all 68 Spider2-DBT tasks needs
one each, and one snapshot is a few kB."""
_cache: OrderedDict[FileIdentity, DbSnapshot] = OrderedDict()
_cache_lock = threading.Lock()  # the runner prepares several workspaces in worker threads


def snapshot_database(db: Path, *, source: FileIdentity | None = None) -> DbSnapshot:
    """Snapshot ``db``, read in a reader sandbox holding that file alone
    (this module): a dataset's database is untrusted input, and its views
    are bound to be described.

    ``source``: the :func:`file_identity` of the file ``db`` is a byte-for-byte copy of (the
    dataset's start database, seen unchanged across the copy). A snapshot of a file of the
    same identity taken earlier in this process is returned without reading ``db``: every
    trial of a task copies the same start database, and each reader child costs a fresh
    interpreter importing DuckDB (0.4 s measured, 2 loaded cores), for the same answer.

    Raises :class:`DatasetError` when the file is missing or is not a readable DuckDB file
    (never cached: the next trial reads it again).
    """
    if not db.is_file():
        raise DatasetError("database file not found", path=db)
    if source is not None and source[0] is not None and db.stat().st_size == source[0][3]:
        with _cache_lock:
            known = _cache.get(source)
        if known is not None and known.database == db.name:
            return known
    data = snapshot_sandboxed(db)
    if "problem" in data:
        raise DatasetError(str(data["problem"]), path=db)
    found = DbSnapshot.from_json(json.dumps(data))
    if source is not None:
        remember_snapshot(source, found)
    return found


def forget_snapshots() -> None:
    """Empty this process's snapshot cache (the test tiers start every pure test without one,
    so whether a test reads a database in a child never depends on which test ran before)."""
    with _cache_lock:
        _cache.clear()


def remember_snapshot(source: FileIdentity, snapshot: DbSnapshot) -> None:
    """Keep ``snapshot`` as the one of the file of identity ``source``."""
    with _cache_lock:
        _cache[source] = snapshot
        _cache.move_to_end(source)
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)


def _checkpoint(db: Path, lock_seconds: float) -> float | None:
    from spider2local.db.connect import open_database
    from spider2local.db.locks import DatabaseLocked, LockWait, retry_on_lock

    def once() -> None:
        con = open_database(db, untrusted=True, write=True)
        try:
            con.execute("CHECKPOINT")
        finally:
            con.close()

    try:
        retry_on_lock(once, LockWait(seconds=lock_seconds, max_delay=0.5))
    except DatabaseLocked as locked:
        return locked.waited
    return None


def _job(request: dict[str, Any]) -> Any:
    import dataclasses

    from spider2local.db.snapshot import read_snapshot

    db = Path(request["db"])
    if request["job"] == "checkpoint":
        return _checkpoint(db, float(request["lock_seconds"]))
    if request["job"] == "snapshot":
        found = read_snapshot(db, str(request["label"]))
        return found if isinstance(found, dict) else dataclasses.asdict(found)
    raise ValueError(f"unknown job {request['job']!r}")


if __name__ == "__main__":
    from spider2local.sandbox.reply import serve

    serve(_job)


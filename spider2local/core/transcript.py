"""The task's transcript: append-only JSON lines, each message on disk as soon as it arrives.

Owned by the run (it names the workspace of every attempt, which is how a resume finds what a
killed run left behind); agents append to it.

Every log a task writes into the run folder is capped (:func:`append_capped`): 400 MB an
agent wrote to the Claude CLI's stderr became 1 GB of transcript, and a full runs disk then
lost this task's result and a sibling's. A line longer than :data:`MAX_LINE` keeps its head;
once a file reaches its cap, one ``cut`` line says so and later lines are dropped (counted).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_TRANSCRIPT = 64 * 1024 * 1024
"""Bytes of transcript per task at most: a long real session writes a few MB."""
MAX_QUERIES = 16 * 1024 * 1024
"""Bytes of ``queries.jsonl`` per task at most (results are not logged, only the SQL)."""
MAX_LINE = 1024 * 1024
"""Bytes of one line at most; a longer one is replaced by its head and its length."""
UNCAPPED = frozenset({"attempt", "outcome"})
"""The runner's own entries (small, one per attempt): kept past the cap (:data:`RUNNER_ROOM`)."""
CUT_KIND = "cut"
RUNNER_ROOM = 64 * 1024
_NOTE_ROOM = 512
_cut: set[str] = set()
"""The logs of this process cut so far: one note each, then nothing but the runner's own."""
_lock = threading.Lock()


def fit_line(line: str, kind: str = "line") -> str:
    """``line`` (one JSON document), or when longer than :data:`MAX_LINE` a JSON line of the
    same ``kind`` that keeps its head and says how long it was."""
    if len(line) <= MAX_LINE:
        return line
    return json.dumps({"t": round(time.time(), 3), "kind": kind,
                       "data": {"cut": f"line of {len(line)} characters cut to its first "
                                       f"{MAX_LINE // 2}", "head": line[: MAX_LINE // 2]}})


def append_capped(path: Path, line: str, cap: int, *, runner: bool = False) -> bool:
    """Append ``line`` (no newline) to ``path`` unless the file would pass ``cap`` bytes; the
    first line refused is replaced by a ``cut`` note naming the cap, and every later one is
    dropped. Returns whether ``line`` was written. ``runner``: one of the runner's own small
    entries, kept past the cap (up to :data:`RUNNER_ROOM` more bytes). Raises OSError as
    ``open`` does."""
    data = (line + "\n").encode("utf-8", errors="replace")
    key = os.path.abspath(path)  # noqa: PTH100 (a key, not a path to follow)
    with _lock, path.open("ab") as fh:
        size = fh.seek(0, os.SEEK_END)
        if runner:
            if size + len(data) > cap + RUNNER_ROOM:
                return False
        elif key in _cut:
            return False
        elif size + len(data) > cap - _NOTE_ROOM:
            note = {"t": round(time.time(), 3), "kind": CUT_KIND,
                    "data": f"{path.name} reached its cap of {cap} bytes here; later lines "
                            "were dropped"}
            fh.write((json.dumps(note) + "\n").encode())
            _cut.add(key)
            return False
        fh.write(data)
        return True


def forget_cut(path: Path) -> None:
    """``path`` starts afresh (its task folder was reset for a new run of the task)."""
    with _lock:
        _cut.discard(os.path.abspath(path))  # noqa: PTH100


class Transcript:
    """Append-only JSON lines: each message is on disk as soon as it arrives."""

    def __init__(self, path: Path, cap: int | None = None) -> None:
        self.path = path
        self.cap = MAX_TRANSCRIPT if cap is None else cap
        self.lost = 0
        """Lines that could not be written (a full disk): counted, never raised."""
        self.dropped = 0
        """Lines left out because the transcript reached its cap."""
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, kind: str, payload: Mapping[str, Any] | str) -> None:
        """Append one line. A write the disk refuses (full, read-only) is logged once and
        counted, never raised: the transcript is a record of the work, and losing a line of it
        must not stop the work (the task's own result says what the machine did)."""
        line = fit_line(json.dumps({"t": round(time.time(), 3), "kind": kind,
                                    "data": payload}, default=str), kind)
        # The runner's own entries name each attempt's workspace, which is how the next command
        # on a killed run finds it (:mod:`.stale`): never dropped, whatever the agent wrote
        try:
            if not append_capped(self.path, line, self.cap, runner=kind in UNCAPPED):
                self.dropped += 1
        except OSError as exc:
            if not self.lost:
                log.warning("%s: transcript line not written: %s", self.path,
                            exc.strerror or exc)
            self.lost += 1

"""The task's transcript: append-only JSON lines, each message on disk as soon as it arrives.

Owned by the run (it names the workspace of every attempt, which is how a resume finds what a
killed run left behind); agents append to it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class Transcript:
    """Append-only JSON lines: each message is on disk as soon as it arrives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lost = 0
        """Lines that could not be written (a full disk): counted, never raised."""
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, kind: str, payload: Mapping[str, Any] | str) -> None:
        """Append one line. A write the disk refuses (full, read-only) is logged once and
        counted, never raised: the transcript is a record of the work, and losing a line of it
        must not stop the work (the task's own result says what the machine did)."""
        line = json.dumps({"t": round(time.time(), 3), "kind": kind, "data": payload},
                          default=str)
        try:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError as exc:
            if not self.lost:
                log.warning("%s: transcript line not written: %s", self.path,
                            exc.strerror or exc)
            self.lost += 1

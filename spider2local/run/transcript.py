"""The task's transcript: append-only JSON lines, each message on disk as soon as it arrives.

Owned by the run (it names the workspace of every attempt, which is how a resume finds what a
killed run left behind); agents append to it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class Transcript:
    """Append-only JSON lines: each message is on disk as soon as it arrives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, kind: str, payload: Mapping[str, Any] | str) -> None:
        line = json.dumps({"t": round(time.time(), 3), "kind": kind, "data": payload},
                          default=str)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

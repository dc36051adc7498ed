"""The gateway's record: one JSON line per exchange (request and response) in the task folder.

Capped, because every request of a conversation repeats the whole conversation (a long session
sends hundreds of MB in total): each body is kept up to :data:`BODY_CAP` bytes, and once the
file holds :data:`FILE_CAP` bytes only the exchanges' metadata (method, path, status, sizes,
usage) is written, after one line saying so. A write the disk refuses is counted, never
raised: losing the record must not stop the work (the result says what was spent).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BODY_CAP = 2 * 1024 * 1024
FILE_CAP = 64 * 1024 * 1024


class ExchangeLog:
    def __init__(self, path: Path, *, body_cap: int = BODY_CAP,
                 file_cap: int = FILE_CAP) -> None:
        self.path = path
        self.body_cap = body_cap
        self.file_cap = file_cap
        self.written = 0
        self.lost = 0
        self.capped = False

    def body(self, data: bytes) -> dict[str, Any]:
        """A body as recorded: its text up to the cap, its full size, and whether it was cut."""
        keep = data[: self.body_cap] if not self.capped else b""
        return {"size": len(data), "text": keep.decode("utf-8", "replace"),
                "truncated": len(keep) < len(data)}

    def write(self, entry: dict[str, Any]) -> None:
        if self.written >= self.file_cap and not self.capped:
            self.capped = True
            self._append({"t": round(time.time(), 3), "note": f"record capped at "
                          f"{self.file_cap} bytes: later exchanges keep their metadata only"})
        if self.capped:
            entry = {key: value for key, value in entry.items()
                     if key not in ("request", "response")} | {
                "request_size": entry.get("request", {}).get("size"),
                "response_size": entry.get("response", {}).get("size")}
        self._append(entry)

    def _append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, default=str) + "\n"
        try:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
            self.written += len(line)
        except OSError as exc:
            if not self.lost:
                log.warning("%s: API record not written: %s", self.path, exc.strerror or exc)
            self.lost += 1

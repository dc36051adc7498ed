"""The transcript: append-only, and never the reason a task stops."""

from __future__ import annotations

import json
from pathlib import Path

from spider2local.run.transcript import Transcript


def test_lines_are_appended_as_json(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "t" / "transcript.jsonl")
    transcript.append("attempt", {"attempt": 1})
    transcript.append("text", "hello")
    lines = [json.loads(x) for x in transcript.path.read_text().splitlines()]
    assert [(x["kind"], x["data"]) for x in lines] == [("attempt", {"attempt": 1}),
                                                       ("text", "hello")]
    assert transcript.lost == 0


def test_a_full_disk_loses_lines_and_counts_them_never_raises() -> None:
    transcript = Transcript(Path("/dev/full"))  # every write: ENOSPC, as on a full disk
    transcript.append("attempt", {"attempt": 1})
    transcript.append("text", "still working")
    assert transcript.lost == 2

"""The transcript: append-only, and never the reason a task stops."""

from __future__ import annotations

import json
from pathlib import Path

from spider2local.core.transcript import MAX_LINE, Transcript


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


def test_the_transcript_is_capped_with_a_note_where_it_was_cut(tmp_path: Path) -> None:
    """400 MB an agent wrote to the CLI's stderr became 1 GB of transcript: a cap, one note."""
    transcript = Transcript(tmp_path / "transcript.jsonl", cap=64 * 1024)
    transcript.append("attempt", {"attempt": 1, "workspace": "/tmp/ws"})
    for i in range(2000):
        transcript.append("cli_stderr", f"junk {i} " + "x" * 100)
    transcript.append("outcome", {"error": None})  # the runner's own entries are always kept
    text = transcript.path.read_text()
    assert len(text) < 64 * 1024 + 1024
    lines = [json.loads(x) for x in text.splitlines()]
    kinds = [x["kind"] for x in lines]
    assert kinds[0] == "attempt" and kinds[-1] == "outcome"
    assert kinds.count("cut") == 1 and "cap of 65536 bytes" in lines[kinds.index("cut")]["data"]
    assert transcript.dropped > 1000 and transcript.lost == 0
    # another writer (a resumed run) appends to the same file: still one note
    Transcript(transcript.path, cap=64 * 1024).append("cli_stderr", "y" * 5000)
    assert transcript.path.read_text().count('"kind": "cut"') == 1


def test_one_huge_line_keeps_its_head_and_says_so(tmp_path: Path) -> None:
    transcript = Transcript(tmp_path / "transcript.jsonl")
    transcript.append("cli_stderr", "z" * (3 * MAX_LINE))
    (line,) = transcript.path.read_text().splitlines()
    entry = json.loads(line)
    assert len(line) < MAX_LINE and entry["kind"] == "cli_stderr"
    assert "cut to its first" in entry["data"]["cut"] and entry["data"]["head"].count("z") > 1000

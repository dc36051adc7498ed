"""The one rule for workspace files the runner reads from outside the sandbox."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spider2local.workspace.guard import (
    OutsideWorkspace,
    is_workspace_file,
    opened_by_us,
    workspace_file,
)


def test_plain_file_passes_and_every_disguise_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "gold.duckdb"
    (root / "p").mkdir(parents=True)
    outside.write_text("gold")
    (root / "p" / "ok.duckdb").write_text("mine")
    assert workspace_file(root, root / "p" / "ok.duckdb").st_size == 4
    (root / "p" / "link.duckdb").symlink_to(outside)
    (root / "linked").symlink_to(root / "p")  # a folder on the way is a link
    os.link(outside, root / "p" / "hard.duckdb")
    os.mkfifo(root / "p" / "fifo.duckdb")
    for name, why in (("p/link.duckdb", "symlink"), ("linked/ok.duckdb", "symlink"),
                      ("p/hard.duckdb", "hard link"), ("p/fifo.duckdb", "not a regular"),
                      ("p/ok.duckdb/x", "not a folder")):
        with pytest.raises(OutsideWorkspace, match=why):
            workspace_file(root, root / name)
        assert not is_workspace_file(root, root / name)
    with pytest.raises(FileNotFoundError):
        workspace_file(root, root / "p" / "gone.duckdb")
    assert outside.read_text() == "gold"


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="no /proc/self/fd here")
def test_opened_by_us_sees_a_file_swapped_for_a_symlink_after_the_check(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "gold.duckdb"
    root.mkdir()
    outside.write_text("gold")
    db = root / "db.duckdb"
    db.write_text("mine")
    workspace_file(root, db)  # checked while still plain ...
    db.unlink()
    db.symlink_to(outside)  # ... then swapped before the library opens it by name
    with db.open() as fh:
        assert fh.read() == "gold"
        assert opened_by_us(root, db) is False
    db.unlink()
    db.write_text("mine")
    with db.open():
        assert opened_by_us(root, db) is True

"""The sandbox probe degrades visibly: a machine it cannot sandbox on is a reason and a fix."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from spider2local.sandbox.probe import run_probe


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_a_tmpdir_too_long_for_a_unix_socket_is_a_reason_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long = tmp_path / ("d" * 60) / ("e" * 60)
    long.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    found = run_probe()
    assert not found.ok
    assert "Unix socket" in found.reason and "shorter" in found.fix

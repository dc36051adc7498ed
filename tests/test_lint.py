"""ruff and mypy (strict on the package) are part of the test command, so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_ruff_clean() -> None:
    proc = subprocess.run([str(BIN / "ruff"), "check", "spider2local", "tests", "benchmarks"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_strict_clean() -> None:
    proc = subprocess.run([str(BIN / "mypy")], cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr

"""Shell completion as bash asks for it (``_SPIDER2LOCAL_COMPLETE=bash_complete``): task ids
from the suite, run ids from --runs-dir, nothing (and no traceback) when either is broken."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_run_command import SAMPLE_IDS

pytestmark = pytest.mark.process


def complete(words: str, cwd: Path, shell: str = "bash") -> subprocess.CompletedProcess[str]:
    """What bash's completion function gets for the command line ``words`` (the cursor after
    its last word; a trailing space starts a new, empty word)."""
    parts = words.split()
    cword = len(parts) if words.endswith(" ") else len(parts) - 1
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "COMP_WORDS": words,
           "COMP_CWORD": str(cword), "_SPIDER2LOCAL_COMPLETE": f"{shell}_complete"}
    return subprocess.run([sys.executable, "-m", "spider2local"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def values(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


def make_run(runs: Path, run_id: str, started: str = "2026-01-01T00:00:00+00:00") -> None:
    folder = runs / run_id
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(
        f'{{"schema_version": 5, "run_id": "{run_id}", "started_at": "{started}"}}')


def test_task_ids_come_from_the_suite_the_command_would_use(tmp_path: Path) -> None:
    assert values(complete("spider2local run ", tmp_path)) == list(SAMPLE_IDS)
    assert values(complete("spider2local run ba", tmp_path)) == ["bakery001"]
    assert values(complete("spider2local derive-dates gy", tmp_path)) == ["gym001"]
    assert values(complete("spider2local run --ag", tmp_path))[:1] == ["--agent"]


def test_run_ids_come_from_the_runs_dir_newest_first(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "old", "2026-01-01T00:00:00+00:00")
    make_run(tmp_path / "runs", "new", "2026-02-01T00:00:00+00:00")
    make_run(tmp_path / "elsewhere", "other")
    (tmp_path / "runs" / "not-a-run").mkdir()
    assert values(complete("spider2local report ", tmp_path)) == ["new", "old", "latest"]
    assert values(complete("spider2local compare new ", tmp_path)) == ["new", "old", "latest"]
    assert values(complete("spider2local report --runs-dir elsewhere ", tmp_path)) == [
        "other", "latest"]
    assert values(complete("spider2local merge o", tmp_path)) == ["old"]


def test_shell_completes_a_run_then_its_tasks_or_a_task(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "r1")
    first = values(complete("spider2local shell ", tmp_path))
    assert first == ["r1", "latest", *SAMPLE_IDS]
    assert values(complete("spider2local shell r1 li", tmp_path)) == ["library001"]
    assert values(complete("spider2local shell bakery001 ", tmp_path)) == []


@pytest.mark.parametrize("suite", ["not toml [[[", "[tasks\n"])
def test_a_broken_suite_or_runs_dir_completes_nothing_quietly(tmp_path: Path,
                                                              suite: str) -> None:
    (tmp_path / "tasks.toml").write_text(suite)
    assert values(complete("spider2local run ", tmp_path)) == []
    (tmp_path / "runs").write_text("a file, not a folder")
    assert values(complete("spider2local report ", tmp_path)) == []


def test_names_from_disk_reach_the_prompt_escaped(tmp_path: Path) -> None:
    make_run(tmp_path / "runs", "evil\x1b]0;owned\x07")
    shown = values(complete("spider2local report ", tmp_path))
    assert len(shown) == 2 and "\x1b" not in shown[0] and "\x07" not in shown[0]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_documented_source_line_prints_a_script(tmp_path: Path, shell: str) -> None:
    env = {**os.environ, "_SPIDER2LOCAL_COMPLETE": f"{shell}_source"}
    proc = subprocess.run([sys.executable, "-m", "spider2local"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "_SPIDER2LOCAL_COMPLETE" in proc.stdout, proc.stderr

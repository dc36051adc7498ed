"""``spider2local shell`` as a user types it: a kept workspace opened by path or by run and task,
untrusted paths and ids refused in one line, a failing preparation in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from spider2local.cli.app import cli as cli_group
from spider2local.sandbox.reply import ReaderError
from spider2local.workspace import prepare as wsmod


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A private TMPDIR, short (the sandbox probe binds a Unix socket in it)."""
    folder = Path(tempfile.mkdtemp(prefix="s2l-cli-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def cli(*args: str, cwd: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TMPDIR": str(tmp), "SHELL": "/bin/sh"}
    return subprocess.run([sys.executable, "-m", "spider2local", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("spider2local: error: "), proc.stderr
    assert all(f in lines[0] for f in fragments), lines[0]


@pytest.mark.process
@pytest.mark.parametrize("path", ["/", "~", "."])
def test_workspace_must_be_a_marked_workspace(path: str, tmp: Path, tmp_path: Path) -> None:
    proc = cli("shell", "--workspace", os.path.expanduser(path), "--command", "echo RAN",
               cwd=tmp_path, tmp=tmp)
    one_line_error(proc, "not a spider2local workspace")
    assert "RAN" not in proc.stdout


def test_shell_arguments_are_checked(tmp_path: Path) -> None:
    for args, fragment in ((("a", "b", "c"), "pass TASK"),
                           (("--workspace", str(tmp_path), "gym001"), "not both"),
                           (("r1", "gym001", "--keep"), "only apply to a fresh workspace")):
        result = CliRunner().invoke(cli_group, ["shell", *args])
        assert result.exit_code == 2 and fragment in result.stderr, result.output
        assert not isinstance(result.exception, Exception) or isinstance(
            result.exception, SystemExit)


def test_a_failing_preparation_is_one_line_and_leaves_no_folder(
        tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> None:
        raise ReaderError("the reader sandbox could not start: unshare: Operation not permitted")

    monkeypatch.setattr(wsmod, "prepare_workspace", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli_group, ["shell", "gym001", "--agent", "noop",
                                            "--command", "true"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert lines == ["spider2local: error: cannot prepare the workspace of gym001: "
                     "ReaderError: the reader sandbox could not start: unshare: Operation "
                     "not permitted"]
    assert sorted(tmp.iterdir()) == []  # the scratch folder too


@pytest.mark.slow  # a noop run, then three shells (~10 s)
def test_shell_run_task_opens_the_workspace_the_run_kept(tmp: Path, tmp_path: Path) -> None:
    run = cli("run", "bakery001", "--agent", "noop", "--keep", "--runs-dir", "runs",
              "--run-id", "r1", cwd=tmp_path, tmp=tmp)
    assert run.returncode == 0, run.stderr
    roots = [p for p in tmp.iterdir() if p.name.startswith("spider2local-bakery001-")]
    assert len(roots) == 1
    proc = cli("shell", "r1", "bakery001", "--command",
               'echo "$SPIDER2LOCAL_FAKE_DATE $PWD"; spider2local --version', cwd=tmp_path,
               tmp=tmp)
    assert proc.returncode == 0, proc.stderr
    date, pwd = proc.stdout.splitlines()[0].split()
    assert date == "2024-09-15" and pwd == str(roots[0] / "bakery001")
    assert proc.stdout.splitlines()[1].startswith("spider2local, version")
    assert proc.stderr.splitlines()[-1].startswith(f"workspace kept: {roots[0] / 'bakery001'}")
    # by path too, and 'latest'; a kept workspace stays, and nothing else is left
    again = cli("shell", "--workspace", str(roots[0] / "bakery001"), "--command", "true",
                cwd=tmp_path, tmp=tmp)
    assert again.returncode == 0, again.stderr
    assert cli("shell", "latest", "bakery001", "--command", "true", cwd=tmp_path,
               tmp=tmp).returncode == 0
    assert sorted(tmp.iterdir()) == roots
    one_line_error(cli("shell", "r1", "../r1", cwd=tmp_path, tmp=tmp), "not a plain folder")
    one_line_error(cli("shell", "r1", "gym001", cwd=tmp_path, tmp=tmp), "no workspace record")
    plain = cli("run", "bakery001", "--agent", "noop", "--runs-dir", "runs", "--run-id", "r2",
                cwd=tmp_path, tmp=tmp)
    assert plain.returncode == 0, plain.stderr
    one_line_error(cli("shell", "r2", "bakery001", cwd=tmp_path, tmp=tmp), "was not kept")

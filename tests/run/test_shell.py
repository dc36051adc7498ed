"""``shell``: a fresh workspace or a kept one, spider2local on PATH, a marked prompt, one line on
exit, no folder left behind, and untrusted paths refused."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from spider2local.core.layout import RESULT, WORKSPACE_RECORD
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.shell import (
    ShellError,
    kept_workspace_of,
    open_kept,
    open_shell,
    prompt_setup,
)
from spider2local.safepath import UnsafePath
from spider2local.sandbox.reply import ReaderDuckDBError
from spider2local.suite.model import SAMPLE, Suite
from spider2local.workspace import prepare as wsmod
from spider2local.workspace.activate import ACTIVATE, CONTEXT_DIR, MARKER, open_workspace


@pytest.fixture(scope="module")
def sample() -> Dataset:
    return load_dataset(Suite(path=Path("tasks.toml"), dataset=SAMPLE))


@pytest.fixture
def gym(sample: Dataset) -> TaskSpec:
    task = sample.get("gym001")
    assert task is not None
    return task


@pytest.fixture
def tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The system temp folder, private to the test: what `shell` leaves there is visible.
    A short path: the sandbox probe binds a Unix socket in it (108 bytes at most)."""
    folder = Path(tempfile.mkdtemp(prefix="s2l-shell-"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("SHELL", "/bin/sh")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run_shell(task: TaskSpec, command: str, out: Path, **kwargs: object) -> tuple[int, str, str]:
    """``open_shell``; the command's stdout (through the file ``out``) and the messages."""
    messages = io.StringIO()
    code = open_shell(task, command=f"{{ {command}; }} > {out}", out=messages,
                      **kwargs)  # type: ignore[arg-type]
    return code, out.read_text(), messages.getvalue()


@pytest.mark.process
def test_fresh_shell_has_spider2local_on_path_and_says_it_deleted_the_workspace(
        gym: TaskSpec, tmp: Path, tmp_path: Path) -> None:
    code, out, said = run_shell(gym, 'echo "$PWD"; echo "$SPIDER2LOCAL_SHELL"; '
                                     "spider2local --version; exit 5", tmp_path / "out")
    assert code == 5
    pwd, label, version = out.splitlines()[:3]
    assert label == f"(spider2local gym001 {gym.date})"
    assert version.startswith("spider2local, version ")
    assert said.splitlines()[-1] == f"workspace deleted: {Path(pwd).parent}"
    assert sorted(tmp.iterdir()) == []  # neither the workspace nor the scratch folder


@pytest.mark.process
def test_shell_keep_leaves_the_marked_workspace_and_no_scratch_folder(
        gym: TaskSpec, tmp: Path, tmp_path: Path) -> None:
    code, out, said = run_shell(gym, 'echo "$PWD"', tmp_path / "out", keep=True)
    assert code == 0
    project = Path(out.strip())
    assert said.splitlines()[-1].startswith(f"workspace kept: {project} (open it again with "
                                            f"`spider2local shell --workspace {project.parent}`")
    assert [p.name for p in tmp.iterdir()] == [project.parent.name]  # no spider2local-tmp-*
    found = open_workspace(project)
    assert found.kept and found.task_id == "gym001"
    assert (project / CONTEXT_DIR / ACTIVATE).is_file()


def test_a_failing_preparation_is_a_shell_error_and_leaves_nothing(
        gym: TaskSpec, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> None:
        raise ReaderDuckDBError("the reader sandbox died", "IOException")

    monkeypatch.setattr(wsmod, "prepare_workspace", broken)
    with pytest.raises(ShellError, match=r"cannot prepare the workspace of gym001: "
                                         r"ReaderDuckDBError: .*reader sandbox died"):
        open_shell(gym, command="true", out=io.StringIO())
    assert sorted(tmp.iterdir()) == []


@pytest.mark.process
def test_a_kept_workspace_opens_with_an_environment_built_anew(
        gym: TaskSpec, tmp: Path, tmp_path: Path) -> None:
    _, out, _ = run_shell(gym, 'echo "$PWD"', tmp_path / "out", keep=True)
    found = open_workspace(Path(out.strip()))
    # what the agent could have left: a script of its own. `shell` never sources it.
    (found.project_dir / CONTEXT_DIR / ACTIVATE).write_text("echo PWNED\n")
    messages, file = io.StringIO(), tmp_path / "kept.out"
    code = open_kept(found, out=messages, command=(
        f'{{ echo "$SPIDER2LOCAL_FAKE_DATE $(command -v dbt) $HOME"; '
        f'command -v spider2local; }} > {file}; exit 3'))
    lines = file.read_text().splitlines()
    assert code == 3
    date, dbt, home = lines[0].split()
    assert date == gym.date.isoformat() and dbt.endswith("/faketime/dbt")
    assert home == str(found.root / ".home")
    assert lines[1].endswith("/bin/spider2local") and not Path(lines[1]).exists()  # removed
    assert "PWNED" not in messages.getvalue()
    assert messages.getvalue().splitlines()[-1].startswith(f"workspace kept: {found.project_dir}")
    assert found.root.is_dir()  # not this shell's to delete
    assert [p for p in tmp.iterdir() if p.name.startswith("spider2local-tmp-")] == []


@pytest.mark.process
def test_an_unkept_workspace_opens_with_a_warning(gym: TaskSpec, tmp: Path,
                                                   tmp_path: Path) -> None:
    ws = wsmod.prepare_workspace(gym, artifacts=tmp_path / "art")
    messages = io.StringIO()
    assert open_kept(open_workspace(ws.root), command="true", out=messages) == 0
    assert "is not marked kept: a run may still be using it" in messages.getvalue()


def kept_run(tmp_path: Path, gym: TaskSpec) -> tuple[RunFolder, Path]:
    """A run folder holding gym001's finished trial whose workspace was kept."""
    folder = RunFolder(tmp_path / "runs" / "r1")
    artifacts = folder.task_dir("gym001")
    ws = wsmod.prepare_workspace(gym, artifacts=artifacts)
    wsmod.keep_workspace(ws)
    (artifacts / RESULT).write_text("{}")
    return folder, ws.root


@pytest.mark.process
def test_run_task_finds_the_workspace_the_run_kept(gym: TaskSpec, tmp: Path,
                                                    tmp_path: Path) -> None:
    folder, root = kept_run(tmp_path, gym)
    found = kept_workspace_of(folder, "gym001")
    assert found.root == root and found.kept


@pytest.mark.process
def test_run_task_refuses_what_the_run_folder_cannot_vouch_for(
        gym: TaskSpec, tmp: Path, tmp_path: Path) -> None:
    folder, root = kept_run(tmp_path, gym)
    record = folder.task_dir("gym001") / WORKSPACE_RECORD
    with pytest.raises(UnsafePath):
        kept_workspace_of(folder, "../r1")
    with pytest.raises(ShellError, match="no workspace record"):
        kept_workspace_of(folder, "bakery001")
    for hostile in ("/", str(Path.home()), str(tmp_path)):  # a record edited to name elsewhere
        record.write_text(json.dumps({"task": "gym001", "root": hostile}))
        with pytest.raises(UserError, match="not a spider2local workspace"):
            kept_workspace_of(folder, "gym001")
    record.write_text("{half")
    with pytest.raises(ShellError, match="unreadable workspace record"):
        kept_workspace_of(folder, "gym001")
    record.write_text(json.dumps({"task": "gym001", "root": str(root)}))
    marker = json.loads((root / MARKER).read_text())
    (root / MARKER).write_text(json.dumps({**marker, "kept": False}))
    with pytest.raises(ShellError, match="not marked kept"):
        kept_workspace_of(folder, "gym001")
    (root / MARKER).write_text(json.dumps({**marker, "task": "fleet001"}))
    with pytest.raises(ShellError, match="task fleet001's, not gym001's"):
        kept_workspace_of(folder, "gym001")
    (folder.task_dir("gym001") / RESULT).unlink()
    with pytest.raises(ShellError, match="has not finished"):
        kept_workspace_of(folder, "gym001")
    shutil.rmtree(root)
    (folder.task_dir("gym001") / RESULT).write_text("{}")
    with pytest.raises(ShellError, match="was not kept"):
        kept_workspace_of(folder, "gym001")


@pytest.mark.process
@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/sh"])
def test_an_interactive_shell_shows_the_marked_prompt(shell: str, tmp_path: Path) -> None:
    """In a real terminal (``script`` gives it a pty): bash's /etc/bash.bashrc must not win."""
    if shutil.which("script") is None or not Path(shell).exists():
        pytest.skip("needs util-linux script and the shell")
    env: dict[str, str] = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    argv = prompt_setup([shell], env, "(spider2local t1 2024-01-02)", tmp_path)
    command = " ".join(subprocess.list2cmdline([a]) for a in argv)
    proc = subprocess.run(["script", "-qec", command, "/dev/null"], input="exit 0\n",
                          env=env, capture_output=True, text=True, timeout=30, check=False)
    assert "(spider2local t1 2024-01-02) " in proc.stdout, proc.stdout

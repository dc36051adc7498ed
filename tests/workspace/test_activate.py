"""A workspace a person walks into: the activation script gives its dbt the task's date, and the
marker is the only way a folder passes for a workspace."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from spider2local.clock.faketime import (
    FAKE_DATE_ENV,
    LIBRARY_ENV,
    REAL_DBT_ENV,
    find_library,
)
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.exceptions import UserError
from spider2local.resources import faketime_dir
from spider2local.suite.model import SAMPLE, Suite
from spider2local.workspace import model as model_mod
from spider2local.workspace import prepare as wsmod
from spider2local.workspace.activate import (
    ACTIVATE,
    CONTEXT_DIR,
    MARKER,
    activation_script,
    mark_kept,
    open_workspace,
    write_marker,
)

DATE = dt.date(2024, 8, 27)
SHELLS = [s for s in ("/bin/sh", "/bin/dash", "/bin/bash", "/usr/bin/zsh") if Path(s).exists()]


@pytest.fixture(scope="module")
def sample() -> Dataset:
    return load_dataset(Suite(path=Path("tasks.toml"), dataset=SAMPLE))


@pytest.fixture
def gym(sample: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[
        tuple[TaskSpec, model_mod.Workspace]]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-in-host-env")
    monkeypatch.setenv("SPIDER2LOCAL_SUITE", "/home/someone/private/tasks.toml")
    task = sample.get("gym001")
    assert task is not None
    ws = wsmod.prepare_workspace(task, artifacts=tmp_path / "art", parent=tmp_path)
    yield task, ws
    wsmod.cleanup_workspace(ws)


def stub_dbt(folder: Path) -> Path:
    """A "real dbt" that prints the day it sees: what the shim preloads libfaketime into."""
    folder.mkdir(exist_ok=True)
    stub = folder / "dbt"
    stub.write_text("#!/bin/sh\nexec date +%F\n")
    stub.chmod(0o755)
    return stub


def script_env(tmp_path: Path) -> dict[str, str]:
    return {FAKE_DATE_ENV: DATE.isoformat(), LIBRARY_ENV: str(find_library()),
            REAL_DBT_ENV: str(stub_dbt(tmp_path / "real")), "DO_NOT_TRACK": "1",
            "DBT_SEND_ANONYMOUS_USAGE_STATS": "false", "ANTHROPIC_API_KEY": "sk-not-this",
            "SPIDER2LOCAL_WARM_DBT": "/gone/socket"}


def sh(shell: str, script: str, env: dict[str, str], cwd: Path) -> list[str]:
    proc = subprocess.run([shell, "-c", script], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


HOST = {"PATH": "/usr/local/bin:/usr/bin:/bin", "DBT_PROFILES_DIR": "/elsewhere",
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "true", "FAKETIME": "+1d"}


@pytest.mark.process
@pytest.mark.parametrize("shell", SHELLS)
def test_sourcing_gives_dbt_the_tasks_date_and_deactivate_undoes_it(
        shell: str, tmp_path: Path) -> None:
    path = tmp_path / ACTIVATE
    path.write_text(activation_script(script_env(tmp_path), task_id="gym001", date=DATE,
                                      shim_dir=faketime_dir().resolve()))
    before = 'echo "$PATH|${PS1-}|${DBT_PROFILES_DIR-unset}|${SPIDER2LOCAL_FAKE_DATE-unset}"'
    out = sh(shell, f"set -eu; PS1='host$ '; {before}; . {path}; "
                    f"echo \"$(command -v dbt)\"; dbt run; date +%F; "
                    f"echo \"$PS1|${{DBT_PROFILES_DIR-unset}}|"
                    f"$DBT_SEND_ANONYMOUS_USAGE_STATS|${{FAKETIME-unset}}|"
                    f"${{SPIDER2LOCAL_WARM_DBT-unset}}\"; "
                    f". {path}; deactivate; {before}; "
                    f"echo \"$DBT_SEND_ANONYMOUS_USAGE_STATS $FAKETIME\"; "
                    "command -v deactivate || echo gone", HOST, tmp_path)
    host_line = "/usr/local/bin:/usr/bin:/bin|host$ |/elsewhere|unset"
    assert out[0] == host_line
    assert out[1] == str(faketime_dir().resolve() / "dbt")  # the shim, first on PATH
    assert out[2] == "2024-08-27"  # dbt, through the shim, lives on the task's day
    assert out[3] == dt.date.today().isoformat()  # the shell itself keeps the real clock
    assert out[4] == "(spider2local gym001 2024-08-27) host$ |unset|false|unset|unset"
    assert out[5:] == [host_line, "true +1d", "gone"]  # sourced twice, one deactivate


@pytest.mark.process
def test_a_prepared_workspace_has_a_marker_and_a_script_with_no_secret(
        gym: tuple[TaskSpec, model_mod.Workspace]) -> None:
    task, ws = gym
    script = (ws.project_dir / CONTEXT_DIR / ACTIVATE).read_text()
    assert "sk-ant-secret" not in script and "/home/someone" not in script
    assert "ANTHROPIC" not in script and "SPIDER2LOCAL_SUITE" not in script
    exported = {line.split("=", 1)[0].removeprefix("export ")
                for line in script.splitlines() if line.startswith("export ")}
    assert exported == {"SPIDER2LOCAL_FAKE_DATE", "SPIDER2LOCAL_LIBFAKETIME",
                        "SPIDER2LOCAL_REAL_DBT", "SPIDER2LOCAL_DBT_RUNS", "DO_NOT_TRACK",
                        "DBT_SEND_ANONYMOUS_USAGE_STATS", "PATH"}
    marker = json.loads((ws.root / MARKER).read_text())
    assert marker == {"schema": 1, "task": "gym001", "date": task.date.isoformat(),
                      "project": "gym001", "kept": False}
    found = open_workspace(ws.project_dir)
    assert (found.root, found.project_dir, found.task_id, found.date, found.kept) == (
        ws.root, ws.project_dir, "gym001", task.date, False)
    assert open_workspace(ws.root) == found
    # the agent's env and the script agree on every variable the script sets
    env = sh("/bin/sh", f"env -i PATH=/usr/bin:/bin sh -c '. {ws.project_dir}/.spider2local/"
                        "activate 2>/dev/null; env'", dict(os.environ), ws.project_dir)
    got = dict(line.split("=", 1) for line in env if "=" in line)
    for name in ("SPIDER2LOCAL_FAKE_DATE", "SPIDER2LOCAL_REAL_DBT", "SPIDER2LOCAL_LIBFAKETIME",
                 "SPIDER2LOCAL_DBT_RUNS", "DO_NOT_TRACK", "DBT_SEND_ANONYMOUS_USAGE_STATS"):
        assert got[name] == ws.env[name], name
    assert got["PATH"].split(":")[0] == ws.env["PATH"].split(":")[0]


@pytest.mark.process
def test_keeping_rewrites_what_the_agent_replaced_without_writing_through_links(
        gym: tuple[TaskSpec, model_mod.Workspace], tmp_path: Path) -> None:
    task, ws = gym
    outside = tmp_path / "victim.txt"
    outside.write_text("precious")
    context = ws.project_dir / CONTEXT_DIR
    (context / ACTIVATE).unlink()
    (context / ACTIVATE).symlink_to(outside)  # a link: writing through it would clobber
    (ws.root / MARKER).unlink()
    os.link(outside, ws.root / MARKER)  # a hard link to a file outside
    wsmod.keep_workspace(ws)
    assert outside.read_text() == "precious"
    assert not (context / ACTIVATE).is_symlink()
    assert f"SPIDER2LOCAL_FAKE_DATE={task.date}" in (context / ACTIVATE).read_text()
    assert open_workspace(ws.root).kept
    # the whole context folder swapped for a link to elsewhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(context)
    context.symlink_to(elsewhere)
    mark_kept(ws.root, ws.project_dir, ws.env, task_id="gym001", date=DATE,
              shim_dir=faketime_dir())
    assert list(elsewhere.iterdir()) == [] and context.is_dir() and not context.is_symlink()
    assert (context / ACTIVATE).is_file()


def bad_workspace(tmp_path: Path, marker: object, *, name: str = "spider2local-t1-abc",
                  project: str = "t1") -> Path:
    root = tmp_path / name
    (root / project).mkdir(parents=True)
    (root / MARKER).write_text(marker if isinstance(marker, str) else json.dumps(marker))
    return root


GOOD = {"schema": 1, "task": "t1", "date": "2024-01-02", "project": "t1", "kept": True}


@pytest.mark.parametrize(("marker", "problem"), [
    ("{not json", "not JSON"),
    ({**GOOD, "schema": 9}, "not schema 1"),
    ({**GOOD, "task": "../x"}, "not a plain folder name"),
    ({**GOOD, "project": "../../etc"}, "not a plain folder name"),
    ({**GOOD, "date": "today"}, "not YYYY-MM-DD"),
    ({**GOOD, "kept": "yes"}, "kept is not"),
    ("x" * 5000, "too large"),
])
def test_a_malformed_marker_is_refused(tmp_path: Path, marker: object, problem: str) -> None:
    with pytest.raises(UserError, match=problem):
        open_workspace(bad_workspace(tmp_path, marker))


def test_only_a_marked_workspace_folder_opens(tmp_path: Path) -> None:
    good = bad_workspace(tmp_path, GOOD)
    assert open_workspace(good).kept
    for path in (Path("/"), tmp_path, good / "t1" / "models", tmp_path / "missing"):
        if path.name == "models":
            path.mkdir()
        with pytest.raises(UserError, match=r"workspace|no such folder"):
            open_workspace(path)
    link = tmp_path / "spider2local-link"
    link.symlink_to(good)
    with pytest.raises(UserError, match="plain folder"):
        open_workspace(link)
    misnamed = bad_workspace(tmp_path, GOOD, name="home-of-someone")
    with pytest.raises(UserError, match="plain folder named spider2local-"):
        open_workspace(misnamed)
    # the project folder, a link to a folder elsewhere
    other = bad_workspace(tmp_path, GOOD, name="spider2local-t1-def", project="real")
    (other / "t1").symlink_to(tmp_path)
    with pytest.raises(UserError, match="leads elsewhere"):
        open_workspace(other)
    # the marker, a link (to a valid marker elsewhere)
    linked = tmp_path / "spider2local-t1-ghi"
    (linked / "t1").mkdir(parents=True)
    (linked / MARKER).symlink_to(good / MARKER)
    with pytest.raises(UserError, match="marker"):
        open_workspace(linked)


def test_write_marker_round_trips(tmp_path: Path) -> None:
    root = tmp_path / "spider2local-t1-x"
    (root / "t1").mkdir(parents=True)
    write_marker(root, task_id="t1", date=DATE, project="t1", kept=True)
    assert open_workspace(root).date == DATE


@pytest.mark.slow  # real dbt under the fake clock (~5-10 s)
def test_real_dbt_in_an_activated_kept_workspace_sees_the_tasks_date(
        gym: tuple[TaskSpec, model_mod.Workspace]) -> None:
    task, ws = gym
    wsmod.keep_workspace(ws)
    (ws.project_dir / "macros").mkdir(exist_ok=True)
    (ws.project_dir / "macros" / "today.sql").write_text(
        "{% macro today() %}{{ print('TODAY=' ~ modules.datetime.date.today()) }}"
        "{% endmacro %}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPIDER2LOCAL_", "FAKE"))}
    out = sh("/bin/sh", ". .spider2local/activate 2>/dev/null && dbt run-operation today",
             env, ws.project_dir)
    assert f"TODAY={task.date.isoformat()}" in out, out
    assert task.date != dt.date.today()

"""Runs by id (issue 23): ``report``, ``compare``, ``score`` and ``merge`` take a run id of
--runs-dir, a folder or 'latest'; ``runs`` lists past runs; default ids cannot collide."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from spider2local.cli.app import cli
from spider2local.core.layout import LOCK
from spider2local.exceptions import UserError
from spider2local.run.folder import LATEST, RunFolder, claim_run_id, resolve_run
from spider2local.run.manifest import RunManifest
from tests.report.test_summary import write_run


def make_runs(runs: Path) -> tuple[RunFolder, RunFolder]:
    """Two runs: r1 (written by write_run, started first) and r2, started a day later."""
    first = write_run(runs)
    second = RunFolder.at(runs, "r2")
    manifest = first.read_manifest()
    assert manifest is not None
    later = (dt.datetime.fromisoformat(manifest.started_at or "") + dt.timedelta(days=1))
    second.create()
    second.write_manifest(replace(manifest, run_id="r2", started_at=later.isoformat()))
    for task in ("a", "b"):
        second.result_path(task).parent.mkdir(parents=True, exist_ok=True)
        second.result_path(task).write_bytes(first.result_path(task).read_bytes())
    return first, second


def invoke(*args: str, cwd: Path) -> tuple[int, str, str]:
    runner = CliRunner()
    old = Path.cwd()
    os.chdir(cwd)
    try:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)
    return result.exit_code, result.stdout, result.stderr


def test_a_run_is_named_by_id_path_or_latest(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first, second = make_runs(runs)
    assert resolve_run("r1", runs) == first.root
    assert resolve_run(str(first.root), runs) == first.root
    assert resolve_run(LATEST, runs) == second.root  # started last, whatever the names say
    with pytest.raises(UserError, match="no run 'nosuch'"):
        resolve_run("nosuch", runs)
    assert resolve_run("../x", runs) == Path("../x")  # a path is the user's: open_run_dir checks
    with pytest.raises(UserError, match="no runs yet"):
        resolve_run(LATEST, tmp_path / "empty")


def test_report_compare_score_and_merge_take_run_ids(tmp_path: Path) -> None:
    """On main each of these needed a folder path; an id was 'does not exist' (exit 2)."""
    make_runs(tmp_path / "runs")
    code, out, _ = invoke("report", "r1", "--format", "json", cwd=tmp_path)
    assert code == 0 and json.loads(out)["run_id"] == "r1"
    code, out, _ = invoke("report", "latest", "--format", "json", cwd=tmp_path)
    assert code == 0 and json.loads(out)["run_id"] == "r2"
    code, out, err = invoke("compare", "r1", "latest", cwd=tmp_path)
    assert code == 0, err
    code, _, err = invoke("merge", "r1", "--into", "runs/both", cwd=tmp_path)
    assert code == 0, err
    assert (tmp_path / "runs" / "both" / "run.json").is_file()
    code, _, err = invoke("report", "nosuch", cwd=tmp_path)
    assert code == 2 and "no run 'nosuch'" in err and "spider2local runs" in err
    assert len(err.strip().splitlines()) == 1
    # another runs folder, through the option (and its environment variable)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, out, _ = invoke("report", "r1", "--runs-dir", str(tmp_path / "runs"), "--format",
                          "json", cwd=elsewhere)
    assert code == 0 and json.loads(out)["run_id"] == "r1"
    os.environ["SPIDER2LOCAL_REPORT_RUNS_DIR"] = str(tmp_path / "runs")
    try:
        code, out, _ = invoke("report", "r2", "--format", "json", cwd=elsewhere)
    finally:
        del os.environ["SPIDER2LOCAL_REPORT_RUNS_DIR"]
    assert code == 0 and json.loads(out)["run_id"] == "r2"


def test_runs_lists_every_run_with_its_state(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first, second = make_runs(runs)
    (runs / "broken").mkdir()
    (runs / "broken" / "run.json").write_text("{not json")
    (runs / "stray").mkdir()  # no run.json: not a run
    (runs / "link").symlink_to(first.root)  # a link to elsewhere is not this folder's run
    fd = os.open(second.root / LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        code, out, err = invoke("runs", "--json", cwd=tmp_path)
    finally:
        os.close(fd)
    assert code == 0, err
    listed = {r["run_id"]: r for r in json.loads(out)}
    assert set(listed) == {"r1", "r2", "broken"}
    assert listed["r1"]["state"] == "interrupted"  # write_run never finished it
    assert listed["r2"]["state"] == "running"
    assert listed["broken"]["state"] == "damaged" and "run.json" in listed["broken"]["problem"]
    assert (listed["r1"]["tasks"], listed["r1"]["passed"], listed["r1"]["cost_usd"]) == (
        5, 1, 0.75)
    assert listed["r1"]["agent"] == "claude"
    code, out, _ = invoke("runs", cwd=tmp_path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["run", "started", "(UTC)"]
    assert [line.split()[0] for line in lines[2:]][-2:] == ["r1", "r2"]  # oldest first
    code, out, _ = invoke("runs", "--runs-dir", str(tmp_path / "none"), cwd=tmp_path)
    assert code == 0 and "no runs in" in out


def test_default_run_ids_never_collide(tmp_path: Path) -> None:
    """Two runs started in the same second used to share one folder (the second resumed the
    first); the id is claimed by an exclusive mkdir."""
    now = dt.datetime(2026, 12, 1, 13, 5, 1)
    ids = [claim_run_id(tmp_path / "runs", now) for _ in range(3)]
    assert ids == ["20261201-130501", "20261201-130501-2", "20261201-130501-3"]
    assert all((tmp_path / "runs" / i).is_dir() for i in ids)


@pytest.mark.slow
@pytest.mark.in_process_readers  # its subject is the run folder's name, not the readers
def test_two_default_runs_in_the_same_second_get_two_folders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import anyio

    from spider2local.dataset.load import load_dataset
    from spider2local.run import folder as folder_module
    from spider2local.run import plan as plan_module
    from spider2local.run.plan import execute_run, plan_run
    from spider2local.run.progress import Progress
    from spider2local.suite.load import bundled_suite_path, load_suite

    for module in (folder_module, plan_module):  # both start in the same second
        monkeypatch.setattr(module, "new_run_id", lambda now=None: "20261201-130501")
    suite = load_suite(bundled_suite_path())
    data = load_dataset(suite)
    runs = tmp_path / "runs"
    plans = [plan_run(suite, data, ids=[data.ids()[0]], agent="noop", runs_dir=runs)
             for _ in range(2)]
    assert not runs.exists()  # planning claims nothing: a refused plan leaves no folder
    folders = [anyio.run(execute_run, plan, Progress(quiet=True)).folder for plan in plans]
    assert folders[0].root != folders[1].root
    assert all(RunManifest is type(f.read_manifest()) for f in folders)

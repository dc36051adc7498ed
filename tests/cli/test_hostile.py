"""Hostile input as a user's command line meets it: real subprocesses, one-line errors (exit 2),
nothing outside the run touched, the dataset byte-identical after a real run (issue 12)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from spider2local.cli.app import SettingType
from spider2local.exceptions import UserError
from spider2local.suite import options
from tests.cli.test_app import assert_one_line_error, run_cli
from tests.helpers import full_disk_prefix, write_task

Build = Callable[..., Path]


def tree_digest(root: Path) -> str:
    """Content, mode and mtime of every file: any write to the dataset changes it."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        h.update(f"{path.relative_to(root)}|{st.st_mode}|{st.st_mtime_ns}".encode())
        if path.is_file() and not path.is_symlink():
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def noop_run(root: Path, cwd: Path, *extra: str) -> tuple[int, str, Path]:
    proc = run_cli("--dataset", str(root), "run", "--agent", "noop", "--runs-dir",
                   str(cwd / "runs"), "--run-id", "r1", *extra, cwd=cwd)
    return proc.returncode, proc.stderr, cwd / "runs" / "r1"


@pytest.mark.process
def test_task_id_with_dotdot_deletes_nothing_outside_the_run(tiny_dataset: Build,
                                                             tmp_path: Path) -> None:
    root = tiny_dataset("ok001")
    write_task(root, "../victim")
    victim = tmp_path / "runs" / "victim"
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("important")
    code, stderr, run_dir = noop_run(root, tmp_path)
    assert code == 0, stderr
    assert (victim / "keep.txt").read_text() == "important"
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert [p.name for p in run_dir.iterdir() if p.is_dir()] == ["ok001"]
    # run shows the dataset's warnings as list does (once each, on stderr)
    listed = run_cli("--dataset", str(root), "list", cwd=tmp_path).stderr
    warnings = [line for line in stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == listed.strip().splitlines()
    assert len(warnings) == 2 and all("'../victim' is not a plain folder name" in w
                                      for w in warnings)


@pytest.mark.process
def test_timeout_nan_is_refused_before_anything_is_written(tiny_dataset: Build,
                                                          tmp_path: Path) -> None:
    root = tiny_dataset("ok001")
    code, stderr, run_dir = noop_run(root, tmp_path, "--timeout=nan")
    assert code == 2 and "Traceback" not in stderr
    assert stderr.strip().splitlines() == [
        "spider2local: error: --timeout: must be positive and finite, not nan "
        "(see `spider2local run --help` for --timeout)"]
    assert not run_dir.exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "x"])
def test_positive_finite_refuses_nan_inf_and_non_positive(value: str) -> None:
    timeout = SettingType(options.setting("timeout"))
    with pytest.raises(UserError, match=r"^--timeout: must be"):
        timeout.convert(value, None, None)
    assert timeout.convert("2.5", None, None) == 2.5


@pytest.fixture(scope="module")
def finished_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One noop run of a two-task dataset for the whole module: each test gets its own copy
    of the run folder (7 s a run on busy cores, against milliseconds a copy). The dataset is
    shared as it is: these tests only read it, and the run folder records its path."""
    home = tmp_path_factory.mktemp("finished")
    root = home / "spider2-dbt"
    (root / "examples").mkdir(parents=True)
    for tid in ("a001", "b001"):
        write_task(root, tid)
    code, stderr, run_dir = noop_run(root, home)
    assert code == 0, stderr
    return root, run_dir


@pytest.fixture
def finished_run(finished_template: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A finished noop run of its own, in ``tmp_path/runs/r1`` (a copy of the module's)."""
    root, template = finished_template
    run_dir = tmp_path / "runs" / "r1"
    shutil.copytree(template, run_dir, symlinks=True)
    return root, run_dir


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.parametrize(("text", "problem"), [
    ('{"tasks": [{"id": "a001", "tables": "x"}]}', "tasks entry 1: 'tables' is str, not int"),
    ('{"run_id": "r1", "tasks": [', "not valid JSON"),
])
@pytest.mark.process
def test_score_on_a_broken_run_json_is_one_line_naming_it(
        finished_run: tuple[Path, Path], text: str, problem: str) -> None:
    root, run_dir = finished_run
    (run_dir / "run.json").write_text(text)
    for command in (["score", str(run_dir)],
                    ["run", "--agent", "noop", "--runs-dir", str(run_dir.parent),
                     "--run-id", "r1"]):
        proc = run_cli("--dataset", str(root), *command, cwd=run_dir.parent)
        assert_one_line_error(proc, f"{run_dir / 'run.json'}: not a usable run.json: {problem}")


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
@pytest.mark.parametrize("corrupt", [
    '{"schema_version": 2, "task_id": "a001", "status": "failed", "agent": "noop", '
    '"fake_date": "2024-09-15", "started_at": "x", "finished_at": "x", "durations": "x"}',
    '{"schema_version": 2, "task_id": 5, "status": "failed", "agent": "noop", '
    '"fake_date": "2024-09-15", "started_at": "x", "finished_at": "x"}',
    '{"schema_version": 2, "task_id": "a001", "status": "failed", "agent": "noop", '
    '"fake_date": "2024-09-15", "started_at": "x", "finished_at": "x", "tables_total": "1"}',
    '{"schema_version": 2, "task_id": "b001", "status": "failed", "agent": "noop", '
    '"fake_date": "2024-09-15", "started_at": "x", "finished_at": "x"}',
    "{",
])
def test_corrupt_result_json_of_one_task_is_rerun_and_spares_the_others(
        finished_run: tuple[Path, Path], corrupt: str) -> None:
    """Decision: a result.json no reader can use (bad JSON, wrong types, another task's id)
    counts as unfinished: `score` and reports leave it out, resume runs that task again."""
    root, run_dir = finished_run
    (run_dir / "a001" / "result.json").write_text(corrupt)
    before = (run_dir / "b001" / "result.json").read_text()
    score = run_cli("--dataset", str(root), "score", str(run_dir), cwd=run_dir.parent)
    assert score.returncode in (0, 1) and "Traceback" not in score.stderr, score.stderr
    resumed = run_cli("--dataset", str(root), "run", "--agent", "noop", "--runs-dir",
                      str(run_dir.parent), "--run-id", "r1", cwd=run_dir.parent)
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr
    assert json.loads((run_dir / "a001" / "result.json").read_text())["task_id"] == "a001"
    assert (run_dir / "b001" / "result.json").read_text() == before


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.slow
def test_absolute_profile_path_never_writes_the_dataset(tiny_dataset: Build,
                                                        tmp_path: Path) -> None:
    """The reference agent runs real dbt in the workspace: with the profile naming the
    dataset's own start database absolutely, dbt used to write into the dataset."""
    root = tiny_dataset("abs001")
    project = root / "examples" / "abs001"
    (project / "profiles.yml").write_text(
        "shop:\n  target: dev\n  outputs:\n    dev:\n      type: duckdb\n"
        f"      path: \"{project / 'shop.duckdb'}\"\n      schema: main\n")
    solution = root / "solutions" / "abs001" / "models"
    solution.mkdir(parents=True)
    (solution / "orders.sql").write_text("select id from raw_orders\n")
    before = tree_digest(root)
    proc = run_cli("--dataset", str(root), "run", "--agent", "reference", "--runs-dir",
                   str(tmp_path / "runs"), "--run-id", "r1", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "runs" / "r1" / "abs001" / "result.json").read_text())
    assert result["passed"] is True, result  # dbt built orders: in the workspace's copy
    assert tree_digest(root) == before


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
@pytest.mark.parametrize("target", ["outside", "inside"])
def test_a_task_folder_that_is_a_symlink_never_stops_the_run(tiny_dataset: Build,
                                                             tmp_path: Path, target: str) -> None:
    root = tiny_dataset("a001", "b001")
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere" if target == "outside" else run_dir / "b001"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("important")
    (run_dir / "a001").symlink_to(elsewhere)
    code, stderr, _ = noop_run(root, tmp_path)
    assert code == 0 and "Traceback" not in stderr, stderr
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["finished_at"] is not None and manifest["interrupted"] is False
    for tid in ("a001", "b001"):
        assert not (run_dir / tid).is_symlink()
        assert json.loads((run_dir / tid / "result.json").read_text())["status"] == "failed"
    if target == "outside":
        assert (elsewhere / "keep.txt").read_text() == "important"


# --- one line, never a traceback (issue 20) ------------------------------------------------

def cli_to(stdout: Any, *args: str, cwd: Path, prefix: Sequence[str] = (),
           env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI with stdout going to ``stdout`` (a file object, e.g. /dev/full)."""
    return subprocess.run([*prefix, sys.executable, "-m", "spider2local", *args], cwd=cwd,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})},
                          stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
                          check=False)


@pytest.mark.process
def test_suite_that_is_a_fifo_or_dev_zero_is_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "suite.fifo"
    os.mkfifo(fifo)
    assert_one_line_error(run_cli("--suite", str(fifo), "list", cwd=tmp_path),
                          f"{fifo}: is not a regular file (a FIFO")
    assert_one_line_error(run_cli("--suite", "/dev/zero", "list", cwd=tmp_path),
                          "/dev/zero: is not a regular file")
    big = tmp_path / "big.toml"
    with big.open("wb") as fh:
        fh.truncate(17 * 1024 * 1024)
    assert_one_line_error(run_cli("--suite", str(big), "list", cwd=tmp_path),
                          "is larger than 16 MiB")


@pytest.mark.process
@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_local_tasks_toml_that_is_not_a_file_is_named_not_ignored(tmp_path: Path,
                                                                    kind: str) -> None:
    local = tmp_path / "tasks.toml"
    if kind == "folder":
        local.mkdir()
    else:
        os.mkfifo(local)
    proc = run_cli("list", cwd=tmp_path)
    assert_one_line_error(proc, f"{local}: is ")
    assert proc.stdout == ""  # the bundled suite was not listed instead


@pytest.mark.parametrize(("args", "fragment"), [
    (["run", "--nosuch"], "No such option '--nosuch'. (see `spider2local run --help`)"),
    (["score"], "Missing argument 'TARGET'. (see `spider2local score --help`)"),
    (["frobnicate"], "No such command 'frobnicate'. (see `spider2local --help`)"),
    (["run", "--jobs", "x"], "--jobs: must be an integer, not 'x' (see `spider2local run "
                             "--help` for --jobs)"),
])
@pytest.mark.process
def test_usage_errors_are_one_line_naming_the_fix(tmp_path: Path, args: list[str],
                                                  fragment: str) -> None:
    proc = run_cli(*args, cwd=tmp_path)
    assert_one_line_error(proc, "spider2local: error: ", fragment)


@pytest.fixture
def dev_full() -> Iterator[Any]:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as fh:
        yield fh


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_stdout_on_a_full_disk_is_one_line(finished_run: tuple[Path, Path], dev_full: Any,
                                          tmp_path: Path) -> None:
    root, run_dir = finished_run
    message = "spider2local: error: cannot write the output: No space left on device"
    for args in (["report", str(run_dir)], ["report", str(run_dir), "--format", "json"],
                 ["--dataset", str(root), "list"]):
        assert_one_line_error(cli_to(dev_full, *args, cwd=tmp_path), message)
    proc = cli_to(dev_full, "--dataset", str(root), "run", "--agent", "noop", "--runs-dir",
                  str(tmp_path / "other"), "--run-id", "x", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(message)  # after the progress lines
    assert json.loads((tmp_path / "other" / "x" / "run.json").read_text())["finished_at"]


@pytest.mark.process
def test_run_json_that_is_not_utf8_is_one_line_everywhere(finished_run: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    root, run_dir = finished_run
    (run_dir / "run.json").write_bytes(b'{"run_id": "r1\xff\xfe"}')
    problem = f"{run_dir / 'run.json'}: not a usable run.json: not UTF-8 text"
    for args in (["report", str(run_dir)], ["compare", str(run_dir), str(run_dir)],
                 ["--dataset", str(root), "score", str(run_dir)],
                 ["--dataset", str(root), "run", "--agent", "noop", "--runs-dir",
                  str(run_dir.parent), "--run-id", "r1"],
                 ["merge", str(run_dir), "--into", str(tmp_path / "merged")]):
        assert_one_line_error(run_cli(*args, cwd=tmp_path), problem)


@pytest.mark.process
def test_nan_in_a_result_json_leaves_that_task_unfinished(finished_run: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    _, run_dir = finished_run
    result = run_dir / "a001" / "result.json"
    result.write_text(result.read_text().replace('"schema_version"',
                                                 '"cost_usd": NaN, "schema_version"', 1))
    proc = run_cli("report", str(run_dir), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    statuses = {t["task_id"]: t["status"] for t in json.loads(proc.stdout)["tasks"]}
    assert statuses["b001"] == "failed" and statuses.get("a001") != "failed", statuses


@pytest.mark.process
def test_full_disks_are_one_line(finished_run: tuple[Path, Path], tmp_path: Path) -> None:
    root, run_dir = finished_run
    # `list` of the bundled suite with its cache folder on a full disk
    cache = tmp_path / "cache"
    proc = cli_to(subprocess.PIPE, "list", cwd=tmp_path, prefix=full_disk_prefix(cache),
                  env={"SPIDER2LOCAL_CACHE": str(cache)})
    assert_one_line_error(proc, "cannot build the sample suite: ", "SPIDER2LOCAL_CACHE")
    # `merge` into a full disk: one line, and no half-made folder left there
    disk = tmp_path / "disk"
    proc = cli_to(subprocess.PIPE, "merge", str(run_dir), "--into", str(disk / "m"),
                  cwd=tmp_path, prefix=full_disk_prefix(disk))
    assert_one_line_error(proc, "No space left on device")
    # `score RUN_DIR` with the run on a full disk: nothing could be re-scored (exit 1)
    kept = tmp_path / "kept"
    kept.mkdir()
    code, stderr, kept_run = noop_run(root, kept, "--keep-db")
    assert code == 0, stderr
    proc = cli_to(subprocess.PIPE, "--dataset", str(root), "score", str(disk / "r1"),
                  cwd=tmp_path, prefix=full_disk_prefix(disk, kept_run))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "cannot write its result.json: No space left on device" in proc.stderr
    # a resume on that full disk
    proc = cli_to(subprocess.PIPE, "--dataset", str(root), "run", "--agent", "noop",
                  "--runs-dir", str(disk), "--run-id", "r1", cwd=tmp_path,
                  prefix=full_disk_prefix(disk, run_dir))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 2), proc.stderr


HOSTILE_TEXT = "\x1b]0;owned\x07\x1b[2J\x00 \u202edeliaf\u202c \x9b31m \u2066x\u2069 \x7f"
"""An agent's message that retitles the terminal, clears it, hides text behind a NUL, and
reverses what follows (RLO), with a C1 CSI, an isolate and a DEL."""
CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7f, 0xa0))] + [
    "\u202e", "\u202c", "\u2066", "\u2069"]


@pytest.mark.process
def test_reports_never_pass_agent_control_bytes_through(finished_run: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    _, run_dir = finished_run
    result = run_dir / "a001" / "result.json"
    data = json.loads(result.read_text())
    data["error"] = {"stage": "agent", "kind": "agent", "message": HOSTILE_TEXT}
    result.write_text(json.dumps(data))
    outputs = {fmt: run_cli("report", str(run_dir), "--format", fmt, cwd=tmp_path)
               for fmt in ("terminal", "markdown")}
    outputs["compare"] = run_cli("compare", str(run_dir), str(run_dir), cwd=tmp_path)
    outputs["compare-md"] = run_cli("compare", str(run_dir), str(run_dir), "--format",
                                    "markdown", cwd=tmp_path)
    for name, proc in outputs.items():
        assert proc.returncode == 0, (name, proc.stderr)
        text = proc.stdout.replace("\n", "")
        assert not [c for c in CONTROLS if c in text], (name, proc.stdout)
    assert "\\x1b]0;owned\\x07" in outputs["terminal"].stdout  # shown, not dropped
    assert "\\u202edeliaf" in outputs["markdown"].stdout


# --- leftovers of kill -9 (issue 20) ---------------------------------------------------------

def dead_owner_tag() -> str:
    """``<pid>-<start ticks>`` of a process that has exited."""
    child = subprocess.Popen(["sleep", "0"])
    child.wait()
    return f"{child.pid}-1"


@pytest.mark.process
def test_the_next_command_on_a_run_removes_what_kill_9_left(finished_run: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    """Temporary folders of a dead owner (any kind), half-written run.json and result.json
    temporaries, go; a live owner's folder, a link and other names stay."""
    root, run_dir = finished_run
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = [tmp / f"spider2local-tmp-{kind}-{dead_owner_tag()}-x1y2" for kind in
            ("sandbox", "snapshot", "shell", "dbfile")]
    for folder in dead:
        (folder / "root").mkdir(parents=True)
    fields = Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()
    alive = tmp / f"spider2local-tmp-sandbox-{os.getpid()}-{fields[19]}-abcd"
    other = tmp / "spider2local-sandbox-old"
    for folder in (alive, other):
        folder.mkdir()
    link = tmp / f"spider2local-tmp-shell-{dead_owner_tag()}-link"
    link.symlink_to(other)
    partials = [run_dir / ".run.json.k3j2_x.tmp", run_dir / "a001" / ".result.json.ab_9.tmp"]
    for path in partials:
        path.write_text("{half")
    proc = run_cli_env({"TMPDIR": str(tmp)}, "--dataset", str(root), "score", str(run_dir),
                       cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr  # no kept db
    assert [p for p in dead + partials if p.exists()] == []
    assert alive.is_dir() and other.is_dir() and link.is_symlink()


@pytest.mark.process
def test_kill_9_of_shell_leaves_a_folder_the_next_run_command_removes(
        tiny_dataset: Build, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    root = tiny_dataset("a001")
    # A short TMPDIR: the sandbox probe binds a Unix socket in it (108 bytes at most), which
    # a pytest tmp_path is too long for ("AF_UNIX path too long": the shell never started)
    tmp = Path(tempfile.mkdtemp(prefix="s2l-k9-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TMPDIR": str(tmp)}
    shell = subprocess.Popen([sys.executable, "-m", "spider2local", "--dataset", str(root),
                              "shell", "a001", "--command", "sleep 60"], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert shell.stderr is not None
        first = shell.stderr.readline()
        assert first.startswith(b"workspace: "), first + shell.stderr.read(4000)
        shell.kill()
        shell.wait(timeout=30)
    finally:
        shell.kill()
    left = sorted(p.name for p in tmp.iterdir() if p.name.startswith("spider2local-tmp-shell-"))
    assert left and f"-{shell.pid}-" in left[0]
    assert [p for p in tmp.iterdir() if p.name.startswith("spider2local-a001-")]
    code, stderr, _ = noop_run(root, tmp_path, "--keep-db")
    assert code == 0, stderr
    proc = run_cli_env({"TMPDIR": str(tmp)}, "--dataset", str(root), "score",
                       str(tmp_path / "runs" / "r1"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp.iterdir()) == []  # its workspace too


@pytest.mark.process
def test_a_lock_a_killed_merge_left_in_a_source_goes_with_the_next_merge(
        finished_run: tuple[Path, Path], tmp_path: Path) -> None:
    _, run_dir = finished_run
    (run_dir / ".lock").write_text("")  # what kill -9 of a merge leaves: a file nobody holds
    proc = run_cli("merge", str(run_dir), "--into", str(tmp_path / "m"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (run_dir / ".lock").exists()
    assert (tmp_path / "m" / "run.json").is_file()


def run_cli_env(env: Mapping[str, str], *args: str,
                cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spider2local", *args], cwd=cwd,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **env},
                          capture_output=True, text=True, timeout=120, check=False)

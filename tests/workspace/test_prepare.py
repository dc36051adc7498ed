"""Workspaces: a private, writable copy of a task; the dataset untouched, the gold out of reach."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from spider2local.clock.faketime import FAKE_DATE_ENV
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset, TaskSpec
from spider2local.db.snapshot import DbSnapshot
from spider2local.dbtproject.inventory import ProjectScan
from spider2local.exceptions import DatasetError, ScoringError, UserError
from spider2local.resources import faketime_dir
from spider2local.sandbox.dbreads import snapshot_database
from spider2local.suite.model import SAMPLE, Suite
from spider2local.workspace import collect as collect_mod
from spider2local.workspace import environment as environment_mod
from spider2local.workspace import model as model_mod
from spider2local.workspace import prepare as wsmod
from spider2local.workspace.checkpoint import checkpoint_database
from spider2local.workspace.collect import collect_artifacts
from spider2local.workspace.environment import workspace_env
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace


def load(root: Path | str) -> Dataset:
    return load_dataset(Suite(path=Path("tasks.toml"), dataset=root))


def tree_digest(root: Path) -> str:
    """Content, mode and mtime of every file: any write to the dataset changes it."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        h.update(f"{path.relative_to(root)}|{st.st_mode}|{st.st_mtime_ns}".encode())
        if path.is_file():
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def file_hashes(root: Path) -> set[str]:
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


def assert_isolated(task: TaskSpec, ws: model_mod.Workspace) -> None:
    """Gold neither copied (by content) nor named anywhere in the workspace or its env."""
    assert task.gold is not None
    gold_hash = hashlib.sha256(task.gold.db.read_bytes()).hexdigest()
    assert gold_hash not in file_hashes(ws.root)
    secrets = [str(task.gold.db), "evaluation_suite", "spider2_eval"]
    for path in ws.root.rglob("*"):
        if path.is_file() and path.suffix != ".duckdb":
            text = path.read_text(errors="replace")
            assert not any(s in text for s in secrets), path
    assert not any(s in value for s in secrets for value in ws.env.values())


def check_workspace(task: TaskSpec, ws: model_mod.Workspace, artifacts: Path) -> None:
    assert ws.project_dir.is_relative_to(ws.root) and ws.database.is_relative_to(ws.project_dir)
    assert task.start_db is not None
    assert ws.database.read_bytes() == task.start_db.read_bytes()
    assert not ws.database.samefile(task.start_db)
    assert os.access(ws.database, os.W_OK)
    assert ws.env["PATH"].split(os.pathsep)[0] == str(faketime_dir().resolve())
    assert shutil.which("dbt", path=ws.env["PATH"]) == str(faketime_dir().resolve() / "dbt")
    assert ws.env[FAKE_DATE_ENV] == task.date.isoformat()
    assert ws.scan_path is not None and ws.snapshot_path is not None
    scan = ProjectScan.from_json(ws.scan_path.read_text())
    assert scan == ProjectScan.from_json((artifacts / "scan.json").read_text())
    assert scan.models
    snap = DbSnapshot.from_json((artifacts / "reference_snapshot.json").read_text())
    assert snap == DbSnapshot.from_json(ws.snapshot_path.read_text())
    assert snap.tables == snapshot_database(task.start_db).tables
    assert_isolated(task, ws)


@pytest.fixture(scope="module")
def sample() -> Dataset:
    return load(SAMPLE)


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_sample_tasks_get_isolated_copies(sample: Dataset, tmp_path: Path) -> None:
    before = tree_digest(sample.root)
    for task in sample.tasks:
        artifacts = tmp_path / "run" / task.id
        ws = prepare_workspace(task, artifacts=artifacts, parent=tmp_path)
        try:
            assert ws.root.parent == tmp_path.resolve()
            check_workspace(task, ws, artifacts)
            assert ws.problems == ()
        finally:
            cleanup_workspace(ws)
        assert not ws.root.exists()
    assert tree_digest(sample.root) == before


@pytest.mark.in_process_readers  # its subject is not the readers
@pytest.mark.process
def test_real_tasks_get_isolated_copies(shared_dataset: Path, tmp_path: Path) -> None:
    before = tree_digest(shared_dataset)
    dataset = load(shared_dataset)
    assert dataset.tasks
    for task in dataset.tasks:
        ws = prepare_workspace(task, artifacts=tmp_path / task.id, parent=tmp_path)
        try:
            check_workspace(task, ws, tmp_path / task.id)
            con = duckdb.connect(str(ws.database))  # writable although the dataset is r--r--r--
            con.execute("CREATE TABLE spider2local_probe AS SELECT 1 AS x")
            con.close()
        finally:
            cleanup_workspace(ws)
    assert tree_digest(shared_dataset) == before


@pytest.mark.process
def test_copy_skips_build_output_but_keeps_wal_and_packages(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1")
    project = root / "examples" / "t1"
    for folder in ("target", "logs", "dbt_modules", "dbt_packages/pkg/macros"):
        (project / folder).mkdir(parents=True)
    (project / "target" / "manifest.json").write_text("{}")
    (project / "logs" / "dbt.log").write_text("old")
    (project / "dbt_packages" / "pkg" / "dbt_project.yml").write_text("name: pkg\n")
    (project / "shop.duckdb.wal").write_bytes(b"")
    (project / "models" / "link.sql").symlink_to(project / "models" / "schema.yml")
    for path in [*project.rglob("*"), project]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)  # read-only, like the shared dataset
    before = tree_digest(root)
    task = load(root).tasks[0]
    ws = prepare_workspace(task, artifacts=tmp_path / "art", parent=tmp_path)
    names = {p.relative_to(ws.project_dir).as_posix() for p in ws.project_dir.rglob("*")}
    assert {"shop.duckdb.wal", "dbt_packages/pkg/dbt_project.yml", "models/link.sql"} <= names
    assert not names & {"target", "logs", "dbt_modules"}
    assert not (ws.project_dir / "models" / "link.sql").is_symlink()  # a link inside: content
    start = ws.root / environment_mod.START_DIR  # the query tool's start copy: read-only
    assert all(p.stat().st_mode & stat.S_IWUSR for p in ws.root.rglob("*")
               if start not in p.parents and p != start)
    assert {p.name for p in start.iterdir()} == {"shop.duckdb", "shop.duckdb.wal"}
    assert not any(p.stat().st_mode & 0o222 for p in [start, *start.iterdir()])
    assert_isolated(task, ws)
    cleanup_workspace(ws)
    assert tree_digest(root) == before


def test_env_drops_inherited_dbt_paths_and_gold_mentions(sample: Dataset) -> None:
    task = sample.tasks[0]
    assert task.gold is not None
    base = {"PATH": os.environ["PATH"], "DBT_PROFILES_DIR": "/elsewhere", "LANG": "C.UTF-8",
            "LEAK": f"x:{task.gold.db}", "LD_PRELOAD": "/x/libfaketime.so.1", "FAKETIME": "-1d",
            "SSL_CERT_FILE": f"{task.gold.db}"}
    env = workspace_env(task, base, wsmod._forbidden_paths(task))
    assert env["LANG"] == "C.UTF-8"
    assert not {"DBT_PROFILES_DIR", "LEAK", "LD_PRELOAD", "FAKETIME", "SSL_CERT_FILE"} & set(env)


@pytest.mark.process
def test_env_is_an_allow_list_with_home_and_temp_inside_the_workspace(
        sample: Dataset, tmp_path: Path) -> None:
    """Only the variables an agent needs pass: the runner's own settings (which name suites,
    runs and caches), tokens of other services and anything unknown stay behind."""
    base = {"PATH": os.environ["PATH"], "LC_ALL": "C", "HTTPS_PROXY": "http://proxy:3128",
            "TZ": "UTC", "SPIDER2LOCAL_LOG_LEVEL": "debug", "SPIDER2LOCAL_SUITE": "/s.toml",
            "GITHUB_TOKEN": "ghp_x", "AWS_SECRET_ACCESS_KEY": "k", "HOME": "/root",
            "TMPDIR": "/tmp", "PYTHONPATH": "/src", "ANTHROPIC_API_KEY": "sk"}
    env = workspace_env(sample.tasks[0], base, (), tmp_path)
    assert {"LC_ALL", "HTTPS_PROXY", "TZ"} <= set(env)
    assert not {"SPIDER2LOCAL_LOG_LEVEL", "SPIDER2LOCAL_SUITE", "GITHUB_TOKEN",
                "AWS_SECRET_ACCESS_KEY", "PYTHONPATH", "ANTHROPIC_API_KEY"} & set(env)
    assert env["HOME"] == str(tmp_path / environment_mod.HOME_DIR)
    assert env["TMPDIR"] == str(tmp_path / environment_mod.TMP_DIR)
    ws = prepare_workspace(sample.tasks[0], artifacts=tmp_path / "a", parent=tmp_path)
    try:
        assert Path(ws.env["HOME"]).is_dir() and Path(ws.env["TMPDIR"]).is_dir()
        assert Path(ws.env["HOME"]).parent == ws.root
    finally:
        cleanup_workspace(ws)


@pytest.mark.process
def test_skills_are_installed_and_unknown_ones_refused(sample: Dataset, tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    (skills / "dbt-basics" / "ref").mkdir(parents=True)
    (skills / "dbt-basics" / "SKILL.md").write_text("---\nname: dbt-basics\n---\nUse ref().")
    (skills / "dbt-basics" / "ref" / "notes.md").write_text("notes")
    parent = tmp_path / "ws"
    parent.mkdir()
    task = sample.tasks[0]
    ws = prepare_workspace(task, artifacts=tmp_path / "a", parent=parent,
                           skills=["dbt-basics"], skills_root=skills, skills_dir=".agent/skills")
    installed = ws.project_dir / ".agent" / "skills" / "dbt-basics"  # where the agent reads
    assert (installed / "SKILL.md").read_text().endswith("Use ref().")
    assert (installed / "ref" / "notes.md").read_text() == "notes"
    assert ws.skills_dir == ".agent/skills"
    # the skills are the runner's, never collected as the agent's work
    collected = collect_mod.collect_artifacts(ws, keep_db=False)
    assert not (collected.project / ".agent").exists() and collected.files > 0
    cleanup_workspace(ws)
    # an agent that names no skills folder gets none; one that names a way out is refused
    with pytest.raises(UserError, match="reads none"):
        prepare_workspace(task, artifacts=tmp_path / "a", parent=parent,
                          skills=["dbt-basics"], skills_root=skills)
    with pytest.raises(UserError):
        prepare_workspace(task, artifacts=tmp_path / "a", parent=parent,
                          skills=["dbt-basics"], skills_root=skills, skills_dir="../../out")
    assert not (parent.parent / "out").exists()
    for bad in ("nope", "../skills/dbt-basics"):
        with pytest.raises(UserError, match=r"unknown skill .*choose from: dbt-basics"):
            prepare_workspace(task, artifacts=tmp_path / "a", parent=parent, skills=[bad],
                              skills_root=skills, skills_dir=".claude/skills")
    assert list(parent.iterdir()) == []


def test_task_without_start_db_is_refused(tiny_dataset: Callable[..., Path],
                                          tmp_path: Path) -> None:
    task = load(tiny_dataset("t1", with_start_db=False)).tasks[0]
    with pytest.raises(DatasetError, match="no start database"):
        prepare_workspace(task, artifacts=tmp_path / "a", parent=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["spider2-dbt"]


_RECORD_WRITES = """
import os, signal, sys
from pathlib import Path
from spider2local.dataset.load import load_dataset
from spider2local.suite.model import Suite
from spider2local.workspace.prepare import prepare_workspace

root, artifacts, parent, nth = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
task = load_dataset(Suite(path=Path("tasks.toml"), dataset=root)).tasks[0]
seen = 0

def hook(event, args):
    # Each step of a write of the record: opening it (or its temporary file) for writing,
    # renaming into place. An opening of the record itself for writing is a write in place,
    # printed. At the nth step, killed there, as a kill -9 of the runner would.
    global seen
    name = lambda path: os.path.basename(str(path))
    record = lambda path: name(path) == "workspace.json" \\
        or name(path).startswith(".workspace.json.")
    step = (event == "open" and record(args[0]) and isinstance(args[2], int)
            and bool(args[2] & (os.O_WRONLY | os.O_RDWR))) \\
        or (event in ("os.rename", "os.replace") and record(args[1]))
    if not step:
        return
    if event == "open" and name(args[0]) == "workspace.json":
        print("in place:", args[0], flush=True)
    seen += 1
    if seen == nth:
        os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
prepare_workspace(task, artifacts=artifacts, parent=parent)
print("steps:", seen, flush=True)
"""


def _record_writes(dataset: Path, artifacts: Path, parent: Path, kill_at: int
                   ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _RECORD_WRITES, str(dataset), str(artifacts),
                           str(parent), str(kill_at)], capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.process
def test_the_workspace_record_is_only_ever_replaced_whole(tiny_dataset: Callable[..., Path],
                                                          tmp_path: Path) -> None:
    """The workspace's record (``workspace.json``) is how the next command on a killed run
    finds the workspace to remove (run/stale.py). It is written twice: before the folder is
    made, and with the summary once the folder is filled. The summary was written in place:
    a kill -9 after its truncation left an empty record beside a full workspace nobody would
    remove (found under load by the run command's kill -9 test). Both are renamed into place."""
    parent = tmp_path / "ws"
    parent.mkdir()
    done = _record_writes(tiny_dataset("t1"), tmp_path / "a", parent, 0)
    assert done.returncode == 0, done.stderr
    assert "in place" not in done.stdout
    assert "steps: 4" in done.stdout  # two writes, each a temporary file and a rename
    assert json.loads((tmp_path / "a" / "workspace.json").read_text())["files"] > 0


@pytest.mark.process
@pytest.mark.parametrize("kill_at", [1, 2, 3, 4])
def test_a_kill_at_any_step_of_the_record_leaves_no_workspace_nobody_knows(
        tiny_dataset: Callable[..., Path], tmp_path: Path, kill_at: int) -> None:
    from spider2local.run.stale import remove_stale_workspaces

    artifacts, parent = tmp_path / "a", tmp_path / "ws"
    parent.mkdir()
    killed = _record_writes(tiny_dataset("t1"), artifacts, parent, kill_at)
    assert killed.returncode == -9, killed.stderr
    made = list(parent.iterdir())
    assert bool(made) == (kill_at > 2)  # the folder is made after the first record
    assert remove_stale_workspaces(artifacts) == made
    assert list(parent.iterdir()) == []


def _count_snapshot_children(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Record every snapshot reader child started (the real one still runs)."""
    from spider2local.sandbox import dbreads as sandboxed

    started: list[Path] = []
    real = sandboxed.snapshot_sandboxed

    def counted(db: Path) -> dict[str, object]:
        started.append(db)
        return real(db)

    monkeypatch.setattr(sandboxed, "snapshot_sandboxed", counted)
    return started


def _tables(ws: model_mod.Workspace) -> list[str]:
    return [t.name for t in DbSnapshot.from_json(ws.snapshot_path.read_text()).tables]


@pytest.mark.process
def test_the_start_snapshot_is_read_once_per_start_database_until_it_changes(
        tiny_dataset: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = _count_snapshot_children(monkeypatch)
    task = load(tiny_dataset("t1")).tasks[0]
    assert task.start_db is not None

    def prepare(n: int) -> model_mod.Workspace:
        return prepare_workspace(task, artifacts=tmp_path / f"a{n}", parent=tmp_path)

    first, second = prepare(1), prepare(2)
    assert len(started) == 1 and started[0].is_relative_to(first.root)  # the copy, not the dataset
    assert _tables(first) == _tables(second) == ["raw_orders"]
    assert (second.project_dir / ".spider2local" / "snapshot.json").read_text() == \
        first.snapshot_path.read_text()
    # rewritten with its modification time put back: the change time still tells
    mtime = task.start_db.stat().st_mtime_ns
    with duckdb.connect(str(task.start_db)) as con:
        con.execute("CREATE TABLE raw_customers AS SELECT 1 AS id")
    os.utime(task.start_db, ns=(mtime, mtime))
    third = prepare(3)
    assert len(started) == 2 and _tables(third) == ["raw_customers", "raw_orders"]
    prepare(4)
    assert len(started) == 2


@pytest.mark.process
def test_a_start_database_that_changes_while_copied_is_read_from_its_copy(
        tiny_dataset: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = _count_snapshot_children(monkeypatch)
    task = load(tiny_dataset("t1")).tasks[0]
    assert task.start_db is not None
    prepare_workspace(task, artifacts=tmp_path / "a1", parent=tmp_path)  # cached now
    real_copy = wsmod.copy_tree
    start_db = task.start_db

    def copy_then_change(src: Path, dst: Path, **kw: object) -> object:
        done = real_copy(src, dst, **kw)  # type: ignore[arg-type]
        with duckdb.connect(str(start_db)) as con:  # the copy has the old bytes
            con.execute("CREATE TABLE late AS SELECT 1 AS id")
        return done

    monkeypatch.setattr(wsmod, "copy_tree", copy_then_change)
    ws = prepare_workspace(task, artifacts=tmp_path / "a2", parent=tmp_path)
    assert len(started) == 2 and _tables(ws) == ["raw_orders"]  # what the copy holds


@pytest.mark.process
def test_missing_packages_are_recorded(tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", packages_yml="packages:\n  - package: dbt-labs/dbt_utils\n")
    task = load(root).tasks[0]
    ws = prepare_workspace(task, artifacts=tmp_path / "a", parent=tmp_path)
    assert any("dbt_utils" in p for p in ws.problems)
    assert json.loads((tmp_path / "a" / "workspace.json").read_text())["problems"] == list(
        ws.problems)
    cleanup_workspace(ws)


@pytest.mark.process
def test_packages_installed_in_dbt_modules_are_copied_and_found(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", packages_yml="packages:\n  - package: acme/util\n")
    project = root / "examples" / "t1"
    cfg = project / "dbt_project.yml"
    cfg.write_text(cfg.read_text() + 'packages-install-path: "./dbt_modules"\n')
    (project / "dbt_modules" / "util").mkdir(parents=True)
    (project / "dbt_modules" / "util" / "dbt_project.yml").write_text("name: util\n")
    ws = prepare_workspace(load(root).tasks[0], artifacts=tmp_path / "a", parent=tmp_path)
    assert (ws.project_dir / "dbt_modules" / "util" / "dbt_project.yml").is_file()
    assert ws.problems == ()
    cleanup_workspace(ws)


@pytest.mark.process
def test_collect_artifacts_copies_text_and_database(sample: Dataset, tmp_path: Path) -> None:
    task = sample.tasks[0]
    ws = prepare_workspace(task, artifacts=tmp_path / "a", parent=tmp_path)
    (ws.project_dir / "models" / "new_model.sql").write_text("select 42 as answer")
    (ws.project_dir / "target").mkdir()
    (ws.project_dir / "target" / "compiled.sql").write_text("select 1")
    con = duckdb.connect(str(ws.database))
    con.execute("CREATE TABLE answer AS SELECT 42 AS x")
    con.close()
    got = collect_artifacts(ws, keep_db=True)
    files = {p.relative_to(got.project).as_posix() for p in got.project.rglob("*") if p.is_file()}
    assert "models/new_model.sql" in files and got.files == len(files)
    assert not any(f.split("/")[0] in {"target", ".spider2local", "dbt_packages"} for f in files)
    assert got.database == tmp_path / "a" / "result.duckdb"
    con = duckdb.connect(str(got.database), read_only=True)
    assert con.execute("SELECT x FROM answer").fetchall() == [(42,)]
    con.close()
    again = collect_artifacts(ws, keep_db=False)
    assert again.database is None and again.files == got.files
    cleanup_workspace(ws)


@pytest.mark.process
def test_collect_artifacts_keeps_the_projects_dbt_log_without_clobbering(
        sample: Dataset, tmp_path: Path) -> None:
    """An agent that ran dbt itself leaves logs/ and target/ in the project: keep the log and
    run_results; a file a non-LLM agent already wrote to artifacts/dbt stays as it was."""
    ws = prepare_workspace(sample.tasks[0], artifacts=tmp_path / "a", parent=tmp_path)
    for rel, text in (("logs/dbt.log", "project log"), ("target/run_results.json", "{}"),
                      ("target/manifest.json", "{}")):
        (ws.project_dir / rel).parent.mkdir(exist_ok=True)
        (ws.project_dir / rel).write_text(text)
    collect_artifacts(ws, keep_db=False)
    dbt_dir = tmp_path / "a" / "dbt"
    assert sorted(p.name for p in dbt_dir.iterdir()) == ["dbt.log", "dbt.txt",
                                                         "run_results.json"]
    assert (dbt_dir / "dbt.log").read_text() == "project log"
    assert (dbt_dir / "dbt.txt").read_text() == "project log\n"  # not JSON: kept as it is
    (dbt_dir / "dbt.log").write_text("agent's own log")
    (dbt_dir / "run_results.json").unlink()
    (ws.project_dir / "target" / "run_results.json").write_text('{"second": 1}')
    collect_artifacts(ws, keep_db=False)
    assert (dbt_dir / "dbt.log").read_text() == "agent's own log"
    assert (dbt_dir / "run_results.json").read_text() == '{"second": 1}'
    cleanup_workspace(ws)


@pytest.mark.process
def test_cleanup_removes_read_only_content_and_refuses_foreign_folders(
        sample: Dataset, tmp_path: Path) -> None:
    ws = prepare_workspace(sample.tasks[0], artifacts=tmp_path / "a", parent=tmp_path)
    (ws.project_dir / "models").chmod(0o500)
    cleanup_workspace(ws)
    assert not ws.root.exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    with pytest.raises(ValueError, match="refusing"):
        cleanup_workspace(model_mod.Workspace(root=foreign, project_dir=foreign, database=foreign,
                                          env={}, artifacts=foreign))
    assert foreign.exists()


@pytest.mark.process
def test_checkpoint_folds_the_wal(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    con = duckdb.connect(str(db))
    con.execute("PRAGMA disable_checkpoint_on_shutdown")
    con.execute("CREATE TABLE t AS SELECT range AS i FROM range(1000)")
    con.close()
    wal = tmp_path / "x.duckdb.wal"
    assert wal.exists()
    checkpoint_database(db, root=tmp_path)
    assert not wal.exists() or wal.stat().st_size == 0
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(1000,)]
    con.close()


@pytest.mark.process
def test_checkpoint_waits_for_a_brief_lock(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    duckdb.connect(str(db)).close()
    code = ("import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('ready', flush=True);"
            " time.sleep(0.5); c.close()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    checkpoint_database(db, root=tmp_path)  # succeeds once the holder lets go
    proc.wait(timeout=30)


@pytest.mark.process
def test_checkpoint_errors(tmp_path: Path) -> None:
    with pytest.raises(ScoringError, match="missing"):
        checkpoint_database(tmp_path / "gone.duckdb", root=tmp_path)
    assert not (tmp_path / "gone.duckdb").exists()
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"garbage" * 1000)
    with pytest.raises(ScoringError, match="cannot checkpoint"):
        checkpoint_database(bad, root=tmp_path)


@pytest.mark.process
def test_collect_artifacts_copies_only_plain_files_of_the_workspace(
        sample: Dataset, tmp_path: Path) -> None:
    """What the agent leaves is copied by the runner, outside the sandbox: a symlink to a
    runner-side file (its own environ, a secret), to ``/`` or to gold, a FIFO and a sparse file
    the size of a disk must never reach the run folder (nor hang or fill it)."""
    task = sample.tasks[0]
    secret = tmp_path / "secret.txt"
    secret.write_text("RUNNER-SECRET")
    (tmp_path / "w").mkdir()
    ws = prepare_workspace(task, artifacts=tmp_path / "a", parent=tmp_path / "w")
    models = ws.project_dir / "models"
    (models / "kept.sql").write_text("select 1")
    (models / "stolen.sql").symlink_to(secret)
    (models / "environ.sql").symlink_to("/proc/self/environ")
    (models / "everything").symlink_to("/")
    os.mkfifo(models / "pipe.sql")
    with (models / "huge.sql").open("wb") as fh:
        fh.truncate(64 << 20)  # sparse: nothing on disk until copied (on main: copied densely)
    (ws.project_dir / "logs").mkdir()
    (ws.project_dir / "logs" / "dbt.log").symlink_to(secret)
    gold = tmp_path / "gold.duckdb"
    shutil.copyfile(ws.database, gold)
    gold_bytes = gold.read_bytes()
    ws.database.unlink()
    ws.database.symlink_to(gold)
    got = collect_artifacts(ws, keep_db=True)
    copied = [p for p in (tmp_path / "a").rglob("*") if p.is_file()]
    names = {p.name for p in copied}
    assert "kept.sql" in names
    assert not names & {"stolen.sql", "environ.sql", "pipe.sql", "huge.sql", "dbt.log"}, names
    assert not any("RUNNER-SECRET" in p.read_text(errors="replace") for p in copied)
    assert got.database is None and gold.read_bytes() == gold_bytes
    assert not Path(f"{gold}.wal").exists()
    cleanup_workspace(ws)


def test_checkpoint_never_opens_a_file_outside_the_workspace(tmp_path: Path) -> None:
    """The checkpoint opens read-write: through a symlink left by the agent that would be
    gold (the dataset must never be opened writable)."""
    gold = tmp_path / "gold.duckdb"
    con = duckdb.connect(str(gold))
    con.execute("PRAGMA disable_checkpoint_on_shutdown")
    con.execute("CREATE TABLE t AS SELECT 1 AS i")
    con.close()
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "db.duckdb").symlink_to(gold)
    with pytest.raises(ScoringError, match="symlink"):
        checkpoint_database(ws / "db.duckdb", root=ws)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


@pytest.mark.process
def test_templates_are_written_only_when_asked_and_stay_stubs(shared_dataset: Path,
                                                              tmp_path: Path) -> None:
    task = next(t for t in load(shared_dataset).tasks if t.id == "playbook001")
    plain = prepare_workspace(task, artifacts=tmp_path / "a1", parent=tmp_path)
    with_templates = prepare_workspace(task, artifacts=tmp_path / "a2", parent=tmp_path,
                                       templates=True)
    try:
        assert not (plain.project_dir / "models" / "cpa_and_roas.sql").exists()
        written = with_templates.project_dir / "models" / "cpa_and_roas.sql"
        text = written.read_text()
        assert "cost_per_acquisition" in text and "TODO" in text
        assert "{{ source('playbook', 'ad_spend') }}" in text
        assert plain.scan_path is not None and with_templates.scan_path is not None
        for ws in (plain, with_templates):
            scan = ProjectScan.from_json(ws.scan_path.read_text())  # type: ignore[union-attr]
            assert [(m.name, m.status) for m in scan.todo] == [
                ("cpa_and_roas", "missing" if ws is plain else "stub")]
        record = json.loads((tmp_path / "a2" / "workspace.json").read_text())
        assert record["templates"] == ["models/cpa_and_roas.sql"]
    finally:
        cleanup_workspace(plain)
        cleanup_workspace(with_templates)


@pytest.mark.slow
def test_each_agent_dbt_call_leaves_its_own_numbered_run_results(
        sample: Dataset, tmp_path: Path) -> None:
    """The issue's case: a ``dbt show`` after the ``dbt run`` replaced the run's results, so
    the run folder kept only the show. Real dbt through the shim, as the agent runs it."""
    ws = prepare_workspace(sample.tasks[0], artifacts=tmp_path / "a", parent=tmp_path)
    for args in (["run"], ["show", "--inline", "select 1 as x"]):
        done = subprocess.run(["dbt", *args], cwd=ws.project_dir, env=dict(ws.env),
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collect_artifacts(ws, keep_db=False)
    dbt_dir = tmp_path / "a" / "dbt"
    kept = sorted(p.name for p in dbt_dir.glob("*.json"))
    assert kept == ["001-run.run_results.json", "002-show.run_results.json"]
    run = json.loads((dbt_dir / kept[0]).read_text())
    models = {r["unique_id"] for r in run["results"]}
    assert models and all(m.startswith("model.") for m in models)
    assert all(r["status"] == "success" for r in run["results"])
    show = json.loads((dbt_dir / kept[1]).read_text())
    assert "show" in show["args"]["invocation_command"]
    cleanup_workspace(ws)


@pytest.mark.process
def test_dbt_records_are_collected_only_as_plain_files(sample: Dataset, tmp_path: Path) -> None:
    ws = prepare_workspace(sample.tasks[0], artifacts=tmp_path / "a", parent=tmp_path)
    outside = tmp_path / "secret.json"
    outside.write_text('{"gold": 1}')
    runs = ws.project_dir / ".spider2local" / "dbt-runs"
    runs.mkdir()
    (runs / "001-run.json").write_text('{"results": []}')
    (runs / "002-run.json").symlink_to(outside)
    (runs / "003-x.txt").write_text("not a record")
    (ws.project_dir / "target").mkdir()
    (ws.project_dir / "target" / "run_results.json").write_text('{"last": 1}')
    collect_artifacts(ws, keep_db=False)
    dbt_dir = tmp_path / "a" / "dbt"
    assert sorted(p.name for p in dbt_dir.iterdir()) == ["001-run.run_results.json"]
    shutil.rmtree(dbt_dir)
    shutil.rmtree(runs)
    runs.symlink_to(tmp_path)  # a linked records folder is not even listed
    (tmp_path / "004-run.json").write_text("{}")
    collect_artifacts(ws, keep_db=False)
    assert sorted(p.name for p in dbt_dir.iterdir()) == ["run_results.json"]
    cleanup_workspace(ws)


@pytest.mark.process
def test_dbt_records_over_the_cap_keep_the_first_calls(sample: Dataset, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the cap the earliest calls are kept, in call order: as text, "1000-run" sorted
    before "999-show" and took its place."""
    from spider2local.workspace import collect as prepare

    monkeypatch.setattr(prepare, "MAX_DBT_RECORDS", 2)
    ws = prepare_workspace(sample.tasks[0], artifacts=tmp_path / "a", parent=tmp_path)
    runs = ws.project_dir / ".spider2local" / "dbt-runs"
    runs.mkdir()
    for name in ("999-run.json", "1000-show.json", "1001-run.json"):
        (runs / name).write_text('{"results": []}')
    collect_artifacts(ws, keep_db=False)
    assert sorted(p.name for p in (tmp_path / "a" / "dbt").iterdir()) == [
        "1000-show.run_results.json", "999-run.run_results.json"]
    cleanup_workspace(ws)


def _dbt_event(msg: str, level: str = "info") -> str:
    return json.dumps({"info": {"level": level, "msg": msg, "invocation_id": "i",
                                "ts": "2024-01-15T12:00:00.000001Z"}}) + "\n"


def test_the_dbt_log_is_kept_as_plain_text_too(tmp_path: Path) -> None:
    logs = tmp_path / "dbt"
    logs.mkdir()
    (logs / "dbt.log").write_text(_dbt_event("\x1b[31mFailure in model m\x1b[0m", "error")
                                  + _dbt_event("Parser Error: syntax error", "debug"))
    assert collect_mod.write_dbt_text(logs)
    text = (logs / "dbt.txt").read_text()
    assert "\x1b" not in text and '"info"' not in text
    assert "[error] Failure in model m" in text and "[debug] Parser Error" in text


def test_the_dbt_text_never_follows_a_link_nor_reads_one(tmp_path: Path) -> None:
    logs, outside = tmp_path / "dbt", tmp_path / "outside.txt"
    logs.mkdir()
    outside.write_text("host file\n")
    (logs / "dbt.log").symlink_to(outside)  # a log that is a link: not read
    assert not collect_mod.write_dbt_text(logs) and not (logs / "dbt.txt").exists()
    (logs / "dbt.log").unlink()
    (logs / "dbt.log").write_text(_dbt_event("ok"))
    (logs / "dbt.txt").symlink_to(outside)  # a planted dbt.txt: replaced, never written through
    assert collect_mod.write_dbt_text(logs)
    assert outside.read_text() == "host file\n"
    assert not (logs / "dbt.txt").is_symlink() and "ok" in (logs / "dbt.txt").read_text()


def test_a_huge_dbt_log_makes_a_bounded_text(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect_mod, "ARTIFACT_MAX_BYTES", 10_000)
    logs = tmp_path / "dbt"
    logs.mkdir()
    with (logs / "dbt.log").open("w") as fh:
        fh.write(_dbt_event("x" * 3_000) * 20)
        fh.write("y" * 50_000 + "\n")  # one long line that is no event
    assert collect_mod.write_dbt_text(logs)
    text = (logs / "dbt.txt").read_text()
    assert len(text) < 10_200 and text.endswith("[the rest of dbt.log is not kept here]\n")


@pytest.mark.process
def test_a_user_site_install_is_found_by_the_agent_despite_its_moved_home(
        sample: Dataset, tmp_path: Path) -> None:
    """A ``pip install --user`` keeps dbt in ~/.local, found through HOME, which the agent's
    env moves into its workspace ("No module named 'dbt'", measured as a user): a Python
    that reads the user site (run here as one, without venv) gets PYTHONUSERBASE naming
    it, and the sandbox binds it though the home around it stays hidden; a venv's gets
    neither."""
    probe = ("import json; "
             "from spider2local.sandbox import spec; "
             "print(json.dumps([str(spec.user_site()), spec.runtime_env(), "
             "[str(p) for p in spec.runtime_paths()]]))")
    user_base = tmp_path / "userbase"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    user_site = user_base / "lib" / version / "site-packages"
    user_site.mkdir(parents=True)
    repo = str(Path(wsmod.__file__).resolve().parents[2])
    venv_site = os.pathsep.join([repo, *site.getsitepackages()])  # the deps, not as a venv
    base_python = Path(sys.base_prefix) / "bin" / version
    done = subprocess.run([str(base_python), "-c", probe], capture_output=True,
                          text=True, check=True, timeout=60,
                          env={**os.environ, "PYTHONUSERBASE": str(user_base),
                               "PYTHONPATH": venv_site,  # real dbt found on PATH:
                               "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    site_found, env, paths = json.loads(done.stdout)
    assert site_found == str(user_site)
    assert env == {"PYTHONUSERBASE": str(user_base)}
    assert str(user_site) in paths
    assert environment_mod.runtime_env() == {}  # this venv's interpreter reads no user site
    assert "PYTHONUSERBASE" not in workspace_env(sample.tasks[0], dict(os.environ), (), tmp_path)

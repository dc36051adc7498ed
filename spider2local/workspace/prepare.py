"""One attempt's private copy of a task: the only place the agent and dbt ever write.

dbt writes into the task database, so every attempt works on a fresh copy of the project in a
temporary folder and the dataset is never touched. Only what dbt needs is copied (build output,
logs and caches are skipped; a DuckDB ``.wal`` is kept because it holds committed data). The gold
database and the evaluation config live outside the project and never reach the copy or its
environment. Preparation also leaves the agent a head start: a scan of the project (which
declared models are missing) and a snapshot of the start database, both also kept in the
task's artifacts folder.

Everything here is synchronous file work; the runner calls it in a worker thread.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import os
import secrets
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from spider2local.clock.faketime import FAKE_DATE_ENV, RUNS_ENV
from spider2local.core import upstream
from spider2local.core.layout import (
    DBT_RUNS,
    SCAN,
    START_PROJECT,
    START_SNAPSHOT,
    WORKSPACE_PREFIX,
    WORKSPACE_RECORD,
)
from spider2local.core.results import write_json_atomic
from spider2local.dataset.task import TaskSpec
from spider2local.db.snapshot import file_identity
from spider2local.dbtproject import packages
from spider2local.dbtproject.files import PROFILE_FIX, confine_profile
from spider2local.dbtproject.inventory import ProjectScan, scan_project
from spider2local.dbtproject.paths import project_paths
from spider2local.dbtproject.templates import templates as model_templates
from spider2local.exceptions import DatasetError, UserError
from spider2local.resources import faketime_dir
from spider2local.safepath import child
from spider2local.sandbox.dbreads import snapshot_database
from spider2local.workspace.activate import CONTEXT_DIR, mark_kept, write_activation, write_marker
from spider2local.workspace.blame import Room
from spider2local.workspace.collect import copy_text_files
from spider2local.workspace.copy import copy_tree, fast_copy, remove_tree
from spider2local.workspace.environment import HOME_DIR, START_DIR, TMP_DIR, workspace_env
from spider2local.workspace.model import Workspace
from spider2local.workspace.skills import install_skills, skill_sources
from spider2local.workspace.tree import disk_usage

SKIP_TOP = frozenset({"target", "logs", "dbt_modules", ".git", ".user.yml", "__pycache__"})
"""Build output, logs and caches dbt recreates; ``dbt_modules`` is dbt < 1.0's package folder."""


def prepare_workspace(task: TaskSpec, *, artifacts: Path, parent: Path | None = None,
                      skills: Sequence[str] = (), skills_root: Path | None = None,
                      skills_dir: str | None = None, templates: bool = False) -> Workspace:
    """Copy ``task`` into a fresh folder under ``parent`` (default: the system temp folder).

    ``skills`` are folder names in ``skills_root`` (default: the installed ``skills/``),
    installed under ``skills_dir`` in the project: where the agent that reads them looks (its
    ``Capabilities.skills_dir``); skills for an agent that names no such folder are refused.
    ``templates``: write a starting file for each declared model without SQL
    (:mod:`spider2local.dbtproject.templates`), before the scan, which still calls them stubs.

    Raises :class:`UserError` for an unknown skill and :class:`DatasetError` when the task has
    no start database inside its project; a half-made folder is removed on any failure.
    """
    skill_dirs = skill_sources(skills, skills_root)
    if skill_dirs and skills_dir is None:
        raise UserError("skills were asked for an agent that reads none",
                        fix="leave out --skill, or run an agent whose capabilities name a "
                            "skills folder")
    start_db = _start_db(task)
    artifacts.mkdir(parents=True, exist_ok=True)
    root = _make_recorded(task, artifacts, parent)
    try:
        return _fill(task, root, start_db, artifacts.resolve(), skill_dirs, skills_dir,
                     templates)
    except BaseException:
        with contextlib.suppress(OSError):
            remove_tree(root)
        raise


def _make_recorded(task: TaskSpec, artifacts: Path, parent: Path | None) -> Path:
    """Create the workspace folder, after recording where it will be (``workspace.json``).

    Record first, then create: a ``kill -9`` between the two leaves a record of a folder that
    does not exist (harmless), never a folder nobody knows about, which the next command on
    the run could not find to remove (:mod:`spider2local.run.stale`). Hence a chosen name and
    ``mkdir`` rather than ``mkdtemp``, whose name is only known once the folder exists.
    """
    base = Path(parent if parent is not None else tempfile.gettempdir()).resolve()
    for _ in range(100):
        root = base / f"{WORKSPACE_PREFIX}{task.id}-{secrets.token_hex(6)}"
        write_json_atomic(artifacts / WORKSPACE_RECORD, {"task": task.id, "root": str(root)})
        try:
            root.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return root
    raise FileExistsError(errno.EEXIST, "no free workspace name", str(base))


def _fill(task: TaskSpec, root: Path, start_db: Path, artifacts: Path,
          skill_dirs: Mapping[str, Path], skills_dir: str | None,
          templates: bool = False) -> Workspace:
    started = time.monotonic()
    project = child(root, task.id)
    forbidden = _forbidden_paths(task)
    source = task.project_dir / start_db
    before = file_identity(source)
    stats = copy_tree(task.project_dir, project, skip=_skipper(task), forbidden=forbidden)
    # the copy is that file's bytes only if the file did not change while it was copied
    identity = before if before is not None and file_identity(source) == before else None
    try:  # an absolute profile path would send dbt into the dataset's own database
        confine_profile(project, task.project_dir)
    except ValueError as exc:
        raise DatasetError(str(exc), fix=PROFILE_FIX) from None
    copy_text_files(project, artifacts / START_PROJECT, root=root)  # what the report diffs
    if skills_dir is not None:
        install_skills(project, skills_dir, skill_dirs)
    scan = scan_project(project)
    written = write_templates(scan, project) if templates else ()
    if written:
        scan = scan_project(project)
    snapshot = snapshot_database(project / start_db, source=identity)
    context = project / CONTEXT_DIR
    context.mkdir(exist_ok=True)
    for name, text in (("scan.json", scan.to_json()), ("snapshot.json", snapshot.to_json())):
        (context / name).write_text(text, encoding="utf-8")
    # The runner reads its own copies (the agent can replace the project's with a symlink)
    scan_path, snapshot_path = artifacts / SCAN, artifacts / START_SNAPSHOT
    scan_path.write_text(scan.to_json(), encoding="utf-8")
    snapshot_path.write_text(snapshot.to_json(), encoding="utf-8")
    problems = (*packages.missing_packages(project), *scan.problems)
    for private in (HOME_DIR, TMP_DIR):
        (root / private).mkdir()
    start_copy = copy_start_database(project / start_db, root / START_DIR)
    env = {**workspace_env(task, os.environ, forbidden, root),
           RUNS_ENV: str(context / DBT_RUNS)}
    # A person walking into the workspace later gets the same dbt (spider2local.workspace.activate)
    write_marker(root, task_id=task.id, date=task.date, project=project.name)
    write_activation(context, env, task_id=task.id, date=task.date,
                     shim_dir=faketime_dir().resolve())
    _write_summary(artifacts / WORKSPACE_RECORD, task, root, stats, skill_dirs, problems,
                   time.monotonic() - started, written)
    return Workspace(root=root, project_dir=project, database=project / start_db, env=env,
                     artifacts=artifacts, scan_path=scan_path, snapshot_path=snapshot_path,
                     problems=problems, start_copy=start_copy, room=measure_room(root),
                     skills_dir=skills_dir if skill_dirs else None)


def measure_room(root: Path) -> Room | None:
    """How much was free on ``root``'s file system, and how much ``root`` held, now: taken last
    in :func:`prepare_workspace`, so the runner's own copying is in the baseline and only what
    the agent's session adds counts as its growth. Free space is what the runner's user can
    write (root may also fill the blocks reserved for it; the agent runs as the runner's user,
    or as its namespace's root mapped to it). ``None`` when ``statvfs`` fails."""
    try:
        info = os.statvfs(root)
    except OSError:
        return None
    blocks = info.f_bfree if os.geteuid() == 0 else info.f_bavail
    return Room(free=blocks * info.f_frsize, used=disk_usage(root))


def write_templates(scan: ProjectScan, project: Path) -> tuple[str, ...]:
    """Write the ``--templates`` starting files (never over an existing file); returns their
    paths relative to the project."""
    written = []
    for path, text in model_templates(scan, project).items():
        if path.exists():
            continue
        path.write_text(text, encoding="utf-8")
        written.append(path.relative_to(project).as_posix())
    return tuple(sorted(written))


def copy_start_database(database: Path, folder: Path) -> Path:
    """Copy the untouched start database (and its WAL, which holds committed data) into
    ``folder`` and make both read-only; returns the copy.

    Why a copy and not the dataset's file: the query child opens it while dbt and other tasks
    run, and the dataset is never opened by anything the agent drives. Why under the workspace
    root: it goes with the workspace (every cleanup path already covers the root), and the
    sandbox hides ``folder`` behind a locked tmpfs, so the agent can neither read the path
    directly nor put another file in its place; the query service also checks it is the file
    it was (:class:`spider2local.dbtools.query.QueryService`).
    """
    folder.mkdir()
    copy = folder / database.name
    for source, target in ((database, copy),
                           (database.with_name(database.name + ".wal"),
                            copy.with_name(copy.name + ".wal"))):
        if source.is_file():
            fast_copy(source, target)
            target.chmod(0o444)
    folder.chmod(0o555)
    return copy


def keep_workspace(ws: Workspace) -> Path:
    """Mark ``ws`` kept, its marker and activation script written again as spider2local's own
    (:func:`spider2local.workspace.activate.mark_kept`); returns the script's path. Called
    once the workspace's processes are gone, instead of :func:`cleanup_workspace`."""
    date = dt.date.fromisoformat(ws.env[FAKE_DATE_ENV])
    return mark_kept(ws.root, ws.project_dir, ws.env, task_id=ws.project_dir.name, date=date,
                     shim_dir=faketime_dir().resolve())


def cleanup_workspace(ws: Workspace) -> None:
    """Remove the workspace folder (only ever one this module made)."""
    if not ws.root.name.startswith(WORKSPACE_PREFIX):
        raise ValueError(f"refusing to delete {ws.root}: not a spider2local workspace")
    remove_tree(ws.root)


def _start_db(task: TaskSpec) -> Path:
    """The start database relative to the project (dbt must find it where profiles.yml says)."""
    if task.start_db is None:
        raise DatasetError(f"task {task.id} has no start database", path=task.project_dir,
                           fix="restore the task's *.duckdb from upstream's DBT_start_db.zip")
    try:
        return task.start_db.resolve().relative_to(task.project_dir.resolve())
    except ValueError:
        raise DatasetError(f"task {task.id}: start database {task.start_db} is outside the "
                           "project", path=task.project_dir / "profiles.yml",
                           fix="use a relative path such as ./<name>.duckdb") from None


def _forbidden_paths(task: TaskSpec) -> tuple[Path, ...]:
    """The gold database and the dataset's evaluation folder: never copied, never named."""
    paths = [upstream.gold_folder(task.project_dir.resolve().parent.parent)]
    if task.gold is not None:
        paths.append(task.gold.db.resolve())
    return tuple(paths)


def _skipper(task: TaskSpec) -> set[str]:
    """Top-level names to skip; keeps ``dbt_modules`` if the project installs packages there."""
    paths = project_paths(task.project_dir)
    install = paths.packages_dir.relative_to(paths.root).parts[:1]
    return {n for n in SKIP_TOP if n not in install}


def _write_summary(path: Path, task: TaskSpec, root: Path, stats: tuple[int, int],
                   skill_dirs: Mapping[str, Path], problems: Sequence[str],
                   seconds: float, templates: Sequence[str] = ()) -> None:
    summary = {"task": task.id, "root": str(root), "files": stats[0], "bytes": stats[1],
               "skills": sorted(skill_dirs), "problems": list(problems),
               "templates": list(templates),
               "date": task.date.isoformat(), "seconds": round(seconds, 3)}
    # replaced whole, like the record written before the folder was made: written in place, a
    # kill -9 after its truncation left an empty record beside a full workspace, which the next
    # command on the run could no longer find to remove (:mod:`spider2local.run.stale`)
    write_json_atomic(path, summary)

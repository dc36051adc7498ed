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
import functools
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spider2local.clock.dbt import log_as_text
from spider2local.clock.faketime import FAKE_DATE_ENV, RUNS_ENV, Clock, find_library
from spider2local.core import upstream
from spider2local.core.layout import (
    DBT_LOG,
    DBT_LOGS,
    DBT_RUNS,
    DBT_TEXT,
    PROJECT_FILES,
    RESULT_DB,
    RUN_RESULTS_SUFFIX,
    SCAN,
    START_PROJECT,
    START_SNAPSHOT,
    WORKSPACE_PREFIX,
    WORKSPACE_RECORD,
)
from spider2local.core.results import write_json_atomic
from spider2local.dataset.task import TaskSpec
from spider2local.db.locks import DatabaseLocked, LockWait
from spider2local.db.snapshot import file_identity
from spider2local.dbtproject import packages
from spider2local.dbtproject.files import PROFILE_FIX, confine_profile
from spider2local.dbtproject.inventory import ProjectScan, scan_project
from spider2local.dbtproject.paths import project_paths
from spider2local.dbtproject.templates import templates as model_templates
from spider2local.exceptions import DatasetError, ScoringError, UserError
from spider2local.resources import faketime_dir, skills_dir
from spider2local.safepath import child
from spider2local.sandbox.dbreads import checkpoint_sandboxed, snapshot_database
from spider2local.sandbox.reply import ReaderDuckDBError
from spider2local.sandbox.spec import runtime_env
from spider2local.workspace.activate import CONTEXT_DIR, mark_kept, write_activation, write_marker
from spider2local.workspace.blame import Room
from spider2local.workspace.copy import copy_tree, fast_copy, remove_tree
from spider2local.workspace.guard import (
    LockedOut,
    OutsideWorkspace,
    database_files,
    is_workspace_file,
    workspace_file,
)
from spider2local.workspace.tree import Check, copy_regular, disk_usage, walk_files

SKIP_TOP = frozenset({"target", "logs", "dbt_modules", ".git", ".user.yml", "__pycache__"})
"""Build output, logs and caches dbt recreates; ``dbt_modules`` is dbt < 1.0's package folder."""
ARTIFACT_SUFFIXES = frozenset({".sql", ".yml", ".yaml", ".md", ".py", ".csv"})
ARTIFACT_SKIP = frozenset({"target", "logs", "dbt_packages", "dbt_modules", CONTEXT_DIR,
                           ".claude", ".git", "__pycache__"})
PROJECT_DBT_FILES = (("logs/dbt.log", DBT_LOG), ("target/run_results.json", "run_results.json"))
"""What an agent's own ``dbt`` calls leave in the project (kept small: no manifest)."""
DBT_RECORD = re.compile(r"^[0-9]{3,}-[A-Za-z0-9_-]+\.json$")
"""A run_results record the dbt shim kept (``NNN-<command>.json``, see faketime/README.md)."""
MAX_DBT_RECORDS = 1000
"""Records collected per task at most: far above any real session, a bound on a loop's spam."""
_SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
CHECKPOINT_LOCK_WAIT = LockWait(seconds=3.0, max_delay=0.5)
"""How long a just-killed dbt may keep its lock before the checkpoint gives up."""


@dataclass(frozen=True)
class Workspace:
    """A fresh copy of one task, as the agent sees it. Gold and eval config are never in it."""

    root: Path
    """The temporary folder holding everything of this attempt."""
    project_dir: Path
    """The dbt project copy: the agent's working directory."""
    database: Path
    """The task database inside the project (what dbt writes and what gets scored)."""
    env: Mapping[str, str]
    """Environment for every process the agent starts: dbt shim first on PATH, clock settings,
    telemetry off. Never preloaded with libfaketime itself."""
    artifacts: Path
    """This task's folder in the run folder (transcript, queries, dbt logs)."""
    scan_path: Path | None = None
    """JSON project scan (models declared in YML: complete / stub / missing). The runner's own
    copy in ``artifacts``: the agent's copy in the project is the agent's to replace."""
    snapshot_path: Path | None = None
    """JSON snapshot of the start database (tables, row counts, columns and types); also the
    runner's copy in ``artifacts``."""
    problems: tuple[str, ...] = ()
    """Found while preparing (packages not vendored, unparsable YML); the work may still run."""
    start_copy: Path | None = None
    """A read-only copy of the start database, made before the agent runs, under
    :data:`START_DIR` (hidden from a sandboxed agent): the query tool attaches it as ``start``
    so the agent can compare what it built with what the project shipped, even after its first
    ``dbt run`` overwrote the model tables in :attr:`database`."""
    room: Room | None = None
    """The free space of the workspace's file system and the workspace's own size once made
    (:func:`measure_room`): what tells a disk the agent filled from one the machine ran out of
    (:mod:`spider2local.workspace.blame`). ``None`` when the file system could not be measured."""


@dataclass(frozen=True)
class CollectedArtifacts:
    project: Path
    """``artifacts/project``: the final SQL, YML and docs of the project."""
    files: int
    database: Path | None
    """``artifacts/result.duckdb`` when the database was kept."""


def prepare_workspace(task: TaskSpec, *, artifacts: Path, parent: Path | None = None,
                      skills: Sequence[str] = (), skills_root: Path | None = None,
                      templates: bool = False) -> Workspace:
    """Copy ``task`` into a fresh folder under ``parent`` (default: the system temp folder).

    ``skills`` are folder names in ``skills_root`` (default: the installed ``skills/``).
    ``templates``: write a starting file for each declared model without SQL
    (:mod:`spider2local.dbtproject.templates`), before the scan, which still calls them stubs.

    Raises :class:`UserError` for an unknown skill and :class:`DatasetError` when the task has
    no start database inside its project; a half-made folder is removed on any failure.
    """
    skill_dirs = _skill_sources(skills, skills_root)
    start_db = _start_db(task)
    artifacts.mkdir(parents=True, exist_ok=True)
    root = _make_recorded(task, artifacts, parent)
    try:
        return _fill(task, root, start_db, artifacts.resolve(), skill_dirs, templates)
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
          skill_dirs: Mapping[str, Path], templates: bool = False) -> Workspace:
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
    for name, source in skill_dirs.items():
        copy_tree(source, project / ".claude" / "skills" / name)
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
                     problems=problems, start_copy=start_copy, room=measure_room(root))


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


PASS_ENV = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "VIRTUAL_ENV",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
})
"""The host variables an agent's processes keep (plus every ``LC_*``): search path, locale,
time zone, terminal, and how to reach the network (proxies, CA bundles). Everything else of the
runner's environment (its own settings naming suites, runs and caches, a user's DBT_* paths,
tokens of other services) is not handed down: an allow-list, because a deny-list misses the
variable nobody thought of."""
HOME_DIR = ".home"
TMP_DIR = ".tmp"
"""Inside the workspace root: the agent's HOME and temp folder, so whatever it or its tools
leave there (the Claude CLI's ``claude-<uid>/`` included) goes with the workspace."""
START_DIR = ".start"
"""Inside the workspace root: the read-only copy of the start database (not the agent's)."""


def workspace_env(task: TaskSpec, base: Mapping[str, str], forbidden: Sequence[Path] = (),
                  root: Path | None = None) -> dict[str, str]:
    """The agent's environment: real clock, dbt shim first on PATH, the task's fake date, and
    of ``base`` only the :data:`PASS_ENV` variables (and ``LC_*``) that name no forbidden path.

    With ``root`` (the workspace root), HOME and TMPDIR point inside it.
    """
    return _dated_env(task.date, base, forbidden, root)


def _dated_env(date: dt.date, base: Mapping[str, str], forbidden: Sequence[Path],
               root: Path | None) -> dict[str, str]:
    clean = {k: v for k, v in base.items()
             if (k in PASS_ENV or k.startswith("LC_")) and not any(str(p) in v for p in forbidden)}
    if root is not None:
        clean.update(HOME=str(root / HOME_DIR), TMPDIR=str(root / TMP_DIR), **runtime_env())
    return Clock(date, find_library()).agent_env(clean, faketime_dir())


def kept_env(date: dt.date, root: Path, project: Path) -> dict[str, str]:
    """The environment of a kept workspace, built again as :func:`_fill` built it (never read
    from the workspace, which the agent could write): for ``shell --workspace``."""
    return {**_dated_env(date, os.environ, (), root),
            RUNS_ENV: str(project / CONTEXT_DIR / DBT_RUNS)}


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


def collect_artifacts(ws: Workspace, *, keep_db: bool, check: Check | None = None,
                      checkpointed: bool = False) -> CollectedArtifacts:
    """Copy the final project text files, the project's last dbt log and run_results (to
    ``artifacts/dbt``) and, with ``keep_db``, the database to artifacts, checkpointed first
    unless ``checkpointed`` says the caller's checkpoint succeeded and nothing wrote since (the
    runner's: the agent's processes are reaped, the scorer reads; a second checkpoint was one
    more reader child, 0.35 s measured, folding nothing).

    Only plain files of the workspace are copied (:mod:`.guard`): symlinks are never followed
    (one to ``/`` would walk the runner's whole file system; one to a file outside would copy
    it into the run folder), and a text file larger than :data:`ARTIFACT_MAX_BYTES` is left
    out (a sparse file the size of the disk would fill it)."""
    target = ws.artifacts / PROJECT_FILES
    files = copy_text_files(ws.project_dir, target, root=ws.root, check=check)
    _collect_dbt_files(ws, ws.artifacts / DBT_LOGS)
    database = None
    if keep_db and is_workspace_file(ws.root, ws.database):
        if not checkpointed:
            checkpoint_database(ws.database, root=ws.root)
        database = ws.artifacts / RESULT_DB
        fast_copy(ws.database, database)
    write_dbt_text(ws.artifacts / DBT_LOGS)  # last: a convenience must not cost the database
    return CollectedArtifacts(project=target, files=files, database=database)


ARTIFACT_MAX_DEPTH = 32
"""Path components below the project at most for a kept file: real projects nest models a few
folders deep; a 1,200-level tree copied whole would make every later walk of the run folder
pay for it."""
ARTIFACT_MAX_TOTAL = 256 * 1024 * 1024
"""Bytes of project text files kept per copy at most: 100,000 small .sql files must not fill
the run folder (the files past it are left out, as a too-large file is)."""
ARTIFACT_MAX_BYTES = 10 * 1024 * 1024
"""A project text file (or dbt log) larger than this is not kept: no real model, YML or log of
one task comes near it, and a sparse file the size of the disk would fill the run folder."""


def _small_plain(root: Path, path: Path) -> bool:
    try:
        return workspace_file(root, path).st_size <= ARTIFACT_MAX_BYTES
    except (OSError, OutsideWorkspace):
        return False


def copy_text_files(project: Path, target: Path, *, root: Path,
                    check: Check | None = None) -> int:
    """Copy the project's text files an agent may write (:data:`ARTIFACT_SUFFIXES`, outside
    :data:`ARTIFACT_SKIP`) into a fresh ``target``; returns how many. One rule for both copies
    kept in the run folder: the start project and the project as the agent left it, so the
    report diffs like with like. Only small plain files inside ``root`` are copied
    (:func:`_small_plain`), at most :data:`ARTIFACT_MAX_DEPTH` folders deep (what the run
    folder keeps is walked again by reports). ``check``: the stage deadline, per entry."""
    remove_tree(target)
    files = total = 0
    # walk_files: iterative, never through a symlink (nor a project folder swapped for one)
    for path, info in walk_files(project, skip_top=ARTIFACT_SKIP, check=check):
        rel = path.relative_to(project)
        if (path.suffix not in ARTIFACT_SUFFIXES or len(rel.parts) > ARTIFACT_MAX_DEPTH
                or total + info.st_size > ARTIFACT_MAX_TOTAL or not _small_plain(root, path)):
            continue
        total += info.st_size
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        copy_regular(path, target / rel)
        files += 1
    return files


def _collect_dbt_files(ws: Workspace, target: Path) -> None:
    """Keep the dbt log and the run_results of each of an agent's own ``dbt`` calls.

    The Claude agent runs dbt through Bash, so its logs stay in the workspace and would vanish
    with it. dbt keeps only the last call's ``target/run_results.json`` (a ``dbt show`` after
    the ``dbt run`` replaces it), so the shim numbers a copy of each (:data:`DBT_RECORD`); they
    come over as ``NNN-<command>.run_results.json``, and the last file itself only when there
    are none (dbt run without the shim). A file already in ``target`` (the non-LLM agents log
    there directly) is never overwritten.
    """
    records = ws.project_dir / CONTEXT_DIR / DBT_RUNS
    kept = 0
    # each record passes the guard itself (:func:`_small_plain`); a linked folder is not even listed
    listable = records.is_dir() and not records.is_symlink()
    # in call order: by the number, not as text ("1000-run" would sort before "999-show")
    names = sorted((p.name for p in records.iterdir()), key=_record_order) if listable else []
    for name in (n for n in names if DBT_RECORD.match(n)):
        path, copy = records / name, target / (name.removesuffix(".json") + RUN_RESULTS_SUFFIX)
        if kept >= MAX_DBT_RECORDS or not _small_plain(ws.root, path) or copy.exists():
            continue
        target.mkdir(parents=True, exist_ok=True)
        copy_regular(path, copy)
        kept += 1
    for source, name in PROJECT_DBT_FILES:
        if kept and name == "run_results.json":
            continue  # the last record is this file
        path = ws.project_dir / source
        if _small_plain(ws.root, path) and not (target / name).exists():
            target.mkdir(parents=True, exist_ok=True)
            copy_regular(path, target / name)


def write_dbt_text(logs: Path) -> bool:
    """Write ``logs/dbt.txt``: ``logs/dbt.log`` (JSON events, coloured) as plain text a person
    reads (:func:`spider2local.clock.dbt.log_as_text`); returns whether it was written. Only a
    plain log file is read (the built-in agents' dbt writes it here directly), line by line,
    and at most :data:`ARTIFACT_MAX_BYTES` of text is written (the rest is named, not kept)."""
    source, target = logs / DBT_LOG, logs / DBT_TEXT
    if not is_workspace_file(logs, source):
        return False
    written = 0
    try:
        target.unlink(missing_ok=True)  # a link in its place is removed, never written through
        with source.open(encoding="utf-8", errors="replace") as fh, \
                target.open("x", encoding="utf-8") as out:
            for line in log_as_text(iter(functools.partial(fh.readline, MAX_LOG_LINE), "")):
                if written + len(line) > ARTIFACT_MAX_BYTES:
                    out.write(f"... [the rest of {DBT_LOG} is not kept here]\n")
                    break
                out.write(line)
                written += len(line)
    except OSError:  # a full disk: the JSON log is still there; the report says dbt.txt is not
        with contextlib.suppress(OSError):
            target.unlink(missing_ok=True)
        return False
    return True


MAX_LOG_LINE = 1 << 20
"""Characters read of one dbt log line at a time: a longer line comes in pieces, never whole
into memory."""


def _record_order(name: str) -> tuple[int, str]:
    number = name.split("-", 1)[0]
    return (int(number) if number.isdigit() else 1 << 62, name)


def checkpoint_database(db: Path, *, root: Path, timeout: float | None = None) -> None:
    """Fold the WAL into ``db`` so the file alone is complete (what gets scored and kept).

    ``db`` must be a plain file in the workspace ``root`` (:mod:`.guard`): this opens it
    read-write, and a symlink the agent left would open gold or the dataset instead. External
    access is off: the file's views and macros are the agent's SQL, run here outside the
    sandbox. A just-killed dbt may still hold the lock for a moment: retry briefly. Raises
    :class:`ScoringError` when the file is missing (opening it would create an empty one),
    stays locked, or is not a DuckDB file; :class:`OutsideWorkspace` (a ScoringError) when it
    is not a plain file of the workspace, and its :class:`LockedOut` when the agent made it
    unopenable (:func:`_refused_to_us`): the agent's doing, scored as no result. ``timeout``:
    seconds after which the sandboxed child is killed (default: its own generous one), so that
    a stage deadline leaves no checkpoint running behind it.
    """
    try:
        database_files(root, db)
        refused = _refused_to_us(db)
    except FileNotFoundError:
        raise ScoringError(f"{db}: result database missing") from None
    except PermissionError as exc:  # a folder on the way made untraversable
        refused = exc.strerror or "Permission denied"
    if refused is not None:
        raise LockedOut(f"{db}: the agent made its database unopenable ({refused}: a mode "
                        "or attribute changed in the workspace)")
    try:  # in a reader sandbox holding the database's folder alone (spider2local.sandbox.dbreads)
        waited = checkpoint_sandboxed(db, CHECKPOINT_LOCK_WAIT.seconds, timeout=timeout)
    except ReaderDuckDBError as exc:  # corrupt or not DuckDB: waiting would not help
        raise ScoringError(f"{db}: cannot checkpoint: {exc}") from exc
    if waited is not None:
        raise ScoringError(f"{db}: still locked by another process after {waited:.1f}s; "
                           "cannot checkpoint") from DatabaseLocked(
                               RuntimeError("Could not set lock on file"), 0, waited)


def _refused_to_us(db: Path) -> str | None:
    """What the OS says when the runner cannot open ``db`` (or its WAL) read-write, as
    DuckDB's checkpoint must; ``None`` when it can.

    Asked here, before DuckDB, because DuckDB's message has no errno: "permission denied" on a
    file the runner made writable is the agent's ``chmod``/``chattr``, while a read-only file
    system (EROFS, the machine's) is left for DuckDB to report."""
    for path in (db, db.with_name(db.name + ".wal")):
        try:
            os.close(os.open(path, os.O_RDWR | os.O_NOFOLLOW))
        except FileNotFoundError:
            continue  # no WAL
        except PermissionError as exc:  # EACCES, EPERM
            return exc.strerror or "Permission denied"
    return None


def _skill_sources(names: Sequence[str], root: Path | None) -> dict[str, Path]:
    """Resolve skill names to folders before anything is copied; unknown names are an error."""
    if not names:
        return {}
    base = root if root is not None else skills_dir()
    available = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    found: dict[str, Path] = {}
    for name in names:
        if not _SKILL_NAME.match(name) or not (base / name).is_dir():
            raise UserError(f"unknown skill {name!r}", path=base,
                            fix=f"choose from: {', '.join(available) or '(none)'}")
        found[name] = base / name
    return found


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
    path.write_text(json.dumps(summary, indent=2, allow_nan=False), encoding="utf-8")

"""What a trial leaves in its run folder: the project's text files as the agent left them (and
as they started), the dbt logs and run records of each of its calls, and on request the
database."""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from spider2local.clock.dbt import log_as_text
from spider2local.core.layout import (
    DBT_LOG,
    DBT_LOGS,
    DBT_RUNS,
    DBT_TEXT,
    PROJECT_FILES,
    RESULT_DB,
    RUN_RESULTS_SUFFIX,
)
from spider2local.workspace.activate import CONTEXT_DIR
from spider2local.workspace.checkpoint import checkpoint_database
from spider2local.workspace.copy import fast_copy, remove_tree
from spider2local.workspace.guard import (
    OutsideWorkspace,
    is_workspace_file,
    workspace_file,
)
from spider2local.workspace.model import Workspace
from spider2local.workspace.tree import Check, copy_regular, walk_files

ARTIFACT_SUFFIXES = frozenset({".sql", ".yml", ".yaml", ".md", ".py", ".csv"})
ARTIFACT_SKIP = frozenset({"target", "logs", "dbt_packages", "dbt_modules", CONTEXT_DIR,
                           ".git", "__pycache__"})
"""Top-level project folders never kept: build output, packages, the runner's context. The
folder skills were installed into is left out too (:attr:`Workspace.skills_dir`)."""
PROJECT_DBT_FILES = (("logs/dbt.log", DBT_LOG), ("target/run_results.json", "run_results.json"))
"""What an agent's own ``dbt`` calls leave in the project (kept small: no manifest)."""
DBT_RECORD = re.compile(r"^[0-9]{3,}-[A-Za-z0-9_-]+\.json$")
"""A run_results record the dbt shim kept (``NNN-<command>.json``, see faketime/README.md)."""
MAX_DBT_RECORDS = 1000
"""Records collected per task at most: far above any real session, a bound on a loop's spam."""


@dataclass(frozen=True)
class CollectedArtifacts:
    project: Path
    """``artifacts/project``: the final SQL, YML and docs of the project."""
    files: int
    database: Path | None
    """``artifacts/result.duckdb`` when the database was kept."""


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
    skip = ARTIFACT_SKIP | ({Path(ws.skills_dir).parts[0]} if ws.skills_dir else set())
    files = copy_text_files(ws.project_dir, target, root=ws.root, check=check, skip=skip)
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


def copy_text_files(project: Path, target: Path, *, root: Path, check: Check | None = None,
                    skip: Collection[str] = ARTIFACT_SKIP) -> int:
    """Copy the project's text files an agent may write (:data:`ARTIFACT_SUFFIXES`, outside
    :data:`ARTIFACT_SKIP`) into a fresh ``target``; returns how many. One rule for both copies
    kept in the run folder: the start project and the project as the agent left it, so the
    report diffs like with like. Only small plain files inside ``root`` are copied
    (:func:`_small_plain`), at most :data:`ARTIFACT_MAX_DEPTH` folders deep (what the run
    folder keeps is walked again by reports). ``check``: the stage deadline, per entry."""
    remove_tree(target)
    files = total = 0
    # walk_files: iterative, never through a symlink (nor a project folder swapped for one)
    for path, info in walk_files(project, skip_top=skip, check=check):
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

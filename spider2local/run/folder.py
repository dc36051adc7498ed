"""The run folder: ``<runs-dir>/<run-id>/run.json`` plus one folder per task.

Layout::

    <run-id>/run.json               the manifest (versions, hashes, settings, selection, times)
    <run-id>/<task>/result.json     written atomically, last: its presence means "finished"
    <run-id>/<task>/transcript.jsonl, queries.jsonl, dbt/, project/, result.duckdb (--keep-db)

Everything a report, a resume or a re-score needs is read back from here, never kept in memory,
so a run killed with SIGKILL loses at most the tasks that were running.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from spider2local import __version__, resources
from spider2local.exceptions import UserError
from spider2local.run.layout import MANIFEST, QUERIES, RESULT, RESULT_DB, TRANSCRIPT
from spider2local.run.results import TaskResult, load_result, write_json_atomic
from spider2local.run.stale import remove_stale_workspaces
from spider2local.run.transcript import forget_cut
from spider2local.safepath import NAME_FIX, child, name_problem
from spider2local.workspace.copy import remove_tree

MANIFEST_VERSION = 2
"""2: ``integrity`` holds the fingerprints taken before any agent started (absent in 1)."""
DEPENDENCIES = ("anyio", "claude-agent-sdk", "duckdb", "dbt-core", "dbt-duckdb", "pandas",
                "numpy", "click", "libfaketime")


def new_run_id(now: dt.datetime | None = None) -> str:
    """A timestamp id such as ``20261130-142501`` (local time: what a person expects to see)."""
    return (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def check_run_id(run_id: str) -> str:
    """Run ids become folder names: refuse anything that could escape the runs folder."""
    if name_problem(run_id) is not None:
        raise UserError(f"--run-id {run_id!r} is not a plain folder name", fix=NAME_FIX)
    return run_id


def dependency_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version(),
                                       "spider2local": __version__}
    for name in DEPENDENCIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def tree_sha256(root: Path | None) -> str | None:
    """One hash over every file under ``root`` (relative path and content), order-independent
    of the file system; ``None`` when the folder does not exist. Prompts and skills change
    agent behaviour, so a run records exactly which ones it used."""
    if root is None or not root.is_dir():
        return None
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _resource_hash(name: str) -> str | None:
    try:
        return tree_sha256(resources.resource_dir(name))
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class RunFolder:
    """Paths of one run; creating the object touches nothing on disk."""

    root: Path

    @classmethod
    def at(cls, runs_dir: Path, run_id: str) -> RunFolder:
        return cls(runs_dir / check_run_id(run_id))

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    def task_dir(self, task_id: str) -> Path:
        """The task's folder, checked to stay inside the run folder: :meth:`reset_task` deletes
        it, and an id such as ``../x`` once deleted a folder next to the run."""
        return child(self.root, task_id)

    def result_path(self, task_id: str) -> Path:
        return self.task_dir(task_id) / RESULT

    def result_db(self, task_id: str) -> Path:
        return self.task_dir(task_id) / RESULT_DB

    def load_result(self, task_id: str) -> TaskResult | None:
        return load_result(self.result_path(task_id))

    def results(self) -> dict[str, TaskResult]:
        """Every finished task's result, by id (unreadable or half-written ones are absent)."""
        found: dict[str, TaskResult] = {}
        if not self.root.is_dir():
            return found
        for path in sorted(self.root.glob(f"*/{RESULT}")):
            if path.parent.is_symlink():  # a folder elsewhere: not this run's (task_dir refuses it)
                continue
            result = load_result(path)
            if result is not None and result.task_id == path.parent.name:
                found[result.task_id] = result  # another task's id: corrupt, so unfinished
        return found

    def reset_task(self, task_id: str) -> Path:
        """Empty a task's folder before (re-)running it: an interrupted attempt leaves a partial
        transcript and dbt logs that would otherwise mix with the new attempt's.

        A SIGKILLed run also left its workspace and the processes working in it (a dbt still
        holding the database, a CLI): only this folder records where that workspace is, so
        those are killed and removed first (see :mod:`.stale`)."""
        folder = self.task_dir(task_id)
        if folder.exists():
            remove_stale_workspaces(folder)
            remove_tree(folder)  # iterative: whatever depth an earlier attempt left
        for log in (TRANSCRIPT, QUERIES):
            forget_cut(folder / log)
        folder.mkdir(parents=True)
        return folder

    def read_manifest(self) -> dict[str, Any] | None:
        """The manifest; ``None`` when the folder has none. A run.json that exists but is not
        one (truncated, edited, wrong types) raises :class:`UserError` naming it: reports,
        re-scores and resumes read it, and used to print a traceback or silently count none
        of the run's tasks."""
        try:
            text = self.manifest_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _bad_manifest(self.manifest_path, exc.strerror or str(exc)) from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise _bad_manifest(self.manifest_path, f"not valid JSON ({exc})") from None
        problem = manifest_problem(data)
        if problem is not None:
            raise _bad_manifest(self.manifest_path, problem)
        return dict(data)

    def create(self) -> None:
        """Make the run folder; an unusable --runs-dir is the user's to fix, not a traceback."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _unwritable(self.root, exc) from None

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        try:
            write_json_atomic(self.manifest_path, dict(manifest))
        except OSError as exc:
            raise _unwritable(self.manifest_path, exc) from None


_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "agent": (str,), "model": (str, type(None)), "settings": (dict,),
    "versions": (dict,), "suite": (dict,), "dataset": (str, type(None)), "tasks": (list,),
    "sessions": (list,), "started_at": (str, type(None)), "finished_at": (str, type(None)),
    "denominators": (dict,),
}
_TASK_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,), "fake_date": (str,), "tables": (int,), "skipped": (str, type(None)),
    "free": (bool, type(None)),
}


def manifest_problem(data: Any) -> str | None:
    """Why ``data`` is not a run.json of ours (one phrase), or ``None``. Keys may be absent
    (older runs wrote fewer); those present must have the types every reader assumes."""
    if not isinstance(data, dict):
        return f"not a JSON object but {type(data).__name__}"
    for key, types in _MANIFEST_TYPES.items():
        if key in data and not _typed(data[key], types):
            return f"{key!r} is {type(data[key]).__name__}, not {_names(types)}"
    ids: set[str] = set()
    for number, task in enumerate(data.get("tasks", ()), start=1):
        if not isinstance(task, dict) or not isinstance(task.get("id"), str):
            return f"tasks entry {number} is not an object with an id"
        if (problem := name_problem(task["id"])) is not None:
            return f"tasks entry {number}: id {problem}"
        if task["id"] in ids:  # every reader counts entries: a twice-listed task counts twice
            return f"tasks entry {number}: id {task['id']!r} is listed twice"
        ids.add(task["id"])
        for key, types in _TASK_TYPES.items():
            if key in task and not _typed(task[key], types):
                return f"tasks entry {number}: {key!r} is {type(task[key]).__name__}, " \
                       f"not {_names(types)}"
    if not all(isinstance(s, dict) for s in data.get("sessions", ())):
        return "sessions must be a list of objects"
    return None


def _typed(value: Any, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def _names(types: tuple[type, ...]) -> str:
    return " or ".join("null" if t is type(None) else t.__name__ for t in types)


def _bad_manifest(path: Path, problem: str) -> UserError:
    return UserError(f"not a usable {MANIFEST}: {problem}", path=path,
                     fix="restore it, or pass another run folder")


def _unwritable(path: Path, exc: OSError) -> UserError:
    return UserError(f"cannot write the run folder: {exc.strerror or exc}", path=path,
                     fix="pass a writable --runs-dir")


def open_run_dir(path: Path) -> RunFolder:
    """A run folder given on the command line (``score``, ``report``): it must hold run.json."""
    folder = RunFolder(path)
    if not path.is_dir():
        raise UserError("run folder not found", path=path, fix="pass <runs-dir>/<run-id>")
    if folder.read_manifest() is None:
        raise UserError(f"no readable {MANIFEST} here", path=path,
                        fix="pass a folder made by `spider2local run`")
    return folder


@dataclass(frozen=True)
class SelectedTask:
    """What the manifest records about one selected task (enough for a report from disk)."""

    id: str
    fake_date: str
    tables: int
    """Number of graded tables (0 when the task has no evaluation)."""
    skipped: str | None = None
    """Why the task cannot run; ``None`` when it is run."""
    free: bool | None = None
    """Whether the untouched start database already passes (measured at the run's start,
    :func:`spider2local.dataset.audit.free_passes`); ``None`` when unknown or not measured."""


def build_manifest(*, run_id: str, agent: str, settings: Mapping[str, Any],
                   suite_path: Path, suite_sha256: str, dataset_root: Path,
                   tasks: Iterable[SelectedTask], previous: Mapping[str, Any] | None,
                   argv: list[str] | None = None, prompts_dir: Path | None = None,
                   skills_dir: Path | None = None,
                   denominators: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The run.json written at the start of an invocation. A resumed run keeps the first
    invocation's ``started_at`` and appends to ``sessions`` so every restart is visible.
    ``prompts_dir`` / ``skills_dir``: the kit used instead of the bundled one (its hashes are
    recorded, so a resume with another kit is refused like one with other bundled files).
    ``denominators`` (the dataset audit's counts) are what the report divides by."""
    started = now_iso()
    sessions = list(previous.get("sessions", [])) if previous else []
    sessions.append({"started_at": started, "finished_at": None, "interrupted": None,
                     "argv": argv})
    return {
        "manifest_version": MANIFEST_VERSION,
        "run_id": run_id,
        "agent": agent,
        "model": settings.get("model"),
        "settings": dict(settings),
        "versions": dependency_versions(),
        "suite": {"path": str(suite_path), "sha256": suite_sha256},
        "dataset": str(dataset_root),
        "prompts_sha256": tree_sha256(prompts_dir) if prompts_dir else _resource_hash("prompts"),
        "skills_sha256": tree_sha256(skills_dir) if skills_dir else _resource_hash("skills"),
        "tasks": [vars(t) for t in tasks],
        **({"denominators": dict(denominators)} if denominators is not None else {}),
        "started_at": previous.get("started_at", started) if previous else started,
        "finished_at": None,
        "sessions": sessions,
    }


def finish_manifest(manifest: Mapping[str, Any], *, interrupted: bool) -> dict[str, Any]:
    """The same manifest with end times set (written once the invocation ends)."""
    done = now_iso()
    sessions = [dict(s) for s in manifest.get("sessions", [])]
    if sessions:
        sessions[-1].update(finished_at=done, interrupted=interrupted)
    return {**manifest, "finished_at": done, "interrupted": interrupted, "sessions": sessions}

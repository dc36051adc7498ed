"""The run folder: ``<runs-dir>/<run-id>/run.json`` plus one folder per trial of each task.

Layout (every name is in :mod:`.layout`)::

    <run-id>/run.json               the manifest (versions, hashes, settings, selection, times)
    <run-id>/<task>/result.json     trial 1: written atomically, last: its presence means
                                    "finished"
    <run-id>/<task>/transcript.jsonl, queries.jsonl, dbt/, project/, result.duckdb (--keep-db)
    <run-id>/_trials/<k>/<task>/    trial k >= 2 of the task: the same files
    <run-id>/_history/<n>/          what ``run --rerun`` discarded (the same layout; never read
                                    as results)

Results are addressed by ``(task, trial)``. Trial 1 is the task's own folder, so a run made
before trials existed is a 1-trial run as it lies on disk, read by every command and resumed
with nothing migrated. :meth:`RunFolder.trial_results` is the one reader of results.

Everything a report, a resume or a re-score needs is read back from here, never kept in memory,
so a run killed with SIGKILL loses at most the tasks that were running.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.core.layout import (
    HISTORY,
    MANIFEST,
    QUERIES,
    RESULT,
    RESULT_DB,
    TRANSCRIPT,
    TRIALS,
)
from spider2local.core.results import TaskResult, load_result, write_json_atomic
from spider2local.core.transcript import forget_cut
from spider2local.exceptions import UserError
from spider2local.run.manifest import RunManifest
from spider2local.run.stale import remove_stale_workspaces
from spider2local.safepath import NAME_FIX, UnsafePath, child, name_problem
from spider2local.workspace.copy import remove_tree


def new_run_id(now: dt.datetime | None = None) -> str:
    """A timestamp id such as ``20261130-142501`` (local time: what a person expects to see)."""
    return (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")


def check_run_id(run_id: str) -> str:
    """Run ids become folder names: refuse anything that could escape the runs folder."""
    if name_problem(run_id) is not None:
        raise UserError(f"--run-id {run_id!r} is not a plain folder name", fix=NAME_FIX)
    return run_id


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
        """The task's folder (its trial 1), checked to stay inside the run folder:
        :meth:`reset_trial` deletes it, and an id such as ``../x`` once deleted a folder next
        to the run."""
        return child(self.root, task_id)

    def trial_dir(self, task_id: str, trial: int = 1) -> Path:
        """Where trial ``trial`` of the task keeps its files (see the module docstring)."""
        if trial < 1:
            raise ValueError(f"trial {trial}: trials count from 1")
        if trial == 1:
            return self.task_dir(task_id)
        base = self.root / TRIALS
        if base.is_symlink() or (base / str(trial)).is_symlink():
            raise UnsafePath(f"{base} is a link: not this run's", path=self.root,
                             fix="remove the link; nothing of ours lives outside its folder")
        return child(base / str(trial), task_id)

    def result_path(self, task_id: str, trial: int = 1) -> Path:
        return self.trial_dir(task_id, trial) / RESULT

    def result_db(self, task_id: str, trial: int = 1) -> Path:
        return self.trial_dir(task_id, trial) / RESULT_DB

    def load_result(self, task_id: str, trial: int = 1) -> TaskResult | None:
        return load_result(self.result_path(task_id, trial))

    def trial_folders(self) -> list[tuple[str, int, Path]]:
        """Every trial folder of the run as ``(task id, trial, path)``, links left out (a
        folder elsewhere is not this run's), history never included."""
        found: list[tuple[str, int, Path]] = []
        if not self.root.is_dir():
            return found
        for path in sorted(self.root.iterdir()):
            if name_problem(path.name) is None and path.is_dir() and not path.is_symlink():
                found.append((path.name, 1, path))
        trials = self.root / TRIALS
        if trials.is_dir() and not trials.is_symlink():
            for number in sorted(trials.iterdir(), key=lambda p: p.name):
                if not (number.name.isdigit() and int(number.name) >= 2) \
                        or not number.is_dir() or number.is_symlink():
                    continue
                for path in sorted(number.iterdir()):
                    if name_problem(path.name) is None and path.is_dir() \
                            and not path.is_symlink():
                        found.append((path.name, int(number.name), path))
        return found

    def trial_results(self) -> dict[tuple[str, int], TaskResult]:
        """Every finished trial's result, by ``(task id, trial)``, sorted: the one reader of
        results every command uses (report, resume, rescore, merge). Unreadable or
        half-written files are absent, and so is a result whose task id or trial disagrees
        with the folder holding it (a copied or edited file: unfinished, so re-run)."""
        found: dict[tuple[str, int], TaskResult] = {}
        for task_id, trial, path in self.trial_folders():
            result = load_result(path / RESULT)
            if result is not None and result.task_id == task_id and result.trial == trial:
                found[(task_id, trial)] = result
        return dict(sorted(found.items()))

    def reset_trial(self, task_id: str, trial: int = 1) -> Path:
        """Empty a trial's folder before (re-)running it: an interrupted attempt leaves a
        partial transcript and dbt logs that would otherwise mix with the new attempt's.

        A SIGKILLed run also left its workspace and the processes working in it (a dbt still
        holding the database, a CLI): only this folder records where that workspace is, so
        those are killed and removed first (see :mod:`.stale`).

        A trial folder that is a symlink (put there by hand or by an agent's run before) was
        never this run's: :meth:`trial_results` ignores it, so the link itself (never what it
        points to) is removed and a real folder made. It used to stop the whole run with a
        traceback."""
        link = self.root / task_id if trial == 1 else self.root / TRIALS / str(trial) / task_id
        if name_problem(task_id) is None and link.is_symlink():
            link.unlink()
        folder = self.trial_dir(task_id, trial)
        if folder.exists():
            remove_stale_workspaces(folder)
            remove_tree(folder)  # iterative: whatever depth an earlier attempt left
        for log in (TRANSCRIPT, QUERIES):
            forget_cut(folder / log)
        folder.mkdir(parents=True)
        return folder

    def discard(self, keys: list[tuple[str, int]]) -> Path | None:
        """Move the folders of these trials into a new ``_history/<n>/`` (the same layout),
        so ``run --rerun`` runs them again without deleting anything; returns that folder
        (``None`` when none of them had a folder)."""
        moves = [(key, self.trial_dir(*key)) for key in keys]
        moves = [(key, path) for key, path in moves if path.exists()]
        if not moves:
            return None
        history = self.root / HISTORY
        if history.is_symlink():
            raise UnsafePath(f"{history} is a link: not this run's", path=self.root,
                             fix="remove the link; nothing of ours lives outside its folder")
        history.mkdir(exist_ok=True)
        taken = [int(p.name) for p in history.iterdir() if p.name.isdigit()]
        entry = history / str(max(taken, default=0) + 1)
        entry.mkdir()
        for _key, path in moves:
            target = entry / path.relative_to(self.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)
        return entry

    def read_manifest(self) -> RunManifest | None:
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
        except UnicodeDecodeError as exc:
            raise _bad_manifest(self.manifest_path, f"not UTF-8 text (byte {exc.start})") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise _bad_manifest(self.manifest_path, f"not valid JSON ({exc})") from None
        try:
            return RunManifest.from_json(data)
        except ValueError as exc:
            raise _bad_manifest(self.manifest_path, str(exc)) from None

    def create(self) -> None:
        """Make the run folder; an unusable --runs-dir is the user's to fix, not a traceback."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _unwritable(self.root, exc) from None

    def write_manifest(self, manifest: RunManifest | Mapping[str, Any]) -> None:
        """Write run.json atomically; a mapping (a hand-made manifest: tests, tools) is read
        as a manifest first, so what is written is always one that reads back."""
        if not isinstance(manifest, RunManifest):
            manifest = RunManifest.from_json(dict(manifest))
        try:
            write_json_atomic(self.manifest_path, manifest.to_json())
        except OSError as exc:
            raise _unwritable(self.manifest_path, exc) from None


def _bad_manifest(path: Path, problem: str) -> UserError:
    return UserError(f"not a usable {MANIFEST}: {problem}", path=path,
                     fix="restore it, or pass another run folder")


def _unwritable(path: Path, exc: OSError) -> UserError:
    return UserError(f"cannot write the run folder: {exc.strerror or exc}", path=path,
                     fix="pass a writable --runs-dir")


LATEST = "latest"
"""The run reference that means the most recently started run of a runs folder."""
RUN_REF_FIX = ("pass a run folder, a run id of --runs-dir, or 'latest' "
               "(`spider2local runs` lists them)")


def run_folders(runs_dir: Path) -> list[RunFolder]:
    """The run folders of ``runs_dir`` (plain folders holding a run.json; links to elsewhere
    are not this folder's runs), oldest first by start time, then id."""
    if not runs_dir.is_dir():
        return []
    found: list[tuple[str, str, RunFolder]] = []
    for entry in runs_dir.iterdir():
        if entry.is_symlink() or not entry.is_dir() or not (entry / MANIFEST).is_file():
            continue
        try:
            manifest = RunFolder(entry).read_manifest()
        except UserError:  # a damaged run.json: still a run, listed by its id
            manifest = None
        started = (manifest.started_at if manifest else None) or ""
        found.append((started, entry.name, RunFolder(entry)))
    return [folder for _, _, folder in sorted(found, key=lambda f: (f[0], f[1]))]


def resolve_run(ref: str | Path, runs_dir: Path) -> Path:
    """The run folder a command-line reference names: ``latest`` (the run of ``runs_dir``
    started last), a path (anything with a ``/``, or an existing folder), or a run id looked
    up in ``runs_dir``. ``run --run-id`` takes an id while ``report`` and ``compare`` took
    only folder paths; now every command takes all three."""
    text = str(ref)
    if text == LATEST:
        runs = run_folders(runs_dir)
        if not runs:
            raise UserError("no runs yet, so no 'latest'", path=runs_dir,
                            fix="start one with `spider2local run`, or pass --runs-dir")
        return runs[-1].root
    if "/" in text or text in (".", ".."):
        return Path(text)
    if name_problem(text) is None and (runs_dir / text).is_dir():
        return runs_dir / text
    if Path(text).is_dir():
        return Path(text)
    raise UserError(f"no run {text!r} (neither a folder nor a run id of {runs_dir})",
                    path=runs_dir, fix=RUN_REF_FIX)


def claim_run_id(runs_dir: Path, now: dt.datetime | None = None) -> str:
    """A new default run id, its folder made at once so that two runs started in the same
    second cannot share it (they did: the second resumed the first). The timestamp id, or
    ``<timestamp>-2``, ``-3``... when taken; ``mkdir`` without ``exist_ok`` is the claim, so
    the check cannot be raced."""
    base = new_run_id(now)
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(runs_dir, exc) from None
    for n in range(1, 1000):
        run_id = base if n == 1 else f"{base}-{n}"
        try:
            (runs_dir / run_id).mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise _unwritable(runs_dir / run_id, exc) from None
        return run_id
    raise UserError("a thousand runs were started this second", path=runs_dir,
                    fix="pass --run-id")


def open_run_dir(path: Path) -> RunFolder:
    """A run folder given on the command line (``score``, ``report``): it must hold run.json."""
    folder = RunFolder(path)
    if not path.is_dir():
        raise UserError("run folder not found", path=path, fix="pass <runs-dir>/<run-id>")
    if folder.read_manifest() is None:
        raise UserError(f"no readable {MANIFEST} here", path=path,
                        fix="pass a folder made by `spider2local run`")
    return folder

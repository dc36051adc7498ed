"""Guards: what a run scores against cannot change under it unnoticed.

Without isolation an agent can write anything its user can: the gold database, the evaluation
file, the installed scorer (an editable install is plain files). The runner never scores in its
own process once an agent has run (every scoring is a sandboxed child,
:mod:`spider2local.sandbox.scoring`, which imports the scorer from disk at that moment),
so what guards the scorer is its files' fingerprint, checked before each scoring. Before any
agent starts the runner takes :class:`Fingerprints`: every selected task's gold database
and its ``.wal``, the task's evaluation record (its parsed parameters as canonical JSON), and
every ``.py`` file of the installed package (the scorer, and the code that turns a score into a
verdict and a report: one rule with no list to forget a module from), with what runs before
them in a later process (site-packages' ``.pth`` files, ``sitecustomize``/``usercustomize``,
and the package's cached bytecode: :mod:`.startup`). They are kept in run.json.

Before a task is scored its fingerprint and the sources are taken again (:func:`changes`); any
difference is an integrity error naming what changed, recorded and never a verdict. Right after
scoring the gold file's metadata is compared once more (:func:`gold_moved`): a write during
scoring changes its ctime, which no program can set back.

Hashing: a full SHA-256 of each gold file, several files at once in worker threads (hashlib
releases the GIL). Measured on a shared 2-core machine: about 200 MB/s per thread, so a 300 MB
gold file costs 1.5 s; the two real tasks' gold (4 MB) about 20 ms. A cheaper stat-only
fingerprint (size, mtime, inode) was rejected: an agent can set mtime back with ``touch -d``,
and a run must be re-checkable later (``score RUN_DIR``), on another machine, where only the
content means anything. Third-party libraries the scorer uses (pandas, numpy, duckdb) are
not hashed (hundreds of MB): namespace isolation makes them read-only.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import spider2local
from spider2local.core.codec import RecordError, dump, load
from spider2local.dataset import known
from spider2local.dataset.load import read_evals
from spider2local.dataset.sample import default_cache_dir
from spider2local.dataset.task import TaskSpec
from spider2local.evaluation.params import EvalConfigError, parse_eval
from spider2local.integrity.scan import Protected
from spider2local.integrity.startup import SITE_PREFIX, bytecode_mismatches, startup_hooks
from spider2local.integrity.witness import Witness
from spider2local.safepath import is_within
from spider2local.workspace.tree import walk_files

FINGERPRINTS_VERSION = 1
SOURCE_ROOT = Path(spider2local.__file__).resolve().parent
"""The installed package whose ``.py`` files are fingerprinted (tests point it at a copy)."""
HASH_THREADS = 4


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:  # the dataset is never opened writable
        return hashlib.file_digest(fh, "sha256").hexdigest()


@dataclass(frozen=True)
class FileFingerprint:
    sha256: str
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> FileFingerprint | None:
        """``None`` when the file does not exist. The stat is taken before and after hashing and
        must agree, so a file written meanwhile cannot pass for the content hashed."""
        try:
            before = path.stat()
            digest = sha256_file(path)
            after = path.stat()
        except FileNotFoundError:
            return None
        if _stat_key(before) != _stat_key(after):
            digest = "changed-while-hashed"
        return cls(digest, after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_ino)

    def same_content(self, other: FileFingerprint | None) -> bool:
        return other is not None and (self.sha256, self.size) == (other.sha256, other.size)

    def same_stat(self, path: Path) -> bool:
        try:
            st = path.stat()
        except OSError:
            return False
        return _stat_key(st) == (self.size, self.mtime_ns, self.ctime_ns, self.inode)


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


@dataclass(frozen=True)
class TaskFingerprint:
    gold: str
    """The gold database's path (as the dataset names it)."""
    db: FileFingerprint | None
    wal: FileFingerprint | None
    """The gold's ``.wal`` (committed data not yet in the file); ``None`` when there is none."""
    eval_record: str
    """The task's evaluation parameters as canonical JSON, or why they could not be read."""


@dataclass(frozen=True)
class Fingerprints:
    """What run.json keeps under ``integrity``: the package's sources and each task's gold."""

    sources: Mapping[str, str]
    """``relative path -> sha256`` of every ``.py`` file of the package."""
    tasks: Mapping[str, TaskFingerprint] = field(default_factory=dict)
    version: int = FINGERPRINTS_VERSION

    accepted_changes_at: str | None = None
    """When ``score --accept-changes`` made today's fingerprints the run's reference."""

    def to_json(self) -> dict[str, Any]:
        """run.json's ``integrity`` (:func:`~spider2local.core.codec.dump`; tasks by id)."""
        data = dump(replace(self, tasks=dict(sorted(self.tasks.items()))))
        if self.accepted_changes_at is None:
            del data["accepted_changes_at"]
        return data

    @classmethod
    def from_json(cls, data: Any) -> Fingerprints | None:
        """``None`` for a run made before fingerprints existed (or an unreadable entry)."""
        if not isinstance(data, Mapping) or data.get("version") != FINGERPRINTS_VERSION:
            return None
        try:
            return load(cls, data)
        except RecordError:
            return None

    def merged(self, newer: Fingerprints) -> Fingerprints:
        """These fingerprints plus ``newer``'s tasks not known yet: a task's reference is the
        one taken before the first agent of the run started, never a later one."""
        return Fingerprints(self.sources, {**newer.tasks, **self.tasks})


def source_hashes(root: Path | None = None) -> dict[str, str]:
    """Every ``.py`` file of the package by hash, plus what runs before them in a later
    process (:mod:`.startup`): site-packages' ``.pth`` files and startup hooks by hash, and
    a key for each cached bytecode that is not its source's."""
    base = root or SOURCE_ROOT
    sources = [p for p, _ in walk_files(base) if p.suffix == ".py"
               and "__pycache__" not in p.relative_to(base).parts]
    found = {p.relative_to(base).as_posix(): sha256_file(p) for p in sources}
    return {**found, **startup_hooks(), **bytecode_mismatches(sources, base)}


def canonical_params(raw: Any) -> str:
    """The parsed parameters of one evaluation record as canonical JSON (key order and
    whitespace of the file do not matter, what the scorer receives does)."""
    try:
        params = parse_eval(raw)
    except EvalConfigError as exc:
        return f"unusable: {exc.reason}"
    return json.dumps(dataclasses.asdict(params), sort_keys=True, separators=(",", ":"))


def eval_record(task: TaskSpec, eval_file: Path | None = None) -> str:
    """The task's record as the evaluation file holds it now (first record of the id wins, as
    in the loader). ``eval_file``: where to read it (the run's private copy, :mod:`.witness`;
    default the dataset's)."""
    try:
        evals = read_evals(eval_file or task.eval_file, [])
    except Exception as exc:  # a tampered file may not even read: that is a change too
        return f"unreadable: {type(exc).__name__}"
    return canonical_params(evals[task.id]) if task.id in evals else "absent"


def task_fingerprint(task: TaskSpec, eval_file: Path | None = None) -> TaskFingerprint | None:
    """``None`` for a task without gold (nothing is scored, nothing to guard)."""
    if task.gold is None:
        return None
    db = task.gold.db
    wal = db.with_name(db.name + ".wal")
    return TaskFingerprint(str(db), FileFingerprint.of(db), FileFingerprint.of(wal),
                           eval_record(task, eval_file))


def _readable_fingerprint(task: TaskSpec) -> TaskFingerprint | None:
    """A gold file we cannot read gets no fingerprint here (a resume takes it once it can be
    read); :func:`gold_unreadable` stops that task before its agent runs."""
    try:
        return task_fingerprint(task)
    except OSError:
        return None


def gold_unreadable(task: TaskSpec) -> OSError | None:
    """Why the runner cannot read ``task``'s gold database, if it cannot: checked before the
    agent runs, so an unreadable gold costs no agent session (it used to stop the whole run
    with a traceback while fingerprinting, and would otherwise fail only at scoring)."""
    if task.gold is None:
        return None
    try:
        with task.gold.db.open("rb") as fh:
            fh.read(1)
    except FileNotFoundError:
        return None  # a missing gold is the loader's problem, named on the task already
    except OSError as exc:
        return exc
    return None


def take(tasks: Iterable[TaskSpec], threads: int = HASH_THREADS) -> Fingerprints:
    """Fingerprint the package and ``tasks`` (gold files hashed ``threads`` at a time).

    The recorded evaluation parameters are the ones the runner will score with (the loaded
    task's), so a file edited between loading and now is caught at the first check."""
    # The scorer is not imported here (pandas alone cost every run 1.5 s): nothing in this
    # process scores an agent's database; the sandboxed scorer child loads it from the
    # fingerprinted files.
    todo = [t for t in tasks if t.gold is not None]
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        found = dict(zip((t.id for t in todo), pool.map(_readable_fingerprint, todo),
                         strict=True))
    fps: dict[str, TaskFingerprint] = {}
    for task in todo:
        fp = found[task.id]
        if fp is not None:
            fps[task.id] = dataclasses.replace(fp, eval_record=_loaded_params(task))
    return Fingerprints(source_hashes(), fps)


def _loaded_params(task: TaskSpec) -> str:
    assert task.gold is not None
    return json.dumps(dataclasses.asdict(task.gold.params), sort_keys=True,
                      separators=(",", ":"))


def source_changes(recorded: Fingerprints, now: Mapping[str, str] | None = None) -> list[str]:
    """Package files changed, added or removed since ``recorded`` (sorted paths)."""
    now = source_hashes() if now is None else now
    if not any(k.startswith(SITE_PREFIX) for k in recorded.sources):
        # recorded before startup hooks were fingerprinted: compare what it holds
        now = {k: v for k, v in now.items() if not k.startswith(SITE_PREFIX)}
    return sorted(p for p in recorded.sources.keys() | now.keys()
                  if recorded.sources.get(p) != now.get(p))


def _short(fp: FileFingerprint | None) -> str:
    return "absent" if fp is None else f"sha256 {fp.sha256[:12]}, {fp.size} bytes"


def task_changes(recorded: TaskFingerprint, now: TaskFingerprint) -> list[str]:
    """One phrase per difference between two fingerprints of a task (content, not times)."""
    found = []
    for what, old, new in (("gold file", recorded.db, now.db),
                           ("gold .wal", recorded.wal, now.wal)):
        same = new is None if old is None else old.same_content(new)
        if not same:
            found.append(f"{what} {now.gold}{'.wal' if what == 'gold .wal' else ''} changed "
                         f"({_short(old)} -> {_short(new)})")
    if recorded.eval_record != now.eval_record:
        found.append(f"evaluation record changed ({recorded.eval_record} -> "
                     f"{now.eval_record})")
    return found


def differences(recorded: Fingerprints, taken: Fingerprints, *,
                all_recorded: bool) -> list[str]:
    """What differs between a run's recorded fingerprints and ones ``taken`` now, one phrase
    each. ``all_recorded``: a task of ``taken`` the record lacks counts as a difference (a
    re-score must have every task's reference; a resume adds the new tasks)."""
    found = [f"scorer source {p}" for p in source_changes(recorded, taken.sources)]
    for tid, now in sorted(taken.tasks.items()):
        before = recorded.tasks.get(tid)
        if before is not None:
            found += [f"{tid}: {what}" for what in task_changes(before, now)]
        elif all_recorded:
            found.append(f"{tid}: no fingerprint recorded")
    return found


@dataclass(frozen=True)
class Check:
    """The outcome of a pre-scoring check: what changed (empty when nothing did) and the gold
    file's fingerprint as just taken, for :func:`gold_moved` after scoring."""

    changed: tuple[str, ...]
    gold: FileFingerprint | None = None


def changes(recorded: Fingerprints | None, task: TaskSpec,
            sources: Mapping[str, str] | None = None, eval_file: Path | None = None) -> Check:
    """Compare ``task``'s gold, evaluation record and the package sources with ``recorded``
    (``eval_file``: where its record is read, see :func:`eval_record`)."""
    if recorded is None or task.gold is None:
        return Check(())
    found: list[str] = []
    edited = source_changes(recorded, sources)
    if edited:
        more = f" (+{len(edited) - 3} more)" if len(edited) > 3 else ""
        found.append(f"scorer source changed: {', '.join(edited[:3])}{more}")
    now = task_fingerprint(task, eval_file)
    before = recorded.tasks.get(task.id)
    if before is None:
        found.append(f"no fingerprint of {task.id}'s gold was taken before the agents started")
    elif now is not None:
        found += task_changes(before, now)
    return Check(tuple(found), now.db if now is not None else None)


def gold_moved(check: Check, task: TaskSpec) -> str | None:
    """After scoring: was the gold file written (or replaced) since :func:`changes` hashed it?"""
    if task.gold is None or check.gold is None or check.gold.same_stat(task.gold.db):
        return None
    return f"gold file {task.gold.db} changed while it was scored"


def describe(changed: Sequence[str]) -> str:
    return "not scored: " + "; ".join(changed)


@dataclass(frozen=True)
class Watch:
    """What the runner keeps an eye on for one run: the fingerprints taken before any agent
    started, and the run's own files an agent must not name (see :mod:`.scan`)."""

    fingerprints: Fingerprints
    runs_dir: Path | None = None
    suite_file: Path | None = None
    witness: Witness | None = None
    """The unsealed witness (``--isolation none``, :mod:`.witness`): while it is on, the
    runner reads gold and evaluation records only through :meth:`reading` and
    :meth:`changes`, its private copies; ``None``: the originals."""

    def reading(self, task: TaskSpec) -> TaskSpec:
        """``task`` as the runner reads its gold (the witness's private copy, when on)."""
        return self.witness.reading(task) if self.witness is not None else task

    def changes(self, task: TaskSpec) -> Check:
        """:func:`changes` of ``task`` against the run's fingerprints, on what the runner reads
        (:meth:`reading`; a change of a private copy is a change like any other), and, while
        the witness reads copies, the original gold written since (its metadata alone)."""
        if self.witness is None:
            return changes(self.fingerprints, task)
        records = self.witness.eval_file(task)
        with self.witness.own_read(records):
            check = changes(self.fingerprints, self.reading(task), eval_file=records)
        moved = self.witness.originals_changed(task)
        return dataclasses.replace(check, changed=(*check.changed, *moved)) if moved else check

    def off_limits(self, task: TaskSpec) -> tuple[Path, ...]:
        """What of the runner's lies outside the workspace and is none of ``task``'s agent's
        business, by real path, wherever it lies (``/opt``, ``/usr/local``, the home folder, a
        bound venv): the dataset and every real folder or file it links to (an
        ``evaluation_suite`` that is a symlink elsewhere), the gold folder, the zips ``setup``
        placed files from and gold zips beside the dataset, every runs folder and every
        dataset's gold folder this machine used (:mod:`.known`: another copy of the dataset has
        the same gold), the suite file, spider2local's cache. The one list for both
        guards: the sandbox hides each of them (``AgentContext.off_limits``, each given and real
        path) and the scan (:meth:`protected`) calls a task suspect that names one."""
        gold = task.gold.db.parent if task.gold is not None else None
        found = (task.dataset_root, gold, *linked_from(task.dataset_root),
                 *gold_zips_beside(task.dataset_root), *known.remembered(known.Kind.SETUP_ZIP),
                 *known.remembered(known.Kind.GOLD_FOLDER),
                 self.runs_dir, *known.remembered(known.Kind.RUNS_FOLDER), self.suite_file,
                 default_cache_dir())
        return tuple(dict.fromkeys(Path(p) for p in found if p is not None))

    def protected(self, task: TaskSpec, workspace: Path, project: Path,
                  artifacts: Path) -> Protected:
        return Protected.for_task(
            workspace=workspace, cwd=project, dataset_root=task.dataset_root,
            gold=task.gold.db if task.gold is not None else None, start_db=task.start_db,
            runs_dir=self.runs_dir, suite_file=self.suite_file, cache_dir=default_cache_dir(),
            artifacts=artifacts, off_limits=self.off_limits(task))


MAX_WALK = 200_000
"""Entries of a dataset walked at most for its links (the whole Spider2-DBT has some 20,000)."""
GOLD_ZIP = re.compile(r"gold.*\.zip$", re.IGNORECASE)
"""Upstream's ``dbt_gold.zip`` and the names people give their copies."""


@functools.lru_cache(maxsize=16)
def linked_from(root: Path) -> tuple[Path, ...]:
    """The real paths of every symlink under ``root`` that leads outside it (walked
    iteratively, links never followed): where its gold or eval file really are. Cached per
    root: every task of a run asks, and the dataset does not move during a run."""
    real_root = Path(os.path.realpath(root))
    found: list[Path] = []
    todo, seen = [root], 0
    while todo and seen < MAX_WALK:
        folder = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if entry.is_symlink():
                target = Path(os.path.realpath(entry.path))
                if not is_within(target, real_root):
                    found.append(target)
            elif entry.is_dir(follow_symlinks=False):
                todo.append(Path(entry.path))
    return tuple(dict.fromkeys(found))


def gold_zips_beside(root: Path) -> list[Path]:
    """Gold zips in the dataset root or the folder that holds it: downloaded and unzipped by
    hand, never through ``setup`` (which records its own)."""
    found = []
    for folder in (root, root.parent):
        try:
            found += [Path(e.path) for e in os.scandir(folder)
                      if GOLD_ZIP.search(e.name) and e.is_file()]
        except OSError:
            continue
    return found

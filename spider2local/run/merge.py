"""``spider2local merge RUN_DIR... --into RUN_DIR``: join the folders of a sharded run.

A CI matrix runs ``run --shard K/N`` once per machine, all under one run id; each job uploads
its run folder and one job merges them. The merged folder is an ordinary run: ``report`` and
``score RUN_DIR`` read it, and ``run --run-id`` resumes it (infrastructure errors re-run).

Only runs of one experiment are joined: those that a resume would accept as one run (the same
agent, model, suite, prompts, skills, limits and isolation, :func:`.resume.same_experiment`)
over the same dataset. ``--force`` joins others anyway and records what differed in run.json.
A task finished in two sources keeps the result that finished last, and the merge says so.
Sources are only read; one still being written by a run is refused.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spider2local.core.layout import LOCK, MERGING, RESULT, WORKSPACE_RECORD
from spider2local.core.results import TaskResult
from spider2local.exceptions import UserError
from spider2local.integrity import guard
from spider2local.run import cut
from spider2local.run.folder import RunFolder
from spider2local.run.lock import in_use, reading, run_lock
from spider2local.run.manifest import (
    MergedSource,
    RunManifest,
    SelectedTask,
    SelectionRequest,
    now_iso,
)
from spider2local.run.resume import same_experiment


@dataclass(frozen=True)
class Merged:
    into: RunFolder
    kept: Mapping[tuple[str, int], str]
    """(task id, trial) -> the source folder whose result was kept."""
    notes: tuple[str, ...]
    """What a person must know: tasks found twice (which one was kept), forced differences."""


def _scorer(manifest: RunManifest) -> Mapping[str, str] | None:
    found = manifest.integrity
    return None if found is None else found.sources


def experiment_differences(first: RunManifest, other: RunManifest) -> list[str]:
    """``"name X (first run: Y)"`` for each setting of :func:`same_experiment` that differs,
    and the package's sources the integrity guard fingerprinted (the scorer's code)."""
    found = [f"{name} {get(other)} (first run: {get(first)})"
             for name, get in same_experiment() if get(first) != get(other)]
    if _scorer(first) != _scorer(other):
        found.append("scorer sources (package code) differ")
    seals = {_unsealed(first), _unsealed(other)}
    if seals == {True, False}:  # said in words: the isolation line alone reads as a detail
        found.append("an unsealed run (isolation none: its agents could reach gold and the "
                     "scorer) joined to a sealed one")
    return found


def _unsealed(manifest: RunManifest) -> bool:
    """Made without isolation: the one reading of what a run recorded
    (:attr:`RunManifest.isolation_mode`, which every report uses too), so a run that recorded
    none is unsealed here as it is in its report."""
    return manifest.isolation_mode == "none"


def _integrity(manifests: Sequence[RunManifest], sources: Sequence[RunFolder],
               kept: Mapping[str, set[str]]) -> guard.Fingerprints | None:
    """The guard's fingerprints of every task (``score RUN_DIR`` checks each task's gold
    against them), each from the source whose result was kept; ``None`` when a source has
    none (a run made before fingerprints existed)."""
    recorded = [m.integrity for m in manifests]
    if any(r is None for r in recorded):
        return None
    tasks: dict[str, guard.TaskFingerprint] = {}
    for folder, prints in zip(sources, recorded, strict=True):
        assert prints is not None
        for tid, fingerprint in prints.tasks.items():
            if tid not in tasks or str(folder.root) in kept.get(tid, set()):
                tasks[tid] = fingerprint
    first = recorded[0]
    assert first is not None
    return guard.Fingerprints(first.sources, tasks)


def _when(result: TaskResult) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(result.finished_at)
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _check_sources(sources: Sequence[RunFolder], into: RunFolder) -> list[RunManifest]:
    manifests = []
    seen: set[Path] = set()
    for folder in sources:
        root = folder.root.resolve()
        if root == into.root.resolve():
            raise UserError("a source is also the --into folder", path=folder.root,
                            fix="merge into a new folder")
        if root in seen:
            raise UserError("run folder given twice", path=folder.root, fix="name it once")
        seen.add(root)
        manifest = folder.read_manifest()
        if manifest is None:
            raise UserError("no run.json here", path=folder.root,
                            fix="pass folders made by `spider2local run`")
        manifests.append(manifest)
    return manifests


def _check_into(into: RunFolder) -> None:
    if _left_by_a_killed_merge(into):
        shutil.rmtree(into.root)  # a merge writes only what it copies: started again whole
    if into.root.exists() and (not into.root.is_dir() or any(into.root.iterdir())):
        raise UserError("the --into folder exists and is not empty", path=into.root,
                        fix="merge into a new folder (the sources are left as they are)")


def _left_by_a_killed_merge(into: RunFolder) -> bool:
    """``into`` holds the mark of a merge that never finished (kill -9, power loss), no
    run.json, and no process holds its lock: the next merge into it starts over instead of
    refusing a folder the user never made (and a resume would find no run in it)."""
    root = into.root
    return (root.is_dir() and not root.is_symlink() and (root / MERGING).is_file()
            and not into.manifest_path.exists() and not in_use(into))


def _not_copied(folder: str, names: list[str]) -> set[str]:
    """What a merge leaves behind: our bookkeeping files, and anything but plain files and
    folders. A source may be a downloaded artifact: ``copytree`` follows links, so a link to
    ``/`` once copied the whole file system into the merged run (and a link kept as a link
    would lead the report outside); a FIFO made the merge fail with a traceback."""
    skipped = {RESULT, WORKSPACE_RECORD, LOCK, MERGING}
    for name in names:
        try:
            mode = (Path(folder) / name).lstat().st_mode
        except OSError:
            skipped.add(name)
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            skipped.add(name)
    return skipped


def _copy_trial(source: RunFolder, into: RunFolder, key: tuple[str, int]) -> None:
    """The trial's folder, result.json last (its presence means "finished", also here)."""
    target = into.trial_dir(*key)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source.trial_dir(*key), target, ignore=_not_copied)
    partial = target / f".{RESULT}.merge"
    shutil.copyfile(source.result_path(*key), partial)
    partial.replace(target / RESULT)


def _name(key: tuple[str, int]) -> str:
    return key[0] if key[1] == 1 else f"{key[0]}#{key[1]}"


def _common(values: Sequence[Any]) -> Any:
    return values[0] if all(v == values[0] for v in values) else None


def merged_manifest(manifests: Sequence[RunManifest], sources: Sequence[RunFolder],
                    into: RunFolder, kept: Mapping[tuple[str, int], str],
                    forced: Sequence[str]) -> RunManifest:
    """The first source's manifest (versions, settings, hashes, anything recorded), with the
    union of the selected tasks (each entry from a source whose result was kept), the
    earliest start, the last end, every session, and the most trials any source asked for
    (the pieces of a sharded run ask for the same); ``merged_from`` names the sources."""
    by_task: dict[str, set[str]] = {}
    for (tid, _), root in kept.items():
        by_task.setdefault(tid, set()).add(root)
    tasks: dict[str, SelectedTask] = {}
    for folder, manifest in zip(sources, manifests, strict=True):
        for entry in manifest.tasks:
            if entry.id not in tasks or str(folder.root) in by_task.get(entry.id, set()):
                tasks[entry.id] = entry
    starts = [m.started_at for m in manifests if m.started_at]
    ends = [m.finished_at for m in manifests]
    sessions = sorted((replace(s, run=str(f.root)) for f, m in zip(sources, manifests,
                                                                   strict=True)
                       for s in m.sessions), key=lambda s: str(s.started_at))
    requests = [m.selection or SelectionRequest() for m in manifests]
    request = SelectionRequest(ids=_common([r.ids for r in requests]),
                               subset=_common([r.subset for r in requests]),
                               limit=_common([r.limit for r in requests]))  # shard: none
    trials = max(m.trials for m in manifests)
    return replace(
        manifests[0], run_id=into.run_id, tasks=tuple(tasks[tid] for tid in sorted(tasks)),
        settings={**manifests[0].settings, "trials": trials} if trials > 1
        else manifests[0].settings,
        not_run_for_budget=sum(m.not_run_for_budget or 0 for m in manifests) or None,
        started_at=min(starts) if starts else None,
        finished_at=max(e for e in ends if e) if ends and all(ends) else None,
        interrupted=any(m.interrupted for m in manifests), sessions=tuple(sessions),
        selection=request, merged_at=now_iso(),
        merged_from=tuple(MergedSource(str(f.root), f.run_id,
                                       tuple(_name(k) for k, src in sorted(kept.items())
                                             if src == str(f.root)))
                          for f in sources),
        merge_differences=tuple(forced), integrity=_integrity(manifests, sources, by_task))


def merge_runs(sources: Sequence[RunFolder], into: RunFolder, *, force: bool = False) -> Merged:
    """Join ``sources`` into the new run folder ``into`` (see the module docstring)."""
    if not sources:
        raise UserError("nothing to merge", fix="name the run folders to merge")
    with contextlib.ExitStack() as reads:  # no source may change while it is read and copied
        for folder in dict.fromkeys(sources):
            reads.enter_context(reading(folder))
        return _merge(sources, into, force)


def _merge(sources: Sequence[RunFolder], into: RunFolder, force: bool) -> Merged:
    manifests = _check_sources(sources, into)
    differing = [f"{folder.root}: {diff}" for folder, manifest in zip(sources[1:], manifests[1:],
                                                                      strict=True)
                 for diff in experiment_differences(manifests[0], manifest)]
    if differing and not force:
        raise UserError("these runs are not one experiment: " + "; ".join(differing),
                        path=sources[0].root,
                        fix="merge runs made with the same settings, or pass --force")
    _check_into(into)
    chosen: dict[tuple[str, int], tuple[RunFolder, TaskResult]] = {}
    notes = [f"forced: {diff}" for diff in differing]
    for folder in sources:
        for key, result in folder.trial_results().items():
            previous = chosen.get(key)
            if previous is None:
                chosen[key] = (folder, result)
                continue
            newer = (folder, result) if _when(result) >= _when(previous[1]) else previous
            older = previous[0] if newer[0] is folder else folder
            notes.append(f"{_name(key)}: finished in {previous[0].root} and {folder.root}; "
                         f"kept {newer[0].root} (finished later), dropped {older.root}")
            chosen[key] = newer
    into.create()
    kept = {key: str(folder.root) for key, (folder, _) in chosen.items()}
    try:
        with run_lock(into):
            (into.root / MERGING).write_text("a merge is writing this folder\n",
                                             encoding="utf-8")
            for key, (folder, _) in sorted(chosen.items()):
                _copy_trial(folder, into, key)
            for folder in sources:  # money spent in any source stays spent (cut.py)
                for attempt in cut.read(folder.root):
                    cut.record(into.root, attempt)
            into.write_manifest(merged_manifest(manifests, sources, into, kept, differing))
            (into.root / MERGING).unlink()
    except (OSError, shutil.Error, UserError) as exc:
        # A full disk under --into: the half-made folder (new or empty before, see
        # _check_into) would only be refused by the next merge; the sources are untouched.
        shutil.rmtree(into.root, ignore_errors=True)
        if isinstance(exc, UserError):
            raise
        raise UserError(f"cannot write the merged run: {_why(exc)}", path=into.root,
                        fix="free space there, or merge into another folder (the sources are "
                            "untouched)") from None
    return Merged(into, kept, tuple(notes))


def _why(exc: OSError | shutil.Error) -> str:
    """The OS's words for a failed copy: copytree gathers its errors into one shutil.Error
    whose message lists every file."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list):
        first = exc.args[0][0] if exc.args[0] else None
        return str(first[2]) if isinstance(first, tuple) and len(first) == 3 else "copy failed"
    return exc.strerror or str(exc)

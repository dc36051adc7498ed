"""The run manifest (``run.json``) as a frozen record, with a schema version.

Written at the start of every invocation (so a killed run still says what it was), finished at
its end, built again by ``merge`` from its sources, and read by the report, resume, merge and
re-score. It used to be a dict built in two places and read with ``.get`` chains everywhere;
now :meth:`RunManifest.from_json` checks the types once (:func:`manifest_problem`: a
hand-edited or truncated file is one line naming it) and every reader gets typed fields.

Old files stay readable: every version written so far (1: no ``integrity``; 2: with it) reads,
keys a version did not write take their defaults, and keys this version does not know (a newer
spider2local) are kept in :attr:`RunManifest.extra` and written back unchanged.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from spider2local import __version__, resources
from spider2local.core.codec import RecordError, dump, load, tolerant
from spider2local.integrity.guard import Fingerprints
from spider2local.safepath import name_problem
from spider2local.sandbox.isolation import IsolationRecord

MANIFEST_VERSION = 3
"""3: trials (``settings.trials``; results addressed by task and trial), the run's budget
(``settings.max_cost_usd``, ``spent_usd``, ``not_run_for_budget``) and ``reruns``; a file of
version 2 or older is a 1-trial run without a budget.
2: ``integrity`` holds the fingerprints taken before any agent started (absent in 1)."""
READABLE_VERSIONS = (None, 1, 2, MANIFEST_VERSION)
"""``None``: a file without the key (hand-written, or from the first releases)."""
DEPENDENCIES = ("anyio", "claude-agent-sdk", "duckdb", "dbt-core", "dbt-duckdb", "pandas",
                "numpy", "click", "libfaketime")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


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


def resource_hash(name: str) -> str | None:
    try:
        return tree_sha256(resources.resource_dir(name))
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class SelectedTask:
    """What the manifest records about one selected task (enough for a report from disk)."""

    id: str
    fake_date: str = ""
    tables: int = 0
    """Number of graded tables (0 when the task has no evaluation)."""
    skipped: str | None = None
    """Why the task cannot run; ``None`` when it is run."""
    free: bool | None = None
    """Whether the untouched start database already passes (measured at the run's start,
    :func:`spider2local.audit.tasks.free_passes`); ``None`` when unknown or not measured."""



@tolerant
@dataclass(frozen=True)
class SelectionRequest:
    """How the tasks were chosen: the ``run`` options that choose them, as given
    (:data:`spider2local.run.resume.SELECTION_OPTIONS`); a resume re-applies them to an empty
    run, a merge keeps what its sources share."""

    ids: tuple[str, ...] | None = None
    """The task ids named on the command line (``None``: none named)."""
    subset: str | None = None
    shard: str | None = None
    """``K/N``."""
    limit: int | None = None

    def options(self) -> dict[str, Any]:
        """By option name, as the command line gives them (ids a list)."""
        return {"ids": None if self.ids is None else list(self.ids), "subset": self.subset,
                "shard": self.shard, "limit": self.limit}


@dataclass(frozen=True)
class Session:
    """One invocation of the run (``run``, a resume): when it started and ended, and how."""

    started_at: str | None = None
    finished_at: str | None = None
    interrupted: bool | None = None
    argv: tuple[str, ...] | None = None
    run: str | None = None
    """For a merged run: the source folder the session ran in."""
    witness: Mapping[str, Any] | None = None
    """Under ``--isolation none``: the unsealed witness of this invocation (``state`` on or
    off, ``reason``, the files ``watched``, events while no agent worked: ``unattributed``;
    :mod:`spider2local.integrity.witness`). Absent where the agent was sandboxed."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"started_at": self.started_at, "finished_at": self.finished_at,
                                "interrupted": self.interrupted,
                                "argv": None if self.argv is None else list(self.argv)}
        if self.run is not None:
            data["run"] = self.run
        if self.witness is not None:
            data["witness"] = dict(self.witness)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Session:
        argv = data.get("argv")
        witness = data.get("witness")
        return cls(_str(data.get("started_at")), _str(data.get("finished_at")),
                   data.get("interrupted") if isinstance(data.get("interrupted"), bool) else None,
                   tuple(str(a) for a in argv) if isinstance(argv, list) else None,
                   _str(data.get("run")), dict(witness) if isinstance(witness, dict) else None)


@dataclass(frozen=True)
class Rerun:
    """One ``run --rerun``: when, what was asked, which tasks, and the ``_history/<n>`` folder
    their earlier trials went to (``None``: nothing was kept)."""

    at: str
    history: str | None
    tasks: tuple[str, ...]
    request: tuple[str, ...] = ()


@dataclass(frozen=True)
class MergedSource:
    """One source of a merged run: its folder, its id, and the trials taken from it."""

    path: str
    run_id: str
    kept: tuple[str, ...] = ()


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class RunManifest:
    """What ``run.json`` holds (see the module docstring)."""

    run_id: str = ""
    agent: str | None = None
    model: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Every recorded run setting, by the settings table's names
    (:meth:`spider2local.run.settings.RunSettings.to_json`)."""
    versions: Mapping[str, str | None] = field(default_factory=dict)
    suite_path: str | None = None
    suite_sha256: str | None = None
    dataset: str | None = None
    """The dataset root the run was made on."""
    dataset_sha256: str | None = None
    """The fingerprint of the dataset's task and evaluation files (the same on any machine)."""
    prompts_sha256: str | None = None
    skills_sha256: str | None = None
    tasks: tuple[SelectedTask, ...] = ()
    """Every task any invocation selected, by id."""
    denominators: Mapping[str, int] | None = None
    """The dataset audit's counts the report divides by."""
    started_at: str | None = None
    finished_at: str | None = None
    """``None`` while an invocation runs, or after one was killed."""
    interrupted: bool | None = None
    sessions: tuple[Session, ...] = ()
    isolation: IsolationRecord | None = None
    """How the agent was isolated (``requested``, ``mode``, ``reason``): recorded once, here
    (older runs also wrote the mode under ``settings``: see :meth:`setting`); ``None`` for a
    run that recorded nothing, which had no isolation. Whether a run was sealed is read as
    :attr:`isolation_mode` only."""
    selection: SelectionRequest | None = None
    """How the tasks were chosen (``ids``, ``subset``, ``shard``, ``limit``)."""
    agent_options: Mapping[str, str] = field(default_factory=dict)
    integrity: Fingerprints | None = None
    """The fingerprints taken before any agent started; ``None`` for a run made before they
    existed (or an entry no reader can use: :meth:`Fingerprints.from_json`)."""
    merged_at: str | None = None
    merged_from: tuple[MergedSource, ...] = ()
    merge_differences: tuple[str, ...] = ()
    not_run_for_budget: int | None = None
    """Trials the last invocation left unstarted because the budget was reached."""
    spent_usd: float | None = None
    """What the run's finished trials cost, as the last invocation counted it."""
    reruns: tuple[Rerun, ...] = ()
    """Each ``run --rerun``: when, which tasks, and the ``_history/<n>`` their trials went to."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys this version does not know (a newer writer's), kept as they were."""
    manifest_version: int = MANIFEST_VERSION

    # -- reading -----------------------------------------------------------------------------
    def setting(self, name: str) -> Any:
        """The recorded value of run setting ``name``: under ``settings``, else the manifest's
        own field of that name (``agent``, ``model``); ``None`` when absent. ``isolation``:
        runs written now record it once, as :attr:`isolation`, and its mode answers; older
        runs also kept the mode under ``settings``, which answers for them as it always did
        (a resume compares what the run was made with)."""
        if name in self.settings:
            return self.settings[name]
        if name == "isolation":
            return None if self.isolation is None else self.isolation.mode.value
        return getattr(self, name, None) if name in _FIELD_NAMES else None

    @property
    def trials(self) -> int:
        """Trials per task the run asked for (1 for a run made before trials existed)."""
        value = self.settings.get("trials")
        return value if isinstance(value, int) and not isinstance(value, bool) \
            and value >= 1 else 1

    @property
    def task_ids(self) -> tuple[str, ...]:
        return tuple(t.id for t in self.tasks)

    def task(self, task_id: str) -> SelectedTask | None:
        return next((t for t in self.tasks if t.id == task_id), None)

    @property
    def isolation_mode(self) -> str:
        """The isolation mode the run recorded; ``none`` for runs that recorded nothing, which
        had no isolation."""
        return "none" if self.isolation is None else self.isolation.mode.value

    @property
    def was_interrupted(self) -> bool:
        """Whether the last invocation was stopped: finished as interrupted (a signal), or
        never finished at all (kill -9, power loss: ``finished_at`` still empty)."""
        return bool(self.interrupted) or self.finished_at is None

    # -- writing ------------------------------------------------------------------------------
    @classmethod
    def begin(cls, *, run_id: str, agent: str, settings: Mapping[str, Any], suite_path: Path,
              suite_sha256: str, dataset_root: Path, tasks: Iterable[SelectedTask],
              previous: RunManifest | None, argv: list[str] | None = None,
              prompts_dir: Path | None = None, skills_dir: Path | None = None,
              denominators: Mapping[str, int] | None = None) -> RunManifest:
        """The run.json written at the start of an invocation. A resumed run keeps the first
        invocation's ``started_at`` and appends to ``sessions`` so every restart is visible.
        ``prompts_dir`` / ``skills_dir``: the kit used instead of the bundled one (its hashes
        are recorded, so a resume with another kit is refused like one with other bundled
        files). ``denominators`` (the dataset audit's counts) are what the report divides by."""
        started = now_iso()
        sessions = (*(previous.sessions if previous else ()),
                    Session(started, argv=None if argv is None else tuple(argv)))
        return cls(
            run_id=run_id, agent=agent, model=settings.get("model"), settings=dict(settings),
            versions=dependency_versions(), suite_path=str(suite_path),
            suite_sha256=suite_sha256, dataset=str(dataset_root),
            prompts_sha256=tree_sha256(prompts_dir) if prompts_dir else resource_hash("prompts"),
            skills_sha256=tree_sha256(skills_dir) if skills_dir else resource_hash("skills"),
            tasks=tuple(tasks),
            denominators=dict(denominators) if denominators is not None else None,
            started_at=(previous.started_at or started) if previous else started,
            sessions=sessions)

    def witnessed(self, witness: Mapping[str, Any]) -> RunManifest:
        """The same manifest with this invocation's (the last session's) witness record."""
        sessions = list(self.sessions)
        if sessions:
            sessions[-1] = replace(sessions[-1], witness=dict(witness))
        return replace(self, sessions=tuple(sessions))

    def finish(self, *, interrupted: bool) -> RunManifest:
        """The same manifest with end times set (written once the invocation ends)."""
        done = now_iso()
        sessions = list(self.sessions)
        if sessions:
            sessions[-1] = replace(sessions[-1], finished_at=done, interrupted=interrupted)
        return replace(self, finished_at=done, interrupted=interrupted, sessions=tuple(sessions))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "manifest_version": self.manifest_version, "run_id": self.run_id,
            "agent": self.agent, "model": self.model, "settings": dict(self.settings),
            "versions": dict(self.versions),
            "suite": {"path": self.suite_path, "sha256": self.suite_sha256},
            "dataset": self.dataset, "prompts_sha256": self.prompts_sha256,
            "skills_sha256": self.skills_sha256, "tasks": [dump(t) for t in self.tasks]}
        if self.denominators is not None:
            data["denominators"] = dict(self.denominators)
        data.update(started_at=self.started_at, finished_at=self.finished_at,
                    sessions=[s.to_json() for s in self.sessions])
        optional = {"interrupted": self.interrupted,
                    "isolation": None if self.isolation is None else dump(self.isolation),
                    "dataset_sha256": self.dataset_sha256,
                    "selection": None if self.selection is None else dump(self.selection),
                    "agent_options": dict(self.agent_options) if self.agent_options else None,
                    "integrity": None if self.integrity is None else self.integrity.to_json(),
                    "merged_at": self.merged_at,
                    "not_run_for_budget": self.not_run_for_budget,
                    "spent_usd": self.spent_usd,
                    "reruns": [dump(r) for r in self.reruns] if self.reruns else None}
        data.update({k: v for k, v in optional.items() if v is not None})
        if self.merged_at is not None:
            data["merged_from"] = [dump(m) for m in self.merged_from]
            data["merge_differences"] = list(self.merge_differences)
        data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    @classmethod
    def from_json(cls, data: Any) -> RunManifest:
        """Read any version in :data:`READABLE_VERSIONS`; raises :class:`ValueError` with one
        phrase for a file that is not a manifest of ours (see :func:`manifest_problem`)."""
        problem = manifest_problem(data)
        if problem is not None:
            raise ValueError(problem)
        suite = data.get("suite") or {}
        known = {"manifest_version", "run_id", "agent", "model", "settings", "versions",
                 "suite", "dataset", "prompts_sha256", "skills_sha256", "tasks",
                 "denominators", "started_at", "finished_at", "sessions", "interrupted",
                 "isolation", "dataset_sha256", "selection", "agent_options", "integrity",
                 "merged_at", "merged_from", "merge_differences", "not_run_for_budget",
                 "spent_usd", "reruns"}
        counts = data.get("denominators")
        settings = dict(data.get("settings") or {})
        try:
            isolation = _isolation(data.get("isolation"))
            merged_from = tuple(load(MergedSource, m) for m in data.get("merged_from") or ())
            tasks = tuple(load(SelectedTask, t) for t in data.get("tasks") or ())
            reruns = tuple(load(Rerun, r) for r in data.get("reruns") or ())
            recorded = data.get("selection")
            selection = load(SelectionRequest, recorded) if isinstance(recorded, dict) else None
        except RecordError as err:
            raise ValueError(str(err)) from None
        return cls(
            run_id=str(data.get("run_id") or ""), agent=data.get("agent"),
            model=data.get("model"), settings=settings,
            versions=dict(data.get("versions") or {}),
            suite_path=_str(suite.get("path")), suite_sha256=_str(suite.get("sha256")),
            dataset=data.get("dataset"), dataset_sha256=_str(data.get("dataset_sha256")),
            prompts_sha256=_str(data.get("prompts_sha256")),
            skills_sha256=_str(data.get("skills_sha256")),
            tasks=tasks,
            denominators=dict(counts) if isinstance(counts, dict) else None,
            started_at=data.get("started_at"), finished_at=data.get("finished_at"),
            interrupted=data.get("interrupted") if isinstance(data.get("interrupted"), bool)
            else None,
            sessions=tuple(Session.from_json(s) for s in data.get("sessions") or ()),
            isolation=isolation,
            selection=selection,
            agent_options={str(k): str(v) for k, v in (data.get("agent_options") or {}).items()}
            if isinstance(data.get("agent_options"), dict) else {},
            integrity=Fingerprints.from_json(data.get("integrity")),
            merged_at=_str(data.get("merged_at")),
            merged_from=merged_from,
            merge_differences=tuple(str(d) for d in data.get("merge_differences") or ()),
            not_run_for_budget=_count(data.get("not_run_for_budget")),
            spent_usd=float(data["spent_usd"]) if isinstance(data.get("spent_usd"), (int, float))
            and not isinstance(data.get("spent_usd"), bool) else None,
            reruns=reruns,
            extra={k: v for k, v in data.items() if k not in known},
            manifest_version=MANIFEST_VERSION)


_FIELD_NAMES = frozenset(f.name for f in fields(RunManifest))


def _isolation(recorded: Any) -> IsolationRecord | None:
    """run.json's isolation in any shape a version wrote: the record, or a bare mode (early
    files). The mode older versions also wrote under ``settings`` does not make a record: a
    run that recorded no ``isolation`` had none (its report has always said so, and merge
    agrees)."""
    if recorded is None:
        return None
    if isinstance(recorded, str):
        recorded = {"mode": recorded}
    try:
        return load(IsolationRecord, recorded)
    except RecordError as err:
        raise RecordError(f"isolation: {err}") from None


_MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "agent": (str, type(None)), "model": (str, type(None)),
    "settings": (dict,), "versions": (dict,), "suite": (dict,), "dataset": (str, type(None)),
    "tasks": (list,), "sessions": (list,), "started_at": (str, type(None)),
    "finished_at": (str, type(None)), "denominators": (dict,),
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
    version = data.get("manifest_version")
    if version not in READABLE_VERSIONS:
        return f"manifest_version {version!r} is not one this spider2local reads " \
               f"({', '.join(str(v) for v in READABLE_VERSIONS if v is not None)})"
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

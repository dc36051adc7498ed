"""Resuming a run: which settings must match the first invocation, and what run.json keeps.

A run folder's results must mean one thing. Resuming with another agent, model, suite file,
prompts, skills or limits would mix verdicts of two different experiments under one pass rate,
so the resume is refused with the differences spelled out; what the user leaves out is
remembered (``run --run-id X`` alone resumes with the options run.json recorded:
:func:`remembered`). The isolation compared is the one actually used (``auto`` resolves per
machine): a run made without isolation (or before it was recorded) cannot be continued in a
sandbox, nor the reverse. Tasks selected by earlier invocations stay in the manifest (the
union), so the report still shows them. Which results a resume keeps is :func:`is_finished`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from spider2local.core.results import ErrorKind, Status, TaskResult
from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest, SelectedTask, SelectionRequest
from spider2local.suite import options

_Getter = Callable[[RunManifest], Any]


def _compared(setting: options.Setting) -> _Getter:
    return lambda m: setting.compare_value(m.setting(setting.name))


def _uses(agent: str | None, capability: str) -> bool:
    """Does ``agent`` read that part of the kit? An agent that cannot be found now (a plugin
    since uninstalled) is taken to read it all: its hashes are compared as recorded."""
    from spider2local.agents.registry import capabilities
    from spider2local.exceptions import Spider2LocalError

    try:
        return bool(getattr(capabilities(agent or ""), capability))
    except Spider2LocalError:
        return True


def _kit(field: str, capability: str) -> _Getter:
    """A kit hash as it bears on the run: ``None`` for an agent that does not read that part
    of the kit (the reference and noop agents read no prompt: editing one must not make their
    runs impossible to resume or merge)."""
    return lambda m: getattr(m, field) if _uses(m.agent, capability) else None


KIT: tuple[tuple[str, _Getter], ...] = (
    ("suite file hash", lambda m: m.suite_sha256),
    ("prompts hash", _kit("prompts_sha256", "model")),
    ("skills hash", _kit("skills_sha256", "skills")),
)
"""What a resume must keep besides the settings table's must-match ones: the files that
shape the agent's behaviour, by hash (each only for an agent that reads it)."""


def must_match() -> tuple[tuple[str, _Getter], ...]:
    """What a resume must keep, as (name shown to the user, how to read it from run.json):
    every :attr:`~spider2local.suite.options.Resume.MUST_MATCH` setting of the table, and the
    kit's hashes."""
    table = options.with_rule(options.Resume.MUST_MATCH)
    first = [s for s in table if s.name in ("agent", "model")]
    rest = [s for s in table if s.name not in ("agent", "model")]
    return (*((s.name, _compared(s)) for s in first), *KIT,
            *((s.name, _compared(s)) for s in rest))


def dataset_identity(manifest: RunManifest) -> Any:
    """Which dataset a run scored against: the fingerprint of its task and evaluation files
    (the same on every machine), or its path for a run.json written before it was recorded."""
    return manifest.dataset_sha256 or manifest.dataset


def same_experiment() -> tuple[tuple[str, _Getter], ...]:
    """What two runs must share for their verdicts to be joined into one run (``merge``): what
    a resume keeps, and the dataset (a resume reads it from the run itself)."""
    return (*must_match(), ("dataset", dataset_identity))


def differences(previous: RunManifest, current: RunManifest) -> list[str]:
    """``"name X (run made with Y)"`` for every setting that changed."""
    return [f"{name} {get(current)} (run made with {get(previous)})"
            for name, get in must_match() if get(previous) != get(current)]


def check_resumable(previous: RunManifest | None, current: RunManifest,
                    folder: RunFolder) -> None:
    """Refuse to continue ``folder`` with settings that differ from its manifest."""
    if previous is None:
        return
    changed = differences(previous, current)
    if changed:
        raise UserError(f"run {folder.run_id} cannot be resumed with different settings: "
                        + "; ".join(changed), path=folder.root,
                        fix="resume with the same settings, or start a new run with another "
                            "--run-id")


def merged_tasks(previous: RunManifest | None,
                 current: Iterable[SelectedTask]) -> tuple[SelectedTask, ...]:
    """Every task any invocation selected, by id (this invocation's entry wins)."""
    merged = {t.id: t for t in (previous.tasks if previous else ())}
    merged.update({t.id: t for t in current})
    return tuple(merged[tid] for tid in sorted(merged))


def is_finished(result: TaskResult) -> bool:
    """Whether a resume keeps ``result`` (the one rule of what is finished).

    Everything with a result file is finished except a fault of the machine that left no
    verdict (status ``error``, kind ``infrastructure``: a full disk, a locked gold database, an
    API that never answered): nothing was learnt about the agent, so the task runs again once
    the machine is fixed. A verdict reached despite such an error (an API that failed after
    some turns) is kept, as the benchmark scores whatever the agent left.
    """
    return not (result.status is Status.ERROR and result.error is not None
                and result.error.kind is ErrorKind.INFRASTRUCTURE)


SELECTION_OPTIONS = ("ids", "subset", "shard", "limit")
"""The command-line options that choose tasks; given together or remembered together."""


def remembered_settings() -> tuple[options.Setting, ...]:
    """The settings a resume takes from run.json when the command line leaves them out: every
    recorded setting of the table whose rule is not :attr:`~.options.Resume.FREE`."""
    return tuple(s for s in options.recorded() if s.resume is not options.Resume.FREE)


def selection_request(ids: Iterable[str], subset: str | None, shard: str | None,
                      limit: int | None) -> SelectionRequest:
    """How the tasks were chosen, as run.json records it (``selection``)."""
    return SelectionRequest(tuple(ids) or None, subset, shard, limit)


def remembered(previous: RunManifest | None) -> dict[str, Any]:
    """The options of ``run`` that a resume without them takes from run.json, by the name of
    the option (``None``: nothing recorded, the suite's default applies).

    A resume re-selects every task the run selected so far (the union the manifest keeps, so
    a run widened by an earlier resume stays whole); an empty run re-applies the request that
    made it empty (ids ``()`` would mean "every task"). The isolation is the mode the run
    used, which a resume must keep anyway; an agent that needed none resolves it again.
    """
    if previous is None:
        return {}
    tasks = sorted(previous.task_ids)
    request = (previous.selection or SelectionRequest()).options()
    selection = ({"ids": tasks, "subset": None, "shard": None, "limit": None} if tasks else
                 {k: request[k] for k in SELECTION_OPTIONS})
    kept = {s.name: s.resume_value(previous.setting(s.name)) for s in remembered_settings()}
    return {**selection, **kept, "replay_dir": previous.agent_options.get("replay_dir")}

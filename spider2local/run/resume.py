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

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.results import ErrorKind, Status, TaskResult

_Getter = Callable[[Mapping[str, Any]], Any]


def _settings(key: str) -> _Getter:
    return lambda m: (m.get("settings") or {}).get(key)


def _sandboxed(mode: Any) -> Any:
    """The isolation as far as verdicts care: "not-needed" (an agent that runs no untrusted
    code) and a manifest from before isolation was recorded both ran without a sandbox, so they
    compare equal to "none"; a reference run made before this field existed stays resumable."""
    return "none" if mode in (None, "none", "not-needed") else mode


MUST_MATCH: tuple[tuple[str, _Getter], ...] = (
    ("agent", lambda m: m.get("agent")),
    ("model", lambda m: m.get("model")),
    ("suite file hash", lambda m: (m.get("suite") or {}).get("sha256")),
    ("prompts hash", lambda m: m.get("prompts_sha256")),
    ("skills hash", lambda m: m.get("skills_sha256")),
    ("timeout", _settings("timeout")),
    ("max_turns", _settings("max_turns")),
    ("thinking_budget", _settings("thinking_budget")),
    ("verify_rounds", _settings("verify_rounds")),
    ("max_budget_usd", _settings("max_budget_usd")),
    ("templates", lambda m: bool((m.get("settings") or {}).get("templates"))),
    ("isolation", lambda m: _sandboxed((m.get("settings") or {}).get("isolation"))),
)
"""What a resume must keep, as (name shown to the user, how to read it from run.json)."""


def dataset_identity(manifest: Mapping[str, Any]) -> Any:
    """Which dataset a run scored against: the fingerprint of its task and evaluation files
    (the same on every machine), or its path for a run.json written before it was recorded."""
    return manifest.get("dataset_sha256") or manifest.get("dataset")


SAME_EXPERIMENT: tuple[tuple[str, _Getter], ...] = (*MUST_MATCH, ("dataset", dataset_identity))
"""What two runs must share for their verdicts to be joined into one run (``merge``): what a
resume keeps, and the dataset (a resume reads it from the run itself)."""


def differences(previous: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """``"name X (run made with Y)"`` for every setting that changed."""
    return [f"{name} {get(current)} (run made with {get(previous)})"
            for name, get in MUST_MATCH if get(previous) != get(current)]


def check_resumable(previous: Mapping[str, Any] | None, current: Mapping[str, Any],
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


def merged_tasks(previous: Mapping[str, Any] | None,
                 current: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every task any invocation selected, by id (this invocation's entry wins)."""
    earlier = previous.get("tasks") if previous else None
    merged = {t["id"]: dict(t) for t in earlier or [] if isinstance(t, dict) and "id" in t}
    merged.update({t["id"]: dict(t) for t in current})
    return [merged[tid] for tid in sorted(merged)]


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
REMEMBERED_SETTINGS = ("jobs", "timeout", "retries", "max_turns", "model", "max_budget_usd",
                       "verify_rounds", "keep", "keep_db", "thinking_budget", "templates",
                       "prompts_dir", "skills_dir", "stage_timeout", "workspace_size")
"""The run settings a resume takes from run.json when the command line leaves them out."""
"""The command-line options that choose tasks; given together or remembered together."""


def selection_request(ids: Iterable[str], subset: str | None, shard: str | None,
                      limit: int | None) -> dict[str, Any]:
    """How the tasks were chosen, as run.json records it (``selection``)."""
    return {"ids": list(ids) or None, "subset": subset, "shard": shard, "limit": limit}


def remembered(previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options of ``run`` that a resume without them takes from run.json, by the name of
    the option (``None``: nothing recorded, the suite's default applies).

    A resume re-selects every task the run selected so far (the union the manifest keeps, so
    a run widened by an earlier resume stays whole); an empty run re-applies the request that
    made it empty (ids ``()`` would mean "every task"). The isolation is the mode the run
    used, which a resume must keep anyway; an agent that needed none resolves it again.
    """
    if previous is None:
        return {}
    settings = previous.get("settings") or {}
    tasks = sorted(t["id"] for t in previous.get("tasks") or [])
    request = previous.get("selection") or {}
    selection = ({"ids": tasks, "subset": None, "shard": None, "limit": None} if tasks else
                 {k: request.get(k) for k in SELECTION_OPTIONS})
    mode = settings.get("isolation")
    options = previous.get("agent_options") or {}
    return {
        **selection,
        "agent": previous.get("agent"),
        "replay_dir": options.get("replay_dir"),
        "isolation": mode if mode in ("namespace", "none") else None,
        **{key: settings.get(key) for key in REMEMBERED_SETTINGS},
    }

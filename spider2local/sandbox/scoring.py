"""Score in a reader sandbox: :func:`score_database` run by ``python -I -m
spider2local.sandbox.scoring`` inside a sandbox holding only the result and the gold file
(:mod:`spider2local.sandbox.readers`). Every scoring of an agent's database goes through here:
the runner, ``spider2local score`` (a file or a run folder) and the re-score.

The result's views are the agent's SQL, run by the scorer: inside this sandbox a view over
``read_duckdb('<gold>')``, ``glob('/...')`` or ``read_text`` of a host file reads nothing of the
host even if DuckDB let it through (it does not: :mod:`spider2local.db.connect`). The gold file
is in the sandbox because it is scored against; the result's connection cannot name it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.core.codec import dump, load
from spider2local.core.verdicts import TaskScore
from spider2local.evaluation.params import EvalParams

MODULE = "spider2local.sandbox.scoring"
SCORE_TIMEOUT: float | None = None
"""No deadline of its own: the official comparator is slow on big tables (78 s measured) and
the caller's deadline, when it has one, cancels the child (killed with its sandbox)."""


def _request(result: Path, gold: Path, params: EvalParams) -> dict[str, Any]:
    """Absolute paths (links not resolved: gold's views are bound to its name, see
    :func:`~spider2local.sandbox.readers.bound`): the child runs in ``/``, so a relative path
    given on the command line (``score runs/x``) would name nothing there."""
    return {"result": os.path.abspath(result), "gold": os.path.abspath(gold),  # noqa: PTH100
            "params": dataclasses.asdict(params)}


def _files(result: Path, gold: Path, hidden: Iterable[Path]) -> Any:
    return _files_of([result, gold], hidden)


def _files_of(paths: Iterable[Path], hidden: Iterable[Path]) -> Any:
    from spider2local.sandbox.readers import ReaderFiles, bound

    return ReaderFiles(read_only=bound(paths), hidden=tuple(hidden))


def _verdict(answer: dict[str, Any]) -> TaskScore:
    from spider2local.sandbox.reply import result_of

    data = result_of(answer)
    assert isinstance(data, dict)
    return load(TaskScore, data)


async def score_sandboxed(result: Path, gold: Path, params: EvalParams, *,
                          hidden: Iterable[Path] = ()) -> TaskScore:
    """:func:`score_database` in a reader sandbox (raises what it would have raised)."""
    from spider2local.sandbox.readers import ask_reader

    return _verdict(await ask_reader(MODULE, _request(result, gold, params),
                                     _files(result, gold, hidden), timeout=SCORE_TIMEOUT))


def score_sandboxed_sync(result: Path, gold: Path, params: EvalParams, *,
                         hidden: Iterable[Path] = ()) -> TaskScore:
    """:func:`score_sandboxed` from synchronous code (the CLI, the re-score)."""
    from spider2local.sandbox.readers import ask_reader_sync

    return _verdict(ask_reader_sync(MODULE, _request(result, gold, params),
                                    _files(result, gold, hidden), timeout=SCORE_TIMEOUT))


def score_many_sandboxed_sync(items: Sequence[tuple[Path, Path, EvalParams]]
                              ) -> list[TaskScore | Exception]:
    """Score each ``(result, gold, params)`` in one reader sandbox holding those files
    read-only: each item's score, or what scoring it raised. For results that hold no SQL of
    an agent's (``regrade``'s hash-checked copies of graded tables, tables only): one child
    instead of one per trial, as :func:`score_starts_sandboxed` does for start databases."""
    from spider2local.sandbox.readers import ReaderFailed, ask_reader_sync
    from spider2local.sandbox.reply import result_of

    if not items:
        return []
    requests = [_request(result, gold, params) for result, gold, params in items]
    files = _files_of([p for result, gold, _ in items for p in (result, gold)], ())
    found = result_of(ask_reader_sync(MODULE, {"scores": requests}, files,
                                      timeout=SCORE_TIMEOUT))
    if not isinstance(found, list) or len(found) != len(items):
        raise ReaderFailed(f"{MODULE} answered {len(items)} results with nonsense")
    out: list[TaskScore | Exception] = []
    for answer in found:
        try:
            out.append(_verdict(answer))
        except Exception as exc:  # that item's scoring raised, in the child
            out.append(exc)
    return out


@dataclass(frozen=True)
class StartScore:
    """What one untouched start database gives (:func:`score_starts_sandboxed`)."""

    score: TaskScore | None
    error: Exception | None
    """What scoring it raised (``score`` is then ``None``)."""
    snapshot: dict[str, Any] | None
    """Its :class:`~spider2local.db.snapshot.DbSnapshot` data, read in the same child; ``None``
    when it could not be read (the workspace reads its copy then)."""
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    """What each piece of work cost in the child, by the runner's stage it stands for
    (``checkpoint``: opening and snapshotting it; ``score``: scoring it), when it succeeded:
    the base of the task's stage deadlines (:mod:`spider2local.run.deadlines`)."""


async def score_starts_sandboxed(starts: Sequence[tuple[Path, Path, EvalParams]]
                                 ) -> list[StartScore]:
    """Score each ``(start database, gold, params)`` and snapshot the start database, all in
    one reader sandbox holding those files read-only, the dataset's own: a run's free-pass
    baseline. One child for the run instead of one per task: each child is an interpreter
    importing DuckDB and pandas (1.0-1.3 s measured, 2 loaded cores), paid before any agent
    starts. Nothing of an agent is in it, and every file in it is the dataset's, so a start
    database's SQL that reads another task's gold learns nothing the dataset did not hold.
    Raises :class:`~spider2local.sandbox.readers.ReaderFailed` when the child dies (a crash
    on one file loses the batch: the caller scores each alone then)."""
    from spider2local.sandbox.readers import ReaderFailed, ask_reader
    from spider2local.sandbox.reply import result_of

    requests = [{**_request(start, gold, params), "snapshot": _label(start)}
                for start, gold, params in starts]
    files = _files_of([p for start, gold, _ in starts for p in (start, gold)], ())
    found = result_of(await ask_reader(MODULE, {"many": requests}, files,
                                       timeout=SCORE_TIMEOUT))
    if not isinstance(found, list) or len(found) != len(starts):
        raise ReaderFailed(f"{MODULE} answered {len(starts)} start databases with nonsense")
    out = []
    for item in found:
        snapshot = item.get("snapshot")
        seconds = _seconds(item.get("seconds"))
        try:
            out.append(StartScore(_verdict(item["score"]), None,
                                  snapshot if isinstance(snapshot, dict) else None, seconds))
        except Exception as exc:  # that task's scoring raised, in the child: no cost measured
            out.append(StartScore(None, exc, snapshot if isinstance(snapshot, dict) else None,
                                  {k: v for k, v in seconds.items() if k != "score"}))
    return out


def _seconds(raw: Any) -> dict[str, float]:
    """The child's ``seconds``, only non-negative numbers kept (anything else: not measured)."""
    if not isinstance(raw, dict):
        return {}
    return {str(k): float(v) for k, v in raw.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0}


def _label(db: Path) -> str:
    """The name a workspace's copy of ``db`` has: its real file's (links resolved, as the
    workspace's path to the start database is)."""
    return Path(os.path.realpath(db)).name


def _score(request: dict[str, Any]) -> dict[str, Any]:
    from spider2local.evaluation.score import score_database

    raw = request["params"]
    params = EvalParams(gold=str(raw["gold"]),
                        condition_tabs=tuple(raw["condition_tabs"]),
                        condition_cols=tuple(tuple(c) for c in raw["condition_cols"]),
                        ignore_orders=tuple(bool(i) for i in raw["ignore_orders"]))
    return dump(score_database(Path(request["result"]), Path(request["gold"]), params))


def _start(request: dict[str, Any]) -> dict[str, Any]:
    """One start database: its snapshot first (read-only, closed again before the scorer opens
    it), then its score, each answered on its own, with the seconds each took (``seconds``,
    a piece that failed left out: a failure is no measure of the work)."""
    from spider2local.sandbox.reply import answer_of

    t0 = time.monotonic()
    snapshot = _snapshot_data(Path(request["result"]), str(request["snapshot"]))
    t1 = time.monotonic()
    score = answer_of(_score, request)
    t2 = time.monotonic()
    seconds = {"checkpoint": t1 - t0} if snapshot is not None else {}
    if "ok" in score:
        seconds["score"] = t2 - t1
    return {"snapshot": snapshot, "score": score,
            "seconds": {k: round(v, 4) for k, v in seconds.items()}}


def _snapshot_data(db: Path, label: str) -> dict[str, Any] | None:
    from spider2local.db.snapshot import read_snapshot

    try:
        found = read_snapshot(db, label)
    except Exception:  # the workspace snapshots its copy then, and reports what fails there
        return None
    return None if isinstance(found, dict) else dataclasses.asdict(found)


def _job(request: dict[str, Any]) -> Any:
    if "many" in request:
        return [_start(item) for item in request["many"]]
    if "scores" in request:
        from spider2local.sandbox.reply import answer_of

        return [answer_of(_score, item) for item in request["scores"]]
    return _score(request)


if __name__ == "__main__":
    from spider2local.sandbox.reply import serve

    serve(_job)

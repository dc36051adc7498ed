"""Score in a reader sandbox: :func:`score_database` run by ``python -I -m
spider2local.evaluation.sandboxed`` inside a sandbox holding only the result and the gold file
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
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from spider2local.evaluation.params import EvalParams
from spider2local.evaluation.verdicts import TaskScore

MODULE = "spider2local.evaluation.sandboxed"
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
    from spider2local.sandbox.readers import ReaderFiles, bound

    return ReaderFiles(read_only=bound([result, gold]), hidden=tuple(hidden))


def _verdict(answer: dict[str, Any]) -> TaskScore:
    from spider2local.evaluation.serialize import from_json
    from spider2local.sandbox.reply import result_of

    data = result_of(answer)
    assert isinstance(data, dict)
    return from_json(data)


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


def _score(request: dict[str, Any]) -> dict[str, Any]:
    from spider2local.evaluation.score import score_database
    from spider2local.evaluation.serialize import to_json

    raw = request["params"]
    params = EvalParams(gold=str(raw["gold"]),
                        condition_tabs=tuple(raw["condition_tabs"]),
                        condition_cols=tuple(tuple(c) for c in raw["condition_cols"]),
                        ignore_orders=tuple(bool(i) for i in raw["ignore_orders"]))
    return to_json(score_database(Path(request["result"]), Path(request["gold"]), params))


if __name__ == "__main__":
    from spider2local.sandbox.reply import serve

    serve(_score)

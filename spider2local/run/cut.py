"""What attempts cut by an interrupt spent: the money is spent whether or not a result exists.

A trial stopped by Ctrl-C or SIGTERM writes no result (a resume re-runs it), and the resume
empties the trial's folder first (:meth:`~spider2local.run.folder.RunFolder.reset_trial`), so
the tokens and cost of the cut attempt used to be lost: the report under-counted what the run
cost, and ``--max-cost-usd`` let a resumed run spend past its cap. Each cut attempt is now one
line of ``<run>/interrupted.jsonl`` (:data:`~spider2local.core.layout.CUT_ATTEMPTS`), appended
when the cancellation reaches the trial. The report counts them apart from the finished trials
(their cost is not any trial's); the run's budget counts them.

The file is read defensively, like every file in a run folder: an agent could not write it (it
never sees the runs folder), but a person or a full disk can leave a bad line, which is skipped.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spider2local.core.layout import CUT_ATTEMPTS
from spider2local.core.results import Usage

SCHEMA_VERSION = 1
READ_LIMIT = 8 << 20
"""Bytes of the file read at most (a run of 68 tasks x 20 trials cut every time is ~1 MB)."""

_COUNTS = ("turns", "subagent_turns", "input_tokens", "output_tokens", "cache_read_tokens",
           "cache_creation_tokens")
_COSTS = ("cost_usd_reported", "cost_usd_computed")


@dataclass(frozen=True)
class CutAttempt:
    task_id: str
    trial: int
    started_at: str
    stopped_at: str
    usage: Usage = field(default_factory=Usage)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}


def record(run_root: Path, attempt: CutAttempt) -> None:
    """Append one line (a single ``write`` on an ``O_APPEND`` file: two trials cut at once
    never interleave their lines)."""
    line = (json.dumps(attempt.to_json(), sort_keys=True) + "\n").encode()
    fd = os.open(run_root / CUT_ATTEMPTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read(run_root: Path) -> tuple[CutAttempt, ...]:
    """Every well-formed line, in order; none when the file is absent or not a plain file."""
    path = run_root / CUT_ATTEMPTS
    try:
        if path.is_symlink() or not path.is_file():
            return ()
        with path.open("rb") as f:
            raw = f.read(READ_LIMIT)
    except OSError:
        return ()
    found = []
    for line in raw.decode("utf-8", "replace").splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        attempt = _parse(data)
        if attempt is not None:
            found.append(attempt)
    return tuple(found)


def total(attempts: Iterable[CutAttempt]) -> Usage:
    spent = Usage()
    for attempt in attempts:
        spent += attempt.usage
    return spent


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _cost(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _usage(data: object) -> Usage | None:
    if not isinstance(data, Mapping):
        return None
    counts = {k: _count(data.get(k, 0)) for k in _COUNTS}
    costs = {k: None if data.get(k) is None else _cost(data[k]) for k in _COSTS}
    by_model = data.get("by_model", {})
    if None in counts.values() or not isinstance(by_model, Mapping) \
            or any(costs[k] is None and data.get(k) is not None for k in _COSTS):
        return None
    models: dict[str, dict[str, int]] = {}
    for model, tokens in by_model.items():
        if not isinstance(model, str) or not isinstance(tokens, Mapping):
            return None
        parsed = {key: _count(value) for key, value in tokens.items()}
        if not all(isinstance(key, str) for key in parsed) or None in parsed.values():
            return None
        models[model] = {str(key): value or 0 for key, value in parsed.items()}
    n = {k: v or 0 for k, v in counts.items()}
    return Usage(turns=n["turns"], subagent_turns=n["subagent_turns"],
                 input_tokens=n["input_tokens"], output_tokens=n["output_tokens"],
                 cache_read_tokens=n["cache_read_tokens"],
                 cache_creation_tokens=n["cache_creation_tokens"],
                 cost_usd_reported=costs["cost_usd_reported"],
                 cost_usd_computed=costs["cost_usd_computed"], by_model=models)


def _parse(data: object) -> CutAttempt | None:
    if not isinstance(data, Mapping) or data.get("schema_version") != SCHEMA_VERSION:
        return None
    task_id, trial = data.get("task_id"), _count(data.get("trial"))
    started, stopped = data.get("started_at"), data.get("stopped_at")
    usage = _usage(data.get("usage"))
    if not isinstance(task_id, str) or not trial or usage is None \
            or not isinstance(started, str) or not isinstance(stopped, str):
        return None
    return CutAttempt(task_id, trial, started, stopped, usage)

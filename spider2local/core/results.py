"""The per-task result: a frozen record, an explicit status, JSON with a schema version.

A result file is the unit of progress: ``<run>/<task>/result.json`` exists only once the task is
finished (it is written atomically), so resume, re-scoring and every report are rebuilt from disk.
Old runs stay readable: a file of an earlier schema is upgraded as it is read (:func:`upgrade`,
then the one codec, :mod:`.codec`), so nothing finished is re-run because the format moved on.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import tempfile
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from spider2local.core.codec import RecordError, closed, derived, dump, load
from spider2local.core.failure import FailureClass, classify
from spider2local.core.layout import ERROR_TRACEBACK
from spider2local.core.verdicts import TaskScore

SCHEMA_VERSION = 6
"""6: ``graded_sha256`` (absent before, read as ``None``: no graded tables kept);
``failure_class`` and ``failure_detail`` (derived from the other fields when written,
recomputed when read: older files get them too; see :mod:`.failure`); ``replayed``
(``run --replay``: the run replayed and how far; absent before, read as None).
5: ``cut_by_budget`` (absent before, read as false).
4: ``trial`` (1-based; absent before, read as trial 1: a run made before trials existed is a
1-trial run).
3: ``integrity`` (``clean``/``suspect``, absent before), ``integrity_evidence`` and error kind
``integrity``; ``isolation`` (also written by late version-2 files).
2: ``error.kind`` is an :class:`ErrorKind` and the exception's class has its own
field. 1: ``error.kind`` was the exception's class name, or ``timeout``/``infrastructure``/
``agent``."""
READABLE_VERSIONS = (1, 2, 3, 4, 5, SCHEMA_VERSION)
log = logging.getLogger(__name__)


class Integrity(StrEnum):
    CLEAN = "clean"
    """Nothing found."""
    SUSPECT = "suspect"
    """Something outside the workspace was named or opened: see the evidence."""


@dataclass(frozen=True)
class Evidence:
    source: str
    """``transcript.jsonl``, ``queries.jsonl`` or ``project/<path>``."""
    line: int | None
    """1-based line in the source (``None`` when only the squashed text matched)."""
    rule: str
    excerpt: str


class Status(StrEnum):
    PASSED = "passed"
    """Scored: every graded table matches gold."""
    FAILED = "failed"
    """Scored: at least one graded table does not match."""
    ERROR = "error"
    """A stage failed before a verdict (agent, dbt, infrastructure, scoring); see ``error``."""
    TIMEOUT = "timeout"
    """The task hit its deadline; its processes were killed. Scored if a database was left."""
    UNSCORED = "unscored"
    """The work ran but the task has no gold to score against."""


class Stage(StrEnum):
    PREPARE = "prepare"
    AGENT = "agent"
    CHECKPOINT = "checkpoint"
    SCORE = "score"
    SCAN = "scan"
    COLLECT = "collect"


@closed
@dataclass(frozen=True)
class Usage:
    """What the agent consumed. Costs are kept both as reported and as recomputed from a price
    table, because the reported total has been seen to miss cache tokens and subagents."""

    turns: int = 0
    """API calls of the main agent that got an answer."""
    subagent_turns: int = 0
    """API calls of its subagents (the verifier), counted apart; 0 in files written before the
    field existed."""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    cost_usd_reported: float | None = None
    cost_usd_computed: float | None = None
    by_model: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def cost_usd(self) -> float | None:
        return self.cost_usd_computed if self.cost_usd_computed is not None \
            else self.cost_usd_reported

    def __add__(self, other: Usage) -> Usage:
        """Usage of two attempts together: a retried task is paid for every attempt it made.
        A cost that only one side knows is taken as is (``None`` only when neither knows it)."""
        return Usage(
            turns=self.turns + other.turns,
            subagent_turns=self.subagent_turns + other.subagent_turns,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_creation_tokens=self.cache_creation_tokens + other.cache_creation_tokens,
            cost_usd_reported=_add_cost(self.cost_usd_reported, other.cost_usd_reported),
            cost_usd_computed=_add_cost(self.cost_usd_computed, other.cost_usd_computed),
            by_model=_add_models(self.by_model, other.by_model))


def _add_cost(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


def _add_models(a: Mapping[str, Mapping[str, int]],
                b: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    merged = {model: dict(tokens) for model, tokens in a.items()}
    for model, tokens in b.items():
        into = merged.setdefault(model, {})
        for key, count in tokens.items():
            into[key] = into.get(key, 0) + count
    return merged


class ErrorKind(StrEnum):
    AGENT = "agent"
    """The agent reported a failure or crashed (its message says which)."""
    TIMEOUT = "timeout"
    """The task's deadline was reached."""
    INFRASTRUCTURE = "infrastructure"
    """The machine's fault, not the agent's: API overloaded or rate-limited, CLI crash, a full
    disk, a permission refused, a database locked by another process
    (:func:`spider2local.core.faults.is_machine_fault`). Without a verdict, a resume re-runs it."""
    INTEGRITY = "integrity"
    """What the task is scored against (its gold file, its evaluation record, the scorer's
    source) changed after the run fingerprinted it: not scored, the message names the change."""
    EXCEPTION = "exception"
    """An unexpected exception in one of our stages; its class is in ``TaskError.exception``
    and its whole traceback in the task folder's ``error.txt``."""


@dataclass(frozen=True)
class TaskError:
    stage: Stage
    kind: ErrorKind
    message: str
    exception: str | None = None
    """The exception's class name (``ScoringError``, ``OSError``) when an exception ended the
    stage (kind ``exception``, or ``infrastructure`` for a machine fault): kept apart so code
    asks the kind and people still see the class."""



@closed
@derived("failure_class", "failure_detail")
@dataclass(frozen=True)
class TaskResult:
    task_id: str
    status: Status
    agent: str
    fake_date: str
    started_at: str
    finished_at: str
    durations: Mapping[str, float] = field(default_factory=dict)
    """Seconds per step, as the runner times them: ``prepare``, ``agent`` (its dbt runs
    included), ``checkpoint`` and ``score`` (the :class:`Stage` values), ``collect`` (artifacts),
    ``scan`` (the integrity scan), ``cleanup`` (workspace removal) and ``total``; a step that
    never ran is absent."""
    usage: Usage = field(default_factory=Usage)
    passed: bool | None = None
    tables_passed: int = 0
    tables_total: int = 0
    score: TaskScore | None = None
    """The evaluation's verdict in full (per-table verdicts and diagnostics); ``None`` when
    the task was not scored."""
    error: TaskError | None = None
    attempts: int = 1
    model: str | None = None
    verified: bool | None = None
    """Whether the agent's verifier ran (Claude agent only)."""
    integrity: Integrity | None = None
    """What the scan of the agent's traces found (:mod:`spider2local.integrity.scan`);
    ``None`` when the task was never scanned (a result older than schema 3)."""
    integrity_evidence: tuple[Evidence, ...] = ()
    """Why a task is ``suspect``: the first hits (source, line, rule, excerpt)."""
    isolation: str | None = None
    """The isolation the agent ran under: ``namespace``, ``none`` or ``not-needed``
    (:class:`spider2local.sandbox.isolation.IsolationMode`); ``None`` in files written before
    it was recorded (those runs had no isolation)."""
    trial: int = 1
    """Which of the run's independent trials of this task this is (1-based). Results are
    addressed by ``(task_id, trial)``; files written before trials existed are trial 1."""
    cut_by_budget: bool = False
    """The run's budget (``--max-cost-usd``) was spent while this trial ran: its model gateway
    refused a request, which ended the session, and what the agent had left was scored as it
    stood (the error says so, as for the task's own ``--max-budget-usd``)."""
    graded_sha256: str | None = None
    """The sha256 of the trial's ``graded.duckdb`` (its graded tables as the agent left them,
    :mod:`spider2local.run.graded`), which ``regrade`` checks before scoring it again;
    ``None`` when none was kept (``--no-keep-graded``, no score, or a result older than
    schema 6)."""
    replayed: Mapping[str, Any] | None = None
    """``run --replay``: the model's answers came from a recorded run, not from any API:
    ``run`` (its id), ``trial`` (the recorded trial), ``lenient``, ``recorded`` and ``served``
    (exchanges), ``diverged`` (``diverged at exchange N: ...``, or None: every request was
    the recorded one), ``unverified_from`` (lenient: the first exchange served though its
    request differed; every later step is unverified). None: a live trial."""
    schema_version: int = SCHEMA_VERSION

    @property
    def failure(self) -> tuple[FailureClass | None, str]:
        """Why it did not pass, in one word, and the detail (:mod:`.failure`)."""
        return classify(
            passed=self.passed, status=self.status.value,
            error_kind=self.error.kind.value if self.error else None,
            error_message=self.error.message if self.error else None,
            integrity=None if self.integrity is None else self.integrity.value,
            cut_by_budget=self.cut_by_budget, score=self.score)

    @property
    def failure_class(self) -> str | None:
        """:attr:`failure`'s class as written to result.json (derived: recomputed when read)."""
        found = self.failure[0]
        return None if found is None else found.value

    @property
    def failure_detail(self) -> str:
        return self.failure[1]

    def to_json(self) -> dict[str, Any]:
        """result.json's content (:func:`~spider2local.core.codec.dump`)."""
        return dump(self)

    @classmethod
    def from_json(cls, data: Any) -> TaskResult:
        """Read any schema in :data:`READABLE_VERSIONS`; the record returned is always in the
        current one (so a re-score rewrites an old file in the new layout). Raises
        :class:`~spider2local.core.codec.RecordError` (a ``ValueError``) with one phrase for a
        file whose fields have types no reader can use (a hand-edited or corrupt file): such a
        file counts as unfinished, and resume re-runs the task."""
        return load(cls, upgrade(data))


def upgrade(data: Any) -> dict[str, Any]:
    """result.json of any readable schema rewritten into the current one (what
    :func:`~spider2local.core.codec.load` then reads). Keys a schema did not write take their
    defaults; version 1 kept an exception's class name in ``error.kind`` itself."""
    if not isinstance(data, dict):
        raise RecordError(f"not a JSON object but {type(data).__name__}")
    version = data.get("schema_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise RecordError(f"result schema {version} is not one of {READABLE_VERSIONS}")
    fields = dict(data)
    fields.pop("failure_class", None)  # derived: recomputed from the fields
    fields.pop("failure_detail", None)
    fields["schema_version"] = SCHEMA_VERSION
    err = fields.get("error")
    if version == 1 and isinstance(err, dict) \
            and err.get("kind") not in {k.value for k in ErrorKind}:
        fields["error"] = {**err, "kind": ErrorKind.EXCEPTION.value, "exception": err["kind"]}
    trial = fields.get("trial")
    if isinstance(trial, int) and not isinstance(trial, bool) and trial < 1:
        raise RecordError(f"trial is {trial} (trials count from 1)")
    return fields


def write_text_atomic(path: Path, text: str, mode: int | None = 0o644) -> None:
    """Write text so that readers (and a resume after SIGKILL) see the old file or the new one,
    never half of one: temp file in the same folder, fsync, then rename. ``mode`` 0644 (as a
    plain ``open`` makes it) by default: reports are uploaded and shared, and ``mkstemp`` alone
    would leave them 0600; ``None`` keeps mkstemp's 0600 (the run folder's own records)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """:func:`write_text_atomic` of ``data`` as JSON (mode as mkstemp leaves it).
    allow_nan=False: NaN or Infinity is not JSON, and no reader of ours accepts it."""
    text = json.dumps(data, indent=2, sort_keys=False, default=str, allow_nan=False)
    write_text_atomic(path, text + "\n", mode=None)


def save_result(path: Path, result: TaskResult) -> None:
    write_json_atomic(path, result.to_json())


def load_result(path: Path) -> TaskResult | None:
    """Read a result file; ``None`` when absent or unreadable (the task is then re-run).

    NaN and Infinity are refused as they are when written (:func:`write_json_atomic`): a file
    holding one was edited or damaged, and ``report --format json`` failed on it with a
    traceback."""
    try:
        return TaskResult.from_json(json.loads(path.read_text(encoding="utf-8"),
                                               parse_constant=_not_json,
                                               parse_float=_finite))
    except (OSError, ValueError):  # RecordError is a ValueError: a corrupt or edited file
        return None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 reads as inf
        raise ValueError(f"{text} is not a finite number")
    return value


def keep_traceback(artifacts: Path, stage: Stage, exc: BaseException) -> None:
    """Append the whole traceback of an unexpected exception to the task's ``error.txt``:
    result.json keeps the one-line message, the file keeps what a bug report needs."""
    text = "".join(traceback.format_exception(exc))
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    log.debug("%s: %s failed", artifacts.name, stage.value, exc_info=exc)
    try:
        with (artifacts / ERROR_TRACEBACK).open("a", encoding="utf-8") as fh:
            fh.write(f"--- {when} stage {stage.value}\n{text}")
    except OSError as err:  # the message in result.json must still be written
        log.warning("%s: traceback not kept: %s", artifacts / ERROR_TRACEBACK, err)

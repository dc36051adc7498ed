"""The reader children's one protocol: a JSON request on stdin, one JSON answer line on stdout.

The answer is ``{"ok": <result>}`` or ``{"raised": {...}}`` with the exception's type, module,
message, errno and traceback, so the runner raises an exception that its fault rules
(:mod:`spider2local.core.faults`) classify as they would have in-process: a full disk stays
``infrastructure``, a gold that cannot be read stays a :class:`ScoringError`, and one whose
file another process locks stays a lock (the chain of causes travels too: the lock is the
cause of the ScoringError, and :func:`spider2local.db.locks.is_lock_error` reads it there).
Standard library only: every reader child imports it first.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from spider2local.exceptions import ScoringError


class ReaderError(Exception):
    """An exception of a reader child, raised again in the runner (its traceback as a note)."""


class ReaderDuckDBError(ReaderError):
    """A DuckDB error of a reader child: named by module so the fault rules read it as one.

    Its text is DuckDB's own (``IO Error: Could not set lock ...``), as the in-process error's
    was, so the message rules (:func:`spider2local.db.locks.is_lock_error`, anchored at its
    start) read it the same; DuckDB's class name is kept as :attr:`duckdb_type`."""

    __module__ = "duckdb"

    def __init__(self, message: str, duckdb_type: str = "Error") -> None:
        super().__init__(message)
        self.duckdb_type = duckdb_type


MAX_CAUSES = 8
"""Causes (``raise ... from``, or the exception being handled) sent with an exception: enough
for ours, which wrap one or two; a bound, since the chain is the child's to make."""


def _described(exc: BaseException) -> dict[str, Any]:
    return {"type": type(exc).__name__, "module": type(exc).__module__,
            "message": str(exc), "errno": getattr(exc, "errno", None),
            "strerror": getattr(exc, "strerror", None),
            "filename": getattr(exc, "filename", None),
            "scoring": isinstance(exc, ScoringError)}


def _causes(exc: BaseException) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    seen = {id(exc)}
    current = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while current is not None and id(current) not in seen and len(found) < MAX_CAUSES:
        seen.add(id(current))
        found.append(_described(current))
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__)
    return found


def answer_of(handler: Callable[[Any], Any], request: Any) -> dict[str, Any]:
    """Child side: ``{"ok": handler(request)}``, or what it raised (never raises). A child
    that does several jobs answers each with this, so one job's failure is that job's."""
    try:
        return {"ok": handler(request)}
    except BaseException as exc:
        return {"raised": {**_described(exc), "causes": _causes(exc),
                           "traceback": traceback.format_exc()}}


def serve(handler: Callable[[dict[str, Any]], Any]) -> None:
    """Child side: read the request, run ``handler``, write the answer (never raises)."""
    answer = answer_of(lambda _: handler(json.loads(sys.stdin.read())), None)
    sys.stdout.write(json.dumps(answer, default=str) + "\n")
    sys.stdout.flush()


def _rebuilt(raised: Mapping[str, Any]) -> BaseException:
    message, number = str(raised.get("message", "")), raised.get("errno")
    kind = str(raised.get("type"))
    if isinstance(number, int):
        return OSError(number, str(raised.get("strerror") or message), raised.get("filename"))
    if raised.get("scoring"):
        return ScoringError(message)
    if kind == "MemoryError":
        return MemoryError(message)
    if str(raised.get("module", "")).split(".")[0] in {"duckdb", "_duckdb"}:
        return ReaderDuckDBError(message, kind)
    return ReaderError(f"{kind}: {message}")


def result_of(answer: Mapping[str, Any]) -> Any:
    """Runner side: the child's result, or its exception raised again (with its causes)."""
    if "ok" in answer:
        return answer["ok"]
    raised = answer.get("raised")
    if not isinstance(raised, Mapping):
        raise ReaderError(f"a reader child answered nonsense: {str(answer)[:200]}")
    exc = _rebuilt(raised)
    outer = exc
    causes = raised.get("causes")
    for cause in causes[:MAX_CAUSES] if isinstance(causes, list) else ():
        if isinstance(cause, Mapping):
            inner = _rebuilt(cause)
            outer.__cause__ = inner
            outer = inner
    exc.add_note(f"in the reader child:\n{raised.get('traceback', '')}")
    raise exc

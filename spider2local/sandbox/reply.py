"""The reader children's one protocol: a JSON request on stdin, one JSON answer line on stdout.

The answer is ``{"ok": <result>}`` or ``{"raised": {...}}`` with the exception's type, module,
message, errno and traceback, so the runner raises an exception that its fault rules
(:mod:`spider2local.run.faults`) classify as they would have in-process: a full disk stays
``infrastructure``, a gold that cannot be read stays a :class:`ScoringError`. Standard library
only: every reader child imports it first.
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
    """A DuckDB error of a reader child: named by module so the fault rules read it as one."""

    __module__ = "duckdb"


def serve(handler: Callable[[dict[str, Any]], Any]) -> None:
    """Child side: read the request, run ``handler``, write the answer (never raises)."""
    try:
        answer: dict[str, Any] = {"ok": handler(json.loads(sys.stdin.read()))}
    except BaseException as exc:
        answer = {"raised": {"type": type(exc).__name__, "module": type(exc).__module__,
                             "message": str(exc), "errno": getattr(exc, "errno", None),
                             "strerror": getattr(exc, "strerror", None),
                             "filename": getattr(exc, "filename", None),
                             "scoring": isinstance(exc, ScoringError),
                             "traceback": traceback.format_exc()}}
    sys.stdout.write(json.dumps(answer, default=str) + "\n")
    sys.stdout.flush()


def result_of(answer: Mapping[str, Any]) -> Any:
    """Runner side: the child's result, or its exception raised again."""
    if "ok" in answer:
        return answer["ok"]
    raised = answer.get("raised")
    if not isinstance(raised, Mapping):
        raise ReaderError(f"a reader child answered nonsense: {str(answer)[:200]}")
    message, number = str(raised.get("message", "")), raised.get("errno")
    exc: BaseException
    if isinstance(number, int):
        exc = OSError(number, str(raised.get("strerror") or message), raised.get("filename"))
    elif raised.get("scoring"):
        exc = ScoringError(message)
    elif str(raised.get("type")) == "MemoryError":
        exc = MemoryError(message)
    elif str(raised.get("module", "")).split(".")[0] in {"duckdb", "_duckdb"}:
        exc = ReaderDuckDBError(f"{raised.get('type')}: {message}")
    else:
        exc = ReaderError(f"{raised.get('type')}: {message}")
    exc.add_note(f"in the reader child:\n{raised.get('traceback', '')}")
    raise exc

"""Official Spider2-DBT scoring (upstream's ``duckdb_match``), exact and fast.

Verdicts equal upstream's on frames read with ``fetchdf`` (see docs/scoring.md for the rules
and their quirks); diagnostics and notes explain failures without ever changing a verdict.

The public names below load on first use (PEP 562): scoring needs pandas (about 0.3 s to
import), and every command that only reads a dataset imports :mod:`.params` through here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spider2local.core.verdicts import ColumnDiagnostic, TableScore, TaskScore
    from spider2local.evaluation.score import score_database
    from spider2local.evaluation.serialize import render_text

_HOMES = {
    "score_database": "spider2local.evaluation.score",
    "render_text": "spider2local.evaluation.serialize",
    "ColumnDiagnostic": "spider2local.core.verdicts",
    "TableScore": "spider2local.core.verdicts",
    "TaskScore": "spider2local.core.verdicts",
}

__all__ = ["ColumnDiagnostic", "TableScore", "TaskScore", "render_text", "score_database"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value

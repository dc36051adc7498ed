"""Official Spider2-DBT scoring (upstream's ``duckdb_match``), exact and fast.

Verdicts equal upstream's on frames read with ``fetchdf`` (see docs/scoring.md for the rules
and their quirks); diagnostics and notes explain failures without ever changing a verdict.
"""

from spider2local.evaluation.score import score_database
from spider2local.evaluation.serialize import from_json, render_text, to_json
from spider2local.evaluation.verdicts import (
    ColumnDiagnostic,
    TableScore,
    TaskScore,
)

__all__ = [
    "ColumnDiagnostic",
    "TableScore",
    "TaskScore",
    "from_json",
    "render_text",
    "score_database",
    "to_json",
]

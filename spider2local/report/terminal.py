"""The report for a terminal: the final table, then the headline (what ``run`` ends with)."""

from __future__ import annotations

from spider2local.report.printable import printable
from spider2local.report.summary import RunReport
from spider2local.report.table import render_table
from spider2local.report.text import (
    PASS_K_HEADERS,
    RATE_HEADERS,
    TABLE_HEADERS,
    headline_lines,
    pass_k_cells,
    rate_cells,
    table_cells,
)


def render_terminal(report: RunReport, *, note_width: int = 100) -> str:
    """The table of every (task, trial), then with several trials the per-task rates and the
    pass@k / pass^k table, then the headline."""
    parts = [render_table(TABLE_HEADERS, table_cells(report), max_width=note_width), ""]
    rates = rate_cells(report)
    if rates:
        parts += [render_table(RATE_HEADERS, rates), "",
                  render_table(PASS_K_HEADERS, pass_k_cells(report), max_width=80), ""]
    return "\n".join([*parts, *(printable(line) for line in headline_lines(report))])

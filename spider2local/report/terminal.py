"""The report for a terminal: the final table, then the headline (what ``run`` ends with)."""

from __future__ import annotations

from spider2local.report.printable import printable
from spider2local.report.summary import RunReport
from spider2local.report.table import render_table
from spider2local.report.text import TABLE_HEADERS, headline_lines, table_cells


def render_terminal(report: RunReport, *, note_width: int = 100) -> str:
    table = render_table(TABLE_HEADERS, table_cells(report), max_width=note_width)
    return "\n".join([table, "", *(printable(line) for line in headline_lines(report))])

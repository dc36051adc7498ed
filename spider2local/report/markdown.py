"""The report as GitHub-flavoured markdown (fits ``$GITHUB_STEP_SUMMARY``).

Every cell is escaped: notes carry text from agents and databases, and GitHub renders some
HTML inside markdown, so ``<``, ``>``, ``&``, ``|`` and backticks are neutralised and line
breaks folded.
"""

from __future__ import annotations

import html

from spider2local.core.printable import printable
from spider2local.report.summary import RunReport
from spider2local.report.text import (
    PASS_K_HEADERS,
    RATE_HEADERS,
    TABLE_HEADERS,
    headline_lines,
    pass_k_cells,
    rate_cells,
    table_cells,
)

MAX_CELL = 300
"""A cell longer than this is cut (the step summary has a size limit of 1 MiB)."""


def escape_cell(text: str) -> str:
    one_line = printable(" ".join(str(text).split()))
    if len(one_line) > MAX_CELL:
        one_line = one_line[: MAX_CELL - 1] + "…"
    return html.escape(one_line, quote=False).replace("|", "\\|").replace("`", "&#96;")


def render_markdown(report: RunReport) -> str:
    lines = headline_lines(report)
    out = [f"## spider2local {escape_cell(lines[0])}", ""]
    out += [f"- {escape_cell(line)}" for line in lines[1:]]
    if report.trials > 1:
        out += ["", "### pass@k and pass^k", "", *_table(PASS_K_HEADERS, pass_k_cells(report)),
                "", "### per task", "", *_table(RATE_HEADERS, rate_cells(report)),
                "", "### every trial"]
    out += ["", *_table(TABLE_HEADERS, table_cells(report))]
    return "\n".join(out) + "\n"


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|",
            *("| " + " | ".join(escape_cell(c) for c in row) + " |" for row in rows)]

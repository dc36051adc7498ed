"""The report for a terminal: the final table, then the headline (what ``run`` ends with).

On a terminal the table is fitted to its width (a 200-column terminal shows whole notes, an
80-column one never wraps a row) and verdicts are coloured; anywhere else (a pipe, a file, a CI
log) it is plain text with every note cut at ``note_width``, as it always was, unless
``$COLUMNS`` gives a width. Colour follows rich's console: none without a terminal, none with
``NO_COLOR`` set or ``color=False`` (``--no-color``).
"""

from __future__ import annotations

import os
import shutil
import textwrap
from typing import TYPE_CHECKING, TextIO

from spider2local.core.printable import printable
from spider2local.core.table import render_table, styled_table
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

if TYPE_CHECKING:
    from rich.text import Text

CELL_STYLES = {"passed": "green", "pass": "green", "failed": "red", "fail": "red",
               "error": "red", "timeout": "yellow", "unscored": "dim", "suspect": "bold yellow"}
"""Colours of the table's status, verdict and integrity cells (same words as the live
display's :data:`spider2local.run.progress.STATUS_STYLE`)."""
STYLED_COLUMNS = frozenset(TABLE_HEADERS.index(h) for h in ("status", "verdict", "integrity"))


def _style(column: int, cell: str) -> str | None:
    return CELL_STYLES.get(cell) if column in STYLED_COLUMNS else None


def terminal_width(stream: TextIO) -> int | None:
    """The width to fit: the terminal's when ``stream`` is one, else ``$COLUMNS`` when set,
    else ``None`` (no limit: a log keeps whole notes up to ``note_width``)."""
    try:
        tty = stream.isatty()
    except (OSError, ValueError):
        tty = False
    if not tty and not os.environ.get("COLUMNS", "").strip().isdigit():
        return None
    return shutil.get_terminal_size().columns


def render_terminal(report: RunReport, *, note_width: int = 100,
                    width: int | None = None) -> str:
    """The table of every (task, trial), then with several trials the per-task rates and the
    pass@k / pass^k table, then the headline; fitted to ``width`` when given."""
    return terminal_text(report, note_width=note_width, width=width).plain


def terminal_text(report: RunReport, *, note_width: int = 100,
                  width: int | None = None) -> Text:
    """:func:`render_terminal` with its verdicts coloured (a rich ``Text``)."""
    from rich.text import Text

    out = styled_table(TABLE_HEADERS, table_cells(report), _style, max_width=note_width,
                       width=width)
    out.append("\n\n")
    rates = rate_cells(report)
    if rates:
        out.append(render_table(RATE_HEADERS, rates, width=width) + "\n\n")
        out.append(render_table(PASS_K_HEADERS, pass_k_cells(report), max_width=80,
                                width=width) + "\n\n")
    lines = [printable(line) for line in headline_lines(report)]
    if width is not None:  # a terminal wraps mid-word; wrap at words, continued indented
        lines = [textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False,
                               break_on_hyphens=False) for line in lines]
    out.append_text(Text("\n".join(lines)))
    return out


def write_terminal(report: RunReport, stream: TextIO, *, color: bool | None = None) -> None:
    """Print the report to ``stream``: fitted and coloured on a terminal, plain elsewhere."""
    width = terminal_width(stream)
    try:
        tty = stream.isatty()
    except (OSError, ValueError):
        tty = False
    if not tty:
        stream.write(render_terminal(report, width=width) + "\n")
        stream.flush()
        return
    from rich.console import Console

    console = Console(file=stream, width=width, highlight=False, markup=False, emoji=False,
                      no_color=None if color is None else not color)
    # soft_wrap: the lines are fitted already; rich must not re-wrap or crop them
    console.print(terminal_text(report, width=width), soft_wrap=True)

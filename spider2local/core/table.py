"""Plain-text tables for the terminal: listings, final run tables, audits.

Left-aligned columns separated by two spaces. Without a ``width`` each cell is cut at
``max_width`` (a log or a pipe has no width, and one long problem text must not wreck the
layout); with one (a terminal's) the table is fitted to it instead: the widest columns give up
characters first, so a wide terminal shows whole notes and a narrow one never wraps a row.
A cell is cut at a word where one is near, and ``…`` says it was cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from spider2local.core.printable import printable

if TYPE_CHECKING:
    from rich.text import Text

GAP = 2
MIN_COLUMN = 6
"""A column is not narrowed below this (or its own width, if narrower) to fit a width."""

Style = Callable[[int, str], str | None]
"""Given a column index and a cell's text, the rich style of that cell (``None``: plain)."""


KEY_WIDTH = 130
"""Characters of the first column kept whole: a plain task id (128) and ``#k``."""


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
                 *, max_width: int = 60, width: int | None = None) -> str:
    """The table as text (see the module docstring for ``max_width`` and ``width``)."""
    return "\n".join(_lines(headers, rows, max_width, width))


def styled_table(headers: Sequence[str], rows: Sequence[Sequence[object]], style: Style,
                 *, max_width: int = 60, width: int | None = None) -> Text:
    """The same text as :func:`render_table`, as a rich ``Text`` whose cells ``style`` colours
    (the console drops the colours where there is no terminal or ``NO_COLOR`` is set)."""
    from rich.text import Text

    heads, widths, cells = _layout(headers, rows, max_width, width)
    out = Text()
    out.append(_join(heads, widths), style="bold")
    out.append("\n" + "  ".join("-" * w for w in widths))
    for row in cells:
        out.append("\n")
        for i, (cell, w) in enumerate(zip(row, widths, strict=True)):
            last = i == len(widths) - 1
            out.append(cell, style=style(i, cell) or "")
            if not last:
                out.append(" " * (w - len(cell) + GAP))
        out.rstrip()
    return out


def _lines(headers: Sequence[str], rows: Sequence[Sequence[object]], max_width: int,
           width: int | None) -> list[str]:
    heads, widths, cells = _layout(headers, rows, max_width, width)
    return [_join(heads, widths), "  ".join("-" * w for w in widths),
            *(_join(row, widths) for row in cells)]


def _join(cells: Sequence[str], widths: Sequence[int]) -> str:
    return (" " * GAP).join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _layout(headers: Sequence[str], rows: Sequence[Sequence[object]], max_width: int,
            width: int | None) -> tuple[list[str], list[int], list[list[str]]]:
    """The headers, the column widths and the cells, cut to those widths."""
    limit = max_width if width is None else max(width, 1)
    # the key column (task ids, 128 characters at most) is never cut: see fit()
    cells = [[_cell(v, limit if k else max(limit, KEY_WIDTH)) for k, v in enumerate(row)]
             for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    if width is not None:
        widths = fit(widths, width)
        cells = [[cut(c, w) for c, w in zip(row, widths, strict=True)] for row in cells]
    return [cut(h, w) for h, w in zip(headers, widths, strict=True)], widths, cells


def fit(widths: Sequence[int], width: int) -> list[int]:
    """``widths`` narrowed so the row (with its gaps) fits ``width``: the widest column gives
    up characters first, none goes below :data:`MIN_COLUMN` (past that the row is as narrow
    as it gets, and a terminal wraps it). The first column is the row's key (a task id,
    ``task#trial``) and is never narrowed: "fleet00…" names no task."""
    out = list(widths)
    floors = [w if k == 0 else min(w, MIN_COLUMN) for k, w in enumerate(widths)]
    excess = sum(out) + GAP * (len(out) - 1) - width
    while excess > 0:
        shrinkable = [k for k in range(len(out)) if out[k] > floors[k]]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda k: out[k])
        next_widest = max((w for k, w in enumerate(out) if k != i), default=0)
        # down to the next widest in one step: a 2,000-character note costs one pass
        step = max(1, min(excess, out[i] - max(next_widest, floors[i])))
        out[i] -= step
        excess -= step
    return out


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: cut at the last space when that keeps most of
    it, else inside the word; ``…`` marks the cut."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    room = text[: width - 1]
    space = room.rfind(" ")
    if space >= width * 2 // 3:
        room = room[:space]
    return room.rstrip() + "…"


def _cell(value: object, max_width: int) -> str:
    text = "" if value is None else str(value)
    return cut(printable(" ".join(text.split())), max_width)

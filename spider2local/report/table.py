"""Plain-text tables for the terminal: listings, final run tables, audits."""

from __future__ import annotations

from collections.abc import Sequence

from spider2local.report.printable import printable


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
                 *, max_width: int = 60) -> str:
    """Left-aligned columns separated by two spaces; cells longer than ``max_width`` are cut
    with an ellipsis so one long problem text cannot wreck the layout."""
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
              for row in cells]
    return "\n".join(lines)


def _cell(value: object, max_width: int) -> str:
    text = "" if value is None else str(value)
    text = printable(" ".join(text.split()))
    return text if len(text) <= max_width else text[: max_width - 1] + "…"

"""Terminal tables: cut cells off a terminal, fitted to its width on one."""

from __future__ import annotations

from spider2local.core.table import cut, fit, render_table, styled_table

NOTE = ("Runtime Error in model daily_revenue (models/daily_revenue.sql) Parser Error: syntax "
        "error at or near \"by\" LINE 12: group by by day, store_id; " * 3).strip()
HEADERS = ("task", "status", "verdict", "tables", "time", "note")
ROWS = [("bakery001", "failed", "fail", "0/2", "6.8s", NOTE), ("fleet001", "passed", "pass",
                                                                 "1/1", "5.0s", "")]


def test_a_table_at_width_160_uses_the_width_instead_of_wrapping_at_80() -> None:
    lines = render_table(HEADERS, ROWS, width=160).splitlines()
    assert max(len(x) for x in lines) == 160  # the note fills the terminal, no more
    row = lines[2]
    assert row.startswith("bakery001  failed  fail     0/2     6.8s  Runtime Error")
    assert row.endswith("…") and row[:-1].endswith(("by", "day,", "store_id;", "at", "or",
                                                      "near", "\"by\"", "LINE", "12:",
                                                      "group", "Parser", "Error:", "syntax",
                                                      "error", "model", "in", "daily_revenue",
                                                      "(models/daily_revenue.sql)", "Runtime"))
    narrow = render_table(HEADERS, ROWS, width=80).splitlines()
    assert max(len(x) for x in narrow) <= 80 and narrow[2].startswith("bakery001  failed")


def test_without_a_width_each_cell_is_cut_at_max_width_as_before() -> None:
    lines = render_table(HEADERS, ROWS, max_width=60).splitlines()
    note = lines[2].split("6.8s  ", 1)[1]
    assert len(note) <= 60 and note.endswith("…")
    assert len(lines[0].split()) == len(HEADERS) and set(lines[1]) == {"-", " "}


def test_a_width_narrower_than_the_table_narrows_the_widest_columns_first() -> None:
    assert fit([10, 100], 40) == [10, 28]
    assert fit([4, 30, 30], 40) == [4, 16, 16]  # 4 + 16 + 16 + two gaps of 2
    assert fit([30, 30, 4], 40) == [30, 6, 4]  # the key column stays whole
    assert fit([10, 10], 5) == [10, 6]  # no column below 6 (nor the key's): as narrow as it gets
    assert fit([3, 4], 100) == [3, 4]


def test_cut_prefers_a_word_boundary_and_marks_the_cut() -> None:
    assert cut("short", 10) == "short"
    assert cut("alpha beta gamma delta", 14) == "alpha beta…"
    assert cut("x" * 30, 10) == "x" * 9 + "…"
    assert cut("abc", 1) == "…"


def test_the_styled_table_has_the_same_text_and_styles_only_the_asked_cells() -> None:
    text = styled_table(HEADERS, ROWS, lambda col, cell: "red" if cell == "failed" else None,
                        width=120)
    assert text.plain == render_table(HEADERS, ROWS, width=120)
    styled = [text.plain[s.start:s.end] for s in text.spans if s.style == "red"]
    assert styled == ["failed"]


def test_the_first_column_the_rows_key_is_never_narrowed() -> None:
    """A task id cut to "fleet00…" names no task: at any width the first column stays whole
    (the others give up their characters), as seen at xdist's COLUMNS=80."""
    rows = [("fleet001#2", "passed", "pass", "x" * 70), ("library001#3", "failed", "fail", "y")]
    for width in (80, 40, 8):
        lines = render_table(("task", "status", "verdict", "note"), rows, width=width).splitlines()
        assert lines[2].startswith("fleet001#2 ") and lines[3].startswith("library001#3 ")
    assert fit([12, 6, 7, 70], 40)[0] == 12

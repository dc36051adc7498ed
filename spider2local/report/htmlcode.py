"""Code as the HTML report shows it: SQL with its keywords, strings, comments and Jinja told
apart, unified diffs with added, removed and hunk lines styled apart (by class), and folded
blocks that say their size.

Every text from the run is escaped here (:func:`e`: :func:`html.escape`, quotes included)
before any markup goes around it, and the markup is only ``<span class="...">`` with a class
named in this module: agent text never chooses an element or an attribute.

The SQL highlighting is written by hand on purpose: a reader needs four token classes (keyword,
string, comment, Jinja), a regular expression gives them in a few lines, and the page must not
load a highlighter from a CDN (no network) nor grow by a bundled one; a highlighting library
would also be one more place that decides how agent text is escaped.
"""

from __future__ import annotations

import re
from html import escape

FOLD_LINES = 24
"""A code block longer than this is folded (its first line and size in the summary)."""

_WORDS = """
all alter and any as asc attach begin between by case cast check coalesce commit create cross
current_date current_timestamp default delete desc describe distinct drop else end except
exists explain false filter first following from full group having if ilike in inner insert
intersect interval into is join last lateral left like limit materialized natural not null
nulls offset on or order outer over partition pivot preceding primary qualify range recursive
references replace returning right rollback row rows schema select set show similar table
temp temporary then to true truncate unbounded union unique unpivot update using values view
when where window with
"""
SQL_KEYWORDS = frozenset(_WORDS.split())
"""Reserved and common SQL words (DuckDB's dialect, lower case); function names are left
plain: only the structure of a query is worth a colour."""

_SQL_TOKEN = re.compile(r"""
    (?P<c>--[^\n]*|/\*.*?(?:\*/|\Z))          # comments
  | (?P<j>\{\{.*?(?:\}\}|\Z)|\{%.*?(?:%\}|\Z)|\{\#.*?(?:\#\}|\Z))   # Jinja
  | (?P<s>'(?:[^']|'')*(?:'|\Z))               # strings
  | (?P<w>\b[A-Za-z_][A-Za-z_0-9]*\b)          # words (keywords among them)
""", re.S | re.X)
_SQL_CLASS = {"c": "sc", "j": "sj", "s": "ss"}


def e(value: object) -> str:
    """``value`` as HTML text (quotes included: safe inside an attribute too)."""
    return escape("" if value is None else str(value), quote=True)


def sql_html(sql: str) -> str:
    """``sql`` escaped, with keywords (``sk``), strings (``ss``), comments (``sc``) and Jinja
    (``sj``) in spans."""
    out: list[str] = []
    at = 0
    for match in _SQL_TOKEN.finditer(sql):
        out.append(e(sql[at:match.start()]))
        kind, text = match.lastgroup or "", match.group()
        if kind == "w":
            out.append(f'<span class="sk">{e(text)}</span>' if text.lower() in SQL_KEYWORDS
                       else e(text))
        else:
            out.append(f'<span class="{_SQL_CLASS[kind]}">{e(text)}</span>')
        at = match.end()
    out.append(e(sql[at:]))
    return "".join(out)


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "dh"
    if line.startswith("@@"):
        return "dk"
    if line.startswith("+"):
        return "da"
    if line.startswith("-"):
        return "dd"
    return "dc"


def diff_html(diff: str) -> str:
    """A unified diff as a ``pre.diff``: one span per line, classed ``da`` (added), ``dd``
    (removed), ``dk`` (hunk header), ``dh`` (file header) or ``dc`` (context)."""
    lines = diff.splitlines()
    return '<pre class="diff">' + "".join(
        f'<span class="{_diff_class(line)}">{e(line) or " "}</span>' for line in lines) \
        + "</pre>"


def diff_counts(diff: str) -> tuple[int, int]:
    """Lines added and removed by a unified diff (its file headers not counted)."""
    lines = diff.splitlines()
    return (sum(1 for x in lines if _diff_class(x) == "da"),
            sum(1 for x in lines if _diff_class(x) == "dd"))


def code_html(text: str, language: str = "") -> str:
    """A ``pre.code`` block: SQL highlighted, a shell command with its prompt, else plain."""
    if language == "sql":
        body = sql_html(text)
    elif language == "shell":
        body = '<span class="ps1">$ </span>' + e(text)
    else:
        body = e(text)
    return f'<pre class="code lang-{e(language or "text")}">{body}</pre>'


def line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def folded(summary: str, body: str, *, css: str = "fold", is_open: bool = False) -> str:
    """``body`` (markup) in a ``<details>`` whose summary is ``summary`` (markup)."""
    return (f'<details class="{e(css)}"{" open" if is_open else ""}><summary>{summary}'
            f"</summary>{body}</details>")


def first_line(text: str, limit: int = 90) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"

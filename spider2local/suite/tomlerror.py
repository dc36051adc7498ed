"""Turn a TOML syntax error into a message that names the suite key, not only a position.

``tomllib`` reports an impossible unquoted date (``date = 2024-13-01``) as "Expected newline or
end of document after a statement (at line 3, column 12)": true, but the user has to count
columns to learn that the date is wrong. Reading the offending line back gives the key and the
value, so the message can say ``tasks.x.date: bad date 2024-13-01`` like every other suite error.
"""

from __future__ import annotations

import re

_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEADER = re.compile(r"^\s*\[\[?([^\]]+)\]\]?")
_ASSIGN = re.compile(r"([A-Za-z0-9_\-.\"' ]+?)\s*=\s*")
_DATE_LIKE = re.compile(r"\d{4}-\d+-\d+[^\s,}\]#]*")

SYNTAX_FIX = "fix the syntax; see docs/suite.md for the suite file format"
DATE_FIX = "write it as YYYY-MM-DD, e.g. 2024-09-15"


def describe(text: str, error: Exception) -> tuple[str, str]:
    """``(message, fix)`` for a ``tomllib`` error raised while parsing ``text``; one line."""
    located = _locate(text, str(error))
    if located is None:
        return f"not valid TOML: {error}", SYNTAX_FIX
    key, value, line = located
    date = _DATE_LIKE.match(value)
    if date:
        return f"{key}: bad date {date.group(0)} (line {line})", DATE_FIX
    return f"not valid TOML at {key}: {error}", SYNTAX_FIX


def _locate(text: str, message: str) -> tuple[str, str, int] | None:
    """The dotted key assigned on the error's line before its column, that assignment's value
    text, and the line number; ``None`` when the line holds no assignment."""
    pos = _POSITION.search(message)
    lines = text.splitlines()
    if pos is None or not 1 <= int(pos.group(1)) <= len(lines):
        return None
    number, column = int(pos.group(1)), int(pos.group(2))
    line = lines[number - 1]
    assigns = [m for m in _ASSIGN.finditer(line) if m.start() < column - 1]
    if not assigns or line.lstrip().startswith(("#", "[")):
        return None
    last = assigns[-1]
    key = ".".join(filter(None, (_table_of(lines, number), _dotted(last.group(1)))))
    return key, line[last.end():], number


def _table_of(lines: list[str], number: int) -> str:
    """The ``[table]`` header in force at line ``number`` (1-based); empty at the top level."""
    for line in reversed(lines[:number - 1]):
        header = _HEADER.match(line)
        if header:
            return _dotted(header.group(1))
    return ""


def _dotted(key: str) -> str:
    return ".".join(part.strip().strip("\"'") for part in key.split("."))

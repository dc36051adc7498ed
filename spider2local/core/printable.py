"""Text from agents and databases made safe to print: the one sanitiser of every text renderer.

A report cell carries what an agent wrote (an error message, a dbt error, a note, a model name
from run.json). Printed raw, an ESC starts a terminal escape sequence (recolour, retitle the
window, move the cursor and overwrite the headline), a NUL or a C1 byte confuses pagers and log
viewers, and a right-to-left override (U+202E) or another bidi control reorders what a reader
sees, so "passed" can be shown where the bytes say "failed". Each such character is shown as
its escape (``\\x1b``, ``\\u202e``), visible and harmless, never passed through nor silently
dropped.
"""

from __future__ import annotations

import re

_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
"""Unicode's bidirectional formatting characters (UAX #9): marks, embeddings, overrides,
isolates. Other format characters (zero-width joiners in emoji, soft hyphens) stay."""
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\u2028\u2029]")
"""C0 controls, DEL, C1 controls, the bidi controls, and the line and paragraph separators
(which terminals and editors break lines on)."""


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control and bidi character (see the module docstring) escaped.
    Tab and newline are controls too: callers that keep lines split first."""
    return _UNSAFE.sub(_escape, text)


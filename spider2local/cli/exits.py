"""Exit codes of every command, in one place (README, "Commands")."""

from __future__ import annotations

OK = 0
FAILED = 1
"""A verdict or check failed (``score FILE`` fails, ``doctor`` misses something required)."""
BAD_INPUT = 2
"""A :class:`~spider2local.exceptions.UserError`: one line on stderr naming the file and fix."""
NO_MEMORY = 3
"""The runner itself ran out of memory (or could not start a thread) and cannot go on: one
line on stderr instead of a traceback; the tasks it recorded stay, a resume runs the rest."""
INTERRUPTED = 130
"""After Ctrl-C (128 + SIGINT), as shells report it."""

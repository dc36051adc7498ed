"""Why a task cannot run: a kind the code can ask, and the one line a person reads.

The loader used to keep problems as phrases, and everything downstream (the audit asking "is
the start database or the gold the reason this task cannot be scored?") re-derived the kind from
how a phrase began: reword one message and the audit silently stops recognising it. The kind is
now decided once, where the problem is found; the message is only ever shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ProblemKind(StrEnum):
    """What part of a task is unusable."""

    DUPLICATE = "duplicate"
    """The id appears twice in the task list; the second entry never runs."""
    INSTRUCTION = "instruction"
    """The task list gives no instruction."""
    PROJECT = "project"
    """The project folder or its dbt_project.yml is missing or unparsable."""
    PROFILE = "profile"
    """profiles.yml (or the profile dbt_project.yml names) says no usable DuckDB path."""
    START_DB = "start_db"
    """The start database is missing or not a DuckDB file this installation reads."""
    PACKAGE = "package"
    """packages.yml is malformed, or a package needs ``dbt deps`` (the network)."""
    EVAL = "eval"
    """No usable ``duckdb_match`` entry in spider2_eval.jsonl."""
    GOLD = "gold"
    """The gold database is missing or not a DuckDB file this installation reads."""


START_KINDS = frozenset({ProblemKind.PROJECT, ProblemKind.PROFILE, ProblemKind.START_DB})
"""Kinds that leave a task without a start database."""
GOLD_KINDS = frozenset({ProblemKind.EVAL, ProblemKind.GOLD})
"""Kinds that leave a task without a usable gold (nothing to score against)."""


@dataclass(frozen=True)
class Problem:
    """One reason a task cannot run. ``str()`` is the message, so listings, JSON and skipped
    reasons show exactly the text they always did."""

    kind: ProblemKind
    message: str

    def __str__(self) -> str:
        return self.message

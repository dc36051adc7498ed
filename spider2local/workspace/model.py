"""The workspace record: one attempt's private copy of a task, as every stage sees it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spider2local.workspace.blame import Room


@dataclass(frozen=True)
class Workspace:
    """A fresh copy of one task, as the agent sees it. Gold and eval config are never in it."""

    root: Path
    """The temporary folder holding everything of this attempt."""
    project_dir: Path
    """The dbt project copy: the agent's working directory."""
    database: Path
    """The task database inside the project (what dbt writes and what gets scored)."""
    env: Mapping[str, str]
    """Environment for every process the agent starts: dbt shim first on PATH, clock settings,
    telemetry off. Never preloaded with libfaketime itself."""
    artifacts: Path
    """This task's folder in the run folder (transcript, queries, dbt logs)."""
    scan_path: Path | None = None
    """JSON project scan (models declared in YML: complete / stub / missing). The runner's own
    copy in ``artifacts``: the agent's copy in the project is the agent's to replace."""
    snapshot_path: Path | None = None
    """JSON snapshot of the start database (tables, row counts, columns and types); also the
    runner's copy in ``artifacts``."""
    problems: tuple[str, ...] = ()
    """Found while preparing (packages not vendored, unparsable YML); the work may still run."""
    start_copy: Path | None = None
    """A read-only copy of the start database, made before the agent runs, under
    :data:`START_DIR` (hidden from a sandboxed agent): the query tool attaches it as ``start``
    so the agent can compare what it built with what the project shipped, even after its first
    ``dbt run`` overwrote the model tables in :attr:`database`."""
    room: Room | None = None
    """The free space of the workspace's file system and the workspace's own size once made
    (:func:`measure_room`): what tells a disk the agent filled from one the machine ran out of
    (:mod:`spider2local.workspace.blame`). ``None`` when the file system could not be measured."""
    skills_dir: str | None = None
    """Where in the project the runner installed skills for the agent (its
    ``Capabilities.skills_dir``), or None: never collected as the agent's work."""

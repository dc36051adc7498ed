"""Which database the tools serve, as a small JSON file: how ``spider2local mcp-server`` learns
the workspace it governs.

The runner writes one per task (:func:`ToolConfig.for_workspace`, then :meth:`ToolConfig.write`)
from the same :class:`~spider2local.workspace.prepare.Workspace` the Claude session's in-process
tools are built from, so both doors open onto the same database, ``start`` copy, project scan,
query log, fake date and limits. A person debugging a task can write one by hand (or pass
``--database`` alone). A bad file is one line naming it (exit 2), never a traceback.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spider2local.dbtools.query import QueryLimits, QueryService
from spider2local.exceptions import UserError

if TYPE_CHECKING:
    from spider2local.workspace.model import Workspace

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ToolConfig:
    database: Path
    audit: Path
    """The query log (``queries.jsonl``) every call is appended to."""
    date: dt.date | None = None
    """The task's fake date (queries see it as ``current_date``); None: the real clock."""
    root: Path | None = None
    """The workspace root the database must stay a plain file in (None: not checked)."""
    start: Path | None = None
    """The start database's read-only copy, attached as ``start``."""
    scan: Path | None = None
    """The project scan taken before the agent started."""
    project: Path | None = None
    """The dbt project ``project_scan`` scans at each call (None: it answers ``scan``)."""
    limits: QueryLimits = field(default_factory=QueryLimits)

    @classmethod
    def for_workspace(cls, ws: Workspace, date: dt.date | None,
                      limits: QueryLimits | None = None) -> ToolConfig:
        from spider2local.core.layout import QUERIES

        return cls(database=ws.database, audit=ws.artifacts / QUERIES, date=date, root=ws.root,
                   start=ws.start_copy, scan=ws.scan_path, project=ws.project_dir,
                   limits=limits or QueryLimits())

    def service(self, env: Mapping[str, str]) -> QueryService:
        """The service these settings describe; ``env`` is the query child's environment
        before the fake clock is laid over it."""
        child_env = dict(env)
        if self.date is not None:
            from spider2local.clock.faketime import LIBRARY_ENV, Clock, find_library

            library = env.get(LIBRARY_ENV)
            clock = Clock(self.date, Path(library) if library else find_library())
            child_env = clock.faked_env(env)
        return QueryService(self.database, child_env, self.audit, self.scan, self.limits,
                            root=self.root, start=self.start, project=self.project)

    def to_json(self) -> dict[str, Any]:
        data = {k: None if v is None else str(v) for k, v in asdict(self).items()
                if k != "limits"}
        return {"schema_version": SCHEMA_VERSION, **data, "limits": asdict(self.limits)}

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: Path) -> ToolConfig:
        fix = "write it with spider2local (ToolConfig.write) or pass --database"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UserError(f"cannot read the tool config: {exc.strerror or exc}",
                            path=path, fix=fix) from None
        except ValueError as exc:
            raise UserError(f"the tool config is not JSON ({exc})", path=path, fix=fix) from None
        try:
            return cls.from_json(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise UserError(f"bad tool config ({type(exc).__name__}: {exc})",
                            path=path, fix=fix) from None

    @classmethod
    def from_json(cls, data: Any) -> ToolConfig:
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        if data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            raise ValueError(f"schema_version {data.get('schema_version')!r} is not "
                             f"{SCHEMA_VERSION}")

        def path(key: str) -> Path | None:
            value = data.get(key)
            if value is None:
                return None
            if not isinstance(value, str) or not value:
                raise TypeError(f"{key} must be a path")
            return Path(value)

        database, audit = path("database"), path("audit")
        if database is None or audit is None:
            raise KeyError("database and audit are required")
        limits = data.get("limits") or {}
        if not isinstance(limits, dict):
            raise TypeError("limits must be an object")
        known = {k: float(v) if k != "max_rows" else int(v) for k, v in limits.items()
                 if k in ("max_rows", "timeout", "lock_wait")}
        date = data.get("date")
        return cls(database=database, audit=audit,
                   date=dt.date.fromisoformat(date) if date else None,
                   root=path("root"), start=path("start"), scan=path("scan"),
                   project=path("project"),
                   limits=QueryLimits(**known))  # type: ignore[arg-type]

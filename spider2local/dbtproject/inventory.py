"""Scan a dbt project offline: which declared models are done, stubbed or missing.

Spider2-DBT tasks are unfinished projects: the YML declares the models the gold expects (name,
description, columns), and the SQL is missing, empty, or present. An agent that knows this list
up front spends no turns rediscovering it, and the runner can report how far a result got.
Everything here reads files only (no dbt: importing it costs about 5 s), and never fails on a
broken file: an unparsable YML is listed in ``problems`` instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from spider2local.dbtproject.files import load_yaml
from spider2local.dbtproject.paths import ProjectPaths, project_paths


class ModelStatus(StrEnum):
    """How far a declared model's SQL is (a StrEnum: JSON and comparisons keep the words)."""

    COMPLETE = "complete"
    STUB = "stub"
    MISSING = "missing"


MODEL_SUFFIXES = (".sql", ".py")
YML_SUFFIXES = (".yml", ".yaml")

# A model is a stub when nothing is left after removing comments and config() calls: it has no
# query, so dbt would fail or build nothing useful. Jinja comments count as comments too.
_COMMENTS = re.compile(r"\{#.*?#\}|/\*.*?\*/|--[^\n]*", re.DOTALL)
_CONFIG_ONLY = re.compile(r"\{\{-?\s*config\s*\(.*?\)\s*-?\}\}", re.DOTALL)


@dataclass(frozen=True)
class ModelDecl:
    """One model declared in a YML ``models:`` list, and the state of its SQL."""

    name: str
    status: ModelStatus
    yml: str
    """The YML file declaring it, relative to the project."""
    sql: str | None
    """Its SQL (or Python) file relative to the project; None when missing."""
    description: str = ""
    columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourceDecl:
    name: str
    schema: str | None
    tables: tuple[str, ...]
    yml: str


@dataclass(frozen=True)
class MacroDecl:
    name: str
    path: str
    """Relative to the project (``dbt_packages/<pkg>/...`` for a package's macros, or under the
    project's ``packages-install-path``)."""
    package: str | None = None
    """None for the project's own macros."""


@dataclass(frozen=True)
class ProjectScan:
    """What the project declares and how much of it exists."""

    models: tuple[ModelDecl, ...]
    undeclared: tuple[str, ...]
    """Model files (relative paths) no YML declares: intermediate or helper models."""
    sources: tuple[SourceDecl, ...]
    macros: tuple[MacroDecl, ...]
    problems: tuple[str, ...] = ()

    def by_status(self, status: ModelStatus) -> tuple[ModelDecl, ...]:
        return tuple(m for m in self.models if m.status == status)

    @property
    def todo(self) -> tuple[ModelDecl, ...]:
        """Declared models the agent still has to write (stubs and missing ones)."""
        return tuple(m for m in self.models if m.status is not ModelStatus.COMPLETE)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> ProjectScan:
        data = json.loads(text)
        return cls(
            models=tuple(ModelDecl(**{**m, "status": ModelStatus(m["status"]),
                                      "columns": tuple(m["columns"])})
                         for m in data["models"]),
            undeclared=tuple(data["undeclared"]),
            sources=tuple(SourceDecl(**{**s, "tables": tuple(s["tables"])})
                          for s in data["sources"]),
            macros=tuple(MacroDecl(**m) for m in data["macros"]),
            problems=tuple(data.get("problems", ())),
        )


def scan_project(project_dir: Path) -> ProjectScan:
    """Scan ``project_dir`` (see module docstring)."""
    paths = project_paths(project_dir)
    problems = list(paths.problems)
    files = {p.stem: p for p in paths.files(paths.models, MODEL_SUFFIXES)}
    models: dict[str, ModelDecl] = {}
    sources: list[SourceDecl] = []
    for yml in paths.files(paths.models, YML_SUFFIXES):
        data, error = load_yaml(yml)
        rel = _rel(yml, project_dir)
        if error is not None:
            problems.append(f"{rel}: not valid YAML")
            continue
        for entry in _entries(data, "models"):
            if entry["name"] not in models:
                models[entry["name"]] = _model(entry, rel, files.get(entry["name"]), project_dir)
        sources += [_source(e, rel) for e in _entries(data, "sources")]
    undeclared = sorted(_rel(p, project_dir) for n, p in files.items() if n not in models)
    return ProjectScan(
        models=tuple(sorted(models.values(), key=lambda m: m.name)),
        undeclared=tuple(undeclared),
        sources=tuple(sources),
        macros=tuple(_macros(paths)),
        problems=tuple(problems),
    )


def sql_status(path: Path | None) -> ModelStatus:
    """``missing`` without a file, ``stub`` when it holds no query, else ``complete``."""
    if path is None or not path.is_file():
        return ModelStatus.MISSING
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ModelStatus.MISSING
    rest = _CONFIG_ONLY.sub("", _COMMENTS.sub("", text))
    return ModelStatus.COMPLETE if rest.strip() else ModelStatus.STUB


def _model(entry: dict[str, Any], yml: str, sql: Path | None, project: Path) -> ModelDecl:
    columns = tuple(c["name"] for c in _entries(entry, "columns"))
    return ModelDecl(
        name=entry["name"], status=sql_status(sql), yml=yml,
        sql=_rel(sql, project) if sql is not None else None,
        description=str(entry.get("description") or "").strip(), columns=columns,
    )


def _source(entry: dict[str, Any], yml: str) -> SourceDecl:
    schema = entry.get("schema")
    return SourceDecl(name=entry["name"], schema=str(schema) if schema is not None else None,
                      tables=tuple(t["name"] for t in _entries(entry, "tables")), yml=yml)


def _macros(paths: ProjectPaths) -> Iterator[MacroDecl]:
    """The project's macros, then every vendored package's (what ``{{ pkg.macro() }}`` can call)."""
    yield from _macro_files(paths.root, paths, None)
    for package in paths.packages():
        yield from _macro_files(paths.root, package, package.package_name)


_MACRO_DEF = re.compile(r"\{%-?\s*macro\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def _macro_files(project: Path, paths: ProjectPaths,
                 package: str | None) -> Iterator[MacroDecl]:
    for path in paths.files(paths.macros, (".sql",)):
        text = path.read_text(encoding="utf-8", errors="replace")
        for name in _MACRO_DEF.findall(text):
            yield MacroDecl(name=name, path=_rel(path, project), package=package)


def _entries(data: Any, key: str) -> Iterator[dict[str, Any]]:
    """The dict entries with a string ``name`` of ``data[key]``; anything malformed is skipped."""
    items = data.get(key) if isinstance(data, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"]:
            yield item


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()

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
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from spider2local.core.codec import dump, load
from spider2local.db.parse import SqlTooLong, parse
from spider2local.dbtproject.docblocks import DocIndex, doc_index, inside
from spider2local.dbtproject.files import load_yaml, project_config
from spider2local.dbtproject.paths import ProjectPaths, project_paths


class ModelStatus(StrEnum):
    """How far a declared model's SQL is (a StrEnum: JSON and comparisons keep the words)."""

    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    """SQL that stops mid-query (a CTE list with no final SELECT, a dangling comma): the
    project's author left it unfinished, so it must be written like a stub, not left alone."""
    STUB = "stub"
    MISSING = "missing"


MODEL_SUFFIXES = (".sql", ".py")
YML_SUFFIXES = (".yml", ".yaml")

# A model is a stub when nothing is left after removing comments and config() calls: it has no
# query, so dbt would fail or build nothing useful. Jinja comments count as comments too.
_COMMENTS = re.compile(r"\{#.*?#\}|/\*.*?\*/|--[^\n]*", re.DOTALL)
_CONFIG_ONLY = re.compile(r"\{\{-?\s*config\s*\(.*?\)\s*-?\}\}", re.DOTALL)


@dataclass(frozen=True)
class ColumnDoc:
    """A declared column's description, its ``{{ doc() }}`` calls resolved."""

    name: str
    description: str
    docs: tuple[str, ...] = ()
    """The ``.md`` files (relative to the project) whose doc blocks the text came from."""


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
    """Its description, ``{{ doc('...') }}`` calls replaced by their blocks' text."""
    columns: tuple[str, ...] = ()
    description_docs: tuple[str, ...] = ()
    """The ``.md`` files whose doc blocks :attr:`description` holds."""
    column_docs: tuple[ColumnDoc, ...] = ()
    """The columns that have a description (doc blocks resolved), in declared order."""


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
    body: str = ""
    """The macro's definition, for the project's own macros only (capped at
    :data:`MACRO_BODY_MAX`): what a model calling it really computes. Package macros are
    many and documented upstream, so only their names are kept."""


@dataclass(frozen=True)
class ProjectScan:
    """What the project declares and how much of it exists."""

    models: tuple[ModelDecl, ...]
    undeclared: tuple[str, ...]
    """Model files (relative paths) no YML declares: intermediate or helper models."""
    sources: tuple[SourceDecl, ...]
    macros: tuple[MacroDecl, ...]
    problems: tuple[str, ...] = ()
    edges: tuple[tuple[str, str], ...] = ()
    """``(model, what it refs)`` for every model file of the project, declared or not: which
    models a model reads and which read it (its descendants must be rebuilt after it)."""
    vars: tuple[tuple[str, str], ...] = ()
    """``dbt_project.yml`` ``vars:`` as (name, YAML text): vendored packages read their sources
    through these, so they say which tables a package model really reads."""

    def refs(self, name: str) -> tuple[str, ...]:
        return tuple(r for m, r in self.edges if m == name)

    def referenced_by(self, name: str) -> tuple[str, ...]:
        return tuple(m for m, r in self.edges if r == name)

    def siblings(self, model: ModelDecl) -> tuple[str, ...]:
        """The other models declared in the same YML file (written by the same author, in the
        same style: their columns and conventions are the best guide for a missing one)."""
        return tuple(m.name for m in self.models if m.yml == model.yml and m.name != model.name)

    def by_status(self, status: ModelStatus) -> tuple[ModelDecl, ...]:
        return tuple(m for m in self.models if m.status == status)

    @property
    def todo(self) -> tuple[ModelDecl, ...]:
        """Declared models the agent still has to write (stubs and missing ones)."""
        return tuple(m for m in self.models if m.status is not ModelStatus.COMPLETE)

    def to_json(self) -> str:
        """The scan as JSON text (:mod:`spider2local.core.codec`): the workspace keeps it for
        the prompt."""
        return json.dumps(dump(self), indent=2, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> ProjectScan:
        """Raises :class:`~spider2local.core.codec.RecordError` (a ``ValueError``) naming the
        field of a scan no reader can use."""
        return load(cls, json.loads(text))


def scan_project(project_dir: Path) -> ProjectScan:
    """Scan ``project_dir`` (see module docstring)."""
    paths = project_paths(project_dir)
    problems = list(paths.problems)
    files = {p.stem: p for p in paths.files(paths.models, MODEL_SUFFIXES)
             if inside(p, project_dir)}
    models: dict[str, ModelDecl] = {}
    sources: list[SourceDecl] = []
    docs = doc_index(paths)
    for yml in paths.files(paths.models, YML_SUFFIXES):
        rel = _rel(yml, project_dir)
        if not inside(yml, project_dir):
            problems.append(f"{rel}: leads outside the project (not read)")
            continue
        data, error = load_yaml(yml)
        if error is not None:
            problems.append(f"{rel}: not valid YAML")
            continue
        for entry in _entries(data, "models"):
            if entry["name"] not in models:
                model, missing = _model(entry, rel, files.get(entry["name"]), project_dir, docs)
                models[entry["name"]] = model
                problems += [f"{rel}: model {model.name} uses doc('{name}'), which no doc "
                             "block defines" for name in missing]
        sources += [_source(e, rel) for e in _entries(data, "sources")]
    undeclared = sorted(_rel(p, project_dir) for n, p in files.items() if n not in models)
    return ProjectScan(
        models=tuple(sorted(models.values(), key=lambda m: m.name)),
        undeclared=tuple(undeclared),
        sources=tuple(sources),
        macros=tuple(_macros(paths)),
        problems=tuple(problems),
        edges=tuple(sorted({(name, ref) for name, path in files.items()
                            for ref in model_refs(path)})),
        vars=_vars(project_dir),
    )


_REF = re.compile(r"""\bref\s*\(\s*(?:['"][^'"]*['"]\s*,\s*)?['"]([^'"]+)['"]""")
"""``ref('model')`` and the two-argument ``ref('package', 'model')``: the model name."""
VAR_TEXT_MAX = 200


def model_refs(path: Path) -> tuple[str, ...]:
    """The models a model file refs, in order of first use (Jinja comments skipped)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    return tuple(dict.fromkeys(_REF.findall(_COMMENTS.sub("", text))))


def _vars(project_dir: Path) -> tuple[tuple[str, str], ...]:
    cfg, _ = project_config(project_dir)
    found = cfg.get("vars") if isinstance(cfg, dict) else None
    if not isinstance(found, dict):
        return ()
    return tuple((str(k), _short(v if isinstance(v, str) else _flow(v)))
                 for k, v in found.items())


def _flow(value: Any) -> str:
    text: str = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").strip()


def _short(text: str, limit: int = VAR_TEXT_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sql_status(path: Path | None) -> ModelStatus:
    """``missing`` without a file, ``stub`` when it holds no query, ``incomplete`` when its query
    stops midway (:func:`unfinished`), else ``complete``."""
    if path is None or not path.is_file():
        return ModelStatus.MISSING
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ModelStatus.MISSING
    if text.startswith(TEMPLATE_MARK):
        return ModelStatus.STUB
    rest = _CONFIG_ONLY.sub("", _COMMENTS.sub("", text))
    if not rest.strip():
        return ModelStatus.STUB
    if path.suffix == ".sql" and unfinished(rest):
        return ModelStatus.INCOMPLETE
    return ModelStatus.COMPLETE


TEMPLATE_MARK = "-- spider2local template:"
"""First line of a starting file written by ``--templates``: the scan still calls it a stub,
whatever the agent-to-be would think of its placeholder query."""

# Jinja is stripped, not rendered: an expression becomes one identifier, a statement tag
# vanishes. That is exact for plain models whose Jinja is ref/source/var/this (the common case)
# and approximate once control flow is involved (both branches of an if stay).
_JINJA_EXPR = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_JINJA_STMT = re.compile(r"\{%.*?%\}", re.DOTALL)
_PLAIN_EXPR = re.compile(r"\{\{-?\s*(?:ref|source|var|this)\b[^{}]*\}\}", re.DOTALL)
_DANGLING = re.compile(
    r"(?:,|\(|\b(?:select|from|where|join|on|and|or|as|by|with|union|all|having|then|"
    r"when|else|case|in|not|distinct|using|over|partition|limit|offset|qualify))\s*\Z",
    re.IGNORECASE)
"""A query cannot end on these: a list still open, a clause with nothing after it."""
_AT_END = "at end of input"


def unfinished(sql: str) -> bool:
    """Whether model SQL (comments and config() already removed) stops mid-query.

    DuckDB's own parser decides, on the SQL with Jinja stripped. A parse error "at end of
    input" means the text stops where more must follow (the real case: a model that ends after
    its CTEs, ``... ),`` with no final SELECT); so does a last token that opens a list or a
    clause (DuckDB accepts a trailing comma in a SELECT list, so that check is textual). Any
    other parse error counts only when the Jinja was exact to strip: with macros or control
    flow, the stripped text is not what dbt compiles and a complete model must never be called
    unfinished (the prompt would send the agent to rewrite it).
    """
    import duckdb  # not at module level: the scan of a project without SQL never needs it

    exact = _JINJA_STMT.search(sql) is None and \
        _JINJA_EXPR.search(_PLAIN_EXPR.sub("", sql)) is None
    plain = _JINJA_EXPR.sub(" __jinja__ ", _JINJA_STMT.sub(" ", sql)).strip()
    if _DANGLING.search(plain.rstrip(";").rstrip()):
        return True
    try:
        parsed = parse(plain)
    except duckdb.ParserException as exc:
        return _AT_END in str(exc) or exact
    except (duckdb.Error, SqlTooLong):  # too long to parse: never sent to rewrite it
        return False
    return not parsed


def _model(entry: dict[str, Any], yml: str, sql: Path | None, project: Path,
           docs: DocIndex) -> tuple[ModelDecl, tuple[str, ...]]:
    """The declaration, and the doc names it uses that no block defines."""
    declared = list(_entries(entry, "columns"))
    description = docs.resolve(_text(entry.get("description")).strip())
    missing = list(description.missing)
    column_docs = []
    for column in declared:
        text = _text(column.get("description")).strip()
        if text:
            found = docs.resolve(text)
            missing += found.missing
            column_docs.append(ColumnDoc(column["name"], found.text, found.files))
    return ModelDecl(
        name=entry["name"], status=sql_status(sql), yml=yml,
        sql=_rel(sql, project) if sql is not None else None,
        description=description.text, columns=tuple(c["name"] for c in declared),
        description_docs=description.files, column_docs=tuple(column_docs),
    ), tuple(dict.fromkeys(missing))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


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


_MACRO_BLOCK = re.compile(r"\{%-?\s*macro\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(.*?"
                          r"\{%-?\s*endmacro\s*-?%\}", re.DOTALL)
MACRO_BODY_MAX = 1500


def _macro_files(project: Path, paths: ProjectPaths,
                 package: str | None) -> Iterator[MacroDecl]:
    for path in paths.files(paths.macros, (".sql",)):
        if not inside(path, project):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        bodies = {} if package is not None else \
            {m.group(1): _short(m.group(0), MACRO_BODY_MAX) for m in _MACRO_BLOCK.finditer(text)}
        for name in _MACRO_DEF.findall(text):
            yield MacroDecl(name=name, path=_rel(path, project), package=package,
                            body=bodies.get(name, ""))


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

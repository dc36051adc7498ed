"""Starting files for declared models that have no SQL (``--templates``, opt in).

The seed pipeline of the Spider2-DBT leaderboard pre-populates each missing model with its
declared columns and the relations it probably reads, so the agent starts from the contract
instead of a blank file. Each file's first line is :data:`~.inventory.TEMPLATE_MARK`, so the
scan keeps calling it a stub (the agent is still told to write it), and the query skeleton is
commented out: a ``dbt run`` before the agent wrote anything fails on it like on any stub
instead of building a table of placeholders.

Upstream relations are guessed from the project only, never from evaluation data: ``ref()``
calls in the model's YML entry (relationship tests) and the project's models and source tables
named in its description.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spider2local.dbtproject.files import load_yaml
from spider2local.dbtproject.inventory import TEMPLATE_MARK, ModelDecl, ModelStatus, ProjectScan
from spider2local.safepath import UnsafePath, child

_REF_TEXT = re.compile(r"""ref\(\s*['"]([^'"]+)['"]\s*\)""")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def templates(scan: ProjectScan, project: Path) -> dict[Path, str]:
    """``{path: text}`` of a starting file for every declared model without SQL. Paths sit next
    to the declaring YML and are checked to stay inside ``project``."""
    files: dict[Path, str] = {}
    for model in scan.by_status(ModelStatus.MISSING):
        folder = (project / model.yml).parent
        try:
            path = child(folder, f"{model.name}.sql")
            path.resolve().relative_to(project.resolve())
        except (UnsafePath, ValueError):
            continue  # a model name that is no file name: leave it to the agent
        files[path] = render(model, scan, _yml_refs(project / model.yml, model.name))
    return files


def render(model: ModelDecl, scan: ProjectScan, yml_refs: tuple[str, ...] = ()) -> str:
    refs, sources = upstream(model, scan, yml_refs)
    lines = [f"{TEMPLATE_MARK} a starting point for `{model.name}`; replace it with the "
             "model's query (this file still counts as a stub).",
             f"-- Declared in {model.yml}."]
    if model.description:
        lines += [f"-- Description: {line}" for line in model.description.splitlines()[:6]]
    lines.append("-- Columns declared in the YML (a minimum; keep the order):")
    lines += [f"--   {c}" for c in model.columns] or ["--   (none declared)"]
    lines.append("-- Relations it probably reads (guessed from its YML; check them):")
    lines += [f"--   {{{{ ref('{r}') }}}}" for r in refs]
    lines += [f"--   {{{{ source('{s}', '{t}') }}}}" for s, t in sources]
    if not refs and not sources:
        lines.append("--   (none found: read the sibling models and the sources)")
    lines += ["-- TODO: write the query. A skeleton:", "-- select"]
    cols = model.columns or ("...",)
    lines += [f"--     {c}{',' if i < len(cols) - 1 else ''}" for i, c in enumerate(cols)]
    first = (f"{{{{ ref('{refs[0]}') }}}}" if refs else
             f"{{{{ source('{sources[0][0]}', '{sources[0][1]}') }}}}" if sources else "...")
    lines += [f"-- from {first}", ""]
    return "\n".join(lines)


def upstream(model: ModelDecl, scan: ProjectScan,
             yml_refs: tuple[str, ...] = ()) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Models and source tables the model probably reads: refs in its YML entry, then project
    models and source tables its description names (never itself)."""
    text = " ".join(_WORD.findall(model.description.lower()))
    padded = f" {text} "

    def named(name: str) -> bool:  # "ad_spend" or "ad spend" as whole words
        return f" {name.lower()} " in padded or f" {name.lower().replace('_', ' ')} " in padded

    models = {m.name for m in scan.models} | {Path(p).stem for p in scan.undeclared}
    refs = [r for r in yml_refs if r != model.name]
    refs += sorted(n for n in models if n != model.name and n not in refs and named(n))
    sources = [(s.name, t) for s in scan.sources for t in s.tables if named(t)]
    return tuple(dict.fromkeys(refs)), tuple(dict.fromkeys(sources))


def _yml_refs(yml: Path, name: str) -> tuple[str, ...]:
    data, error = load_yaml(yml)
    if error is not None or not isinstance(data, dict):
        return ()
    for entry in _models(data):
        if entry.get("name") == name:
            return tuple(dict.fromkeys(_REF_TEXT.findall(_flatten(entry))))
    return ()


def _models(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    items = data.get("models")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            yield item


def _flatten(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(f"{k} {_flatten(v)}" for k, v in value.items())
    if isinstance(value, list):
        return " ".join(_flatten(v) for v in value)
    return str(value)

"""The Claude agent's texts: templates from ``prompts/`` filled with what the agent may know.

What goes in: the task's instruction, its fixed date, the project scan and the start database's
snapshot (both written by the workspace). What never goes in: anything from ``TaskSpec.gold``
or ``TaskSpec.graded_tables``; this module does not read them at all, so a prompt cannot leak
the graded table names or the gold (tests/agents/test_prompts.py checks it).

Templates use :class:`string.Template` (``$name``) so SQL and Jinja braces need no escaping.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from string import Template

from spider2local.dataset.task import TaskSpec
from spider2local.db.snapshot import DbSnapshot
from spider2local.dbtproject.inventory import ModelDecl, ModelStatus, ProjectScan
from spider2local.resources import prompts_dir
from spider2local.workspace.model import Workspace

VERIFIER = "verifier"
"""The subagent's name, as the agent passes it in ``subagent_type``."""
MAX_TABLES = 80
MAX_COLUMNS = 40
"""Caps that keep a huge database from flooding the system prompt; the tools show the rest."""

_VERDICT = re.compile(r"VERDICT:\s*(PASS|FAIL)\b", re.IGNORECASE)


def template(name: str, root: Path | None = None) -> Template:
    """The template ``name`` from ``root`` (``--prompts DIR``), else the bundled prompts/."""
    return _template(root if root is not None else prompts_dir(), name)


@cache
def _template(root: Path, name: str) -> Template:
    return Template((root / name).read_text(encoding="utf-8"))


def render_scan(scan: ProjectScan, snapshot: DbSnapshot | None = None) -> str:
    """Models to write first (with their YML, columns, neighbours and start-database table),
    then what exists already, sources, project vars and macros (with their bodies)."""
    lines: list[str] = []
    todo = scan.todo
    if todo:
        lines.append("Models declared in YML whose SQL is missing, a stub or unfinished "
                     "(write these):")
        for m in todo:
            where = m.sql or f"no SQL file yet (declared in {m.yml})"
            lines.append(f"- {m.name} [{m.status}] {where}")
            lines += [f"  {line}" for line in _model_facts(m, scan, snapshot)]
    else:
        lines.append("Every model declared in YML has SQL; the task may need changes to them.")
    done = scan.by_status(ModelStatus.COMPLETE)
    if done:
        lines.append("Complete models (leave them alone unless the task asks for a change):")
        lines += [f"- {m.name}: {_start_tag(m.name, snapshot)}; {_neighbours(m.name, scan)}"
                  for m in done]
    if scan.undeclared:
        lines.append("Model files not declared in any YML: " + ", ".join(scan.undeclared))
    for source in scan.sources:
        lines.append(f"Source {source.name} (schema {source.schema or 'main'}): "
                     + ", ".join(source.tables))
    if scan.vars:
        lines.append("Project vars (dbt_project.yml; packages read their sources through "
                     "these): " + "; ".join(f"{k} = {v}" for k, v in scan.vars[:MAX_VARS]))
    own = sorted((m for m in scan.macros if m.package is None), key=lambda m: m.name)
    if own:
        lines.append("Project macros:")
        budget = MAX_MACRO_TEXT
        for macro in own:
            body = macro.body if len(macro.body) <= budget else ""
            budget -= len(body)
            lines.append(f"- {macro.name} ({macro.path})" + (f":\n{_indent(body)}" if body
                                                              else ""))
    packages = sorted({m.package for m in scan.macros if m.package})
    if packages:
        lines.append("Installed packages (dbt_packages/): " + ", ".join(packages))
    lines += [f"Problem noticed while scanning: {p}" for p in scan.problems]
    return "\n".join(lines)


MAX_VARS = 40
MAX_MACRO_TEXT = 6000
"""Caps on the scan text: the project_scan tool has everything."""


def _model_facts(model: ModelDecl, scan: ProjectScan, snapshot: DbSnapshot | None) -> list[str]:
    cols = ", ".join(model.columns) if model.columns else "(no columns declared)"
    facts = []
    if model.description:
        facts.append("description" + _from_docs(model.description_docs) + ": "
                     + _fold(model.description, MAX_DESCRIPTION))
    facts += [f"YML columns (a minimum): {cols}"]
    if model.column_docs:
        facts.append("column descriptions (the specification; doc blocks resolved):")
        budget = MAX_COLUMN_DOCS
        for column in model.column_docs:
            line = f"  - {column.name}{_from_docs(column.docs)}: " \
                   f"{_fold(column.description, MAX_COLUMN_DOC)}"
            if len(line) > budget:
                facts.append("  - ... the rest in the project scan (or the YML file)")
                break
            budget -= len(line)
            facts.append(line)
    facts += [f"start DB: {_start_tag(model.name, snapshot)}", _neighbours(model.name, scan)]
    siblings = scan.siblings(model)
    if siblings:
        facts.append("siblings (same YML): " + ", ".join(siblings[:20]))
    return facts


MAX_DESCRIPTION = 1200
MAX_COLUMN_DOC = 400
MAX_COLUMN_DOCS = 6000
"""Characters of a model's description, of one column's, and of all its columns' in the
prompt (the project_scan tool has them whole)."""


def _fold(text: str, limit: int) -> str:
    folded = " ".join(text.split())
    return folded if len(folded) <= limit else folded[: limit - 1] + "…"


def _from_docs(files: Sequence[str]) -> str:
    """`` (doc block in models/docs.md)``: where a description's text was written."""
    if not files:
        return ""
    return f" (doc block{'s' if len(files) > 1 else ''} in {', '.join(files)})"


def _neighbours(name: str, scan: ProjectScan) -> str:
    refs = ", ".join(scan.refs(name)) or "nothing yet"
    users = ", ".join(scan.referenced_by(name)) or "no model"
    return f"refs: {refs}; referenced by: {users}"


def _start_tag(name: str, snapshot: DbSnapshot | None) -> str:
    """"exists in start DB (N rows, columns ...)" or "not in the database": the table a model
    builds, as the project shipped it (the shape to match; dbt replaces it on the first build)."""
    if snapshot is None:
        return "unknown (no snapshot)"
    found = [t for t in snapshot.tables if t.name.lower() == name.lower()]
    if not found:
        return "not in the database"
    t = found[0]
    rows = "rows unknown" if t.rows is None else f"{t.rows} rows"
    cols = ", ".join(f"{c.name} {c.type}" for c in t.columns[:MAX_COLUMNS])
    more = f", ... {len(t.columns) - MAX_COLUMNS} more" if len(t.columns) > MAX_COLUMNS else ""
    return f"exists in start DB as start.{t.schema}.{t.name} ({t.kind}, {rows}, columns " \
           f"{cols}{more})"


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def render_database(snapshot: DbSnapshot) -> str:
    """One line per table: schema.name (kind, rows): column type, ..."""
    lines = []
    for table in snapshot.tables[:MAX_TABLES]:
        rows = "rows unknown" if table.rows is None else f"{table.rows} rows"
        cols = ", ".join(f"{c.name} {c.type}" for c in table.columns[:MAX_COLUMNS])
        more = f", ... {len(table.columns) - MAX_COLUMNS} more" \
            if len(table.columns) > MAX_COLUMNS else ""
        lines.append(f"- {table.schema}.{table.name} ({table.kind}, {rows}): {cols}{more}")
    if len(snapshot.tables) > MAX_TABLES:
        lines.append(f"- ... {len(snapshot.tables) - MAX_TABLES} more tables: "
                     "use mcp__spider2__list_tables")
    return "\n".join(lines) or "(the database has no tables yet)"


def _read(path: Path | None) -> str | None:
    return path.read_text(encoding="utf-8") if path is not None and path.is_file() else None


def _database_text(ws: Workspace) -> str:
    """The start database's facts (from the workspace snapshot), shared by both prompts."""
    snapshot_text = _read(ws.snapshot_path)
    return render_database(DbSnapshot.from_json(snapshot_text)) if snapshot_text \
        else "(no snapshot available: use mcp__spider2__list_tables)"


PACKAGES_OK = "packages that are needed are already in `dbt_packages/`."


def render_setup_problems(problems: Sequence[str], shown: Sequence[str] = ()) -> str:
    """The packages sentence of the prompt: true only when preparation found no problem.

    A missing package makes ``dbt run`` refuse to start and ``dbt deps`` cannot fetch it
    offline, so the agent must hear it rather than be told everything is installed. Problems
    already listed with the scan (``shown``) are not repeated.
    """
    rest = [p for p in problems if p not in shown]
    if not problems:
        return PACKAGES_OK
    if not rest:
        return "see the problems listed with the project below before running dbt."
    listed = "\n".join(f"  - {p}" for p in rest)
    return ("NOT everything is in place; preparing this workspace found these problems (dbt may "
            "refuse to run until you work around them, e.g. by writing the needed macros "
            "yourself):\n" + listed)


def _task_facts(task: TaskSpec, ws: Workspace) -> dict[str, str]:
    """What every agent's instruction says of the task: the text, the date, where it works,
    the project scan, the start database, the setup problems (one owner for both templates)."""
    scan_text = _read(ws.scan_path)
    parsed = ProjectScan.from_json(scan_text) if scan_text else None
    snapshot_text = _read(ws.snapshot_path)
    snapshot = DbSnapshot.from_json(snapshot_text) if snapshot_text else None
    scan = render_scan(parsed, snapshot) if parsed is not None \
        else "(no project scan available: read the YML files under models/)"
    setup = render_setup_problems(ws.problems, parsed.problems if parsed is not None else ())
    return {"instruction": task.instruction.strip(), "date": task.date.isoformat(),
            "project_dir": str(ws.project_dir), "database_file": ws.database.name,
            "scan": scan, "database": _database_text(ws), "setup_problems": setup}


def render_pacing(max_turns: int | None, seconds: float | None) -> str:
    """The time sentence of the system prompt: the session's turns and minutes, so the agent
    can pace itself (real runs without one spent the end polishing and were cut unbuilt)."""
    limits = []
    if max_turns is not None:
        limits.append(f"at most {max_turns} turns")
    if seconds is not None:
        limits.append(f"{max(1, round(seconds / 60))} minutes")
    budget = " and ".join(limits) if limits else "a limited number of turns and minutes"
    return (f"you have {budget} for the whole task, dbt runs included; the session is "
            "stopped at either limit and the database as it is then is your result. Build "
            "early, then improve. Bash stops a command after "
            f"{BASH_TIMEOUT_MS // 60_000} minutes unless you pass a longer `timeout` "
            "(milliseconds) for a long dbt run.")


BASH_TIMEOUT_MS = 10 * 60_000
"""What :func:`spider2local.agents.claude.support.cli_env` gives the CLI as
``BASH_DEFAULT_TIMEOUT_MS`` (the CLI's own default, 2 minutes, cut long dbt runs of large
projects on a loaded machine; the prompt says the figure, so it lives here)."""


def system_prompt(task: TaskSpec, ws: Workspace, root: Path | None = None, *,
                  max_turns: int | None = None, seconds: float | None = None) -> str:
    """The main agent's system prompt; ``max_turns`` and ``seconds`` are the session's limits
    (``$pacing``; a ``--prompts`` kit without the placeholder simply does not say them)."""
    return template("agent.md", root).substitute(**_task_facts(task, ws),
                                                 pacing=render_pacing(max_turns, seconds))


COMMAND_TEMPLATE = "command.md"
"""The instruction file of command agents: the task facts of ``agent.md`` without the Claude
session's tool names (no Agent tool, no ``mcp__spider2__...``)."""


def command_instruction(task: TaskSpec, ws: Workspace, deadline: str,
                        root: Path | None = None) -> str:
    """The instruction a command agent gets in ``$SPIDER2_INSTRUCTION`` and its file. A
    ``--prompts`` folder without ``command.md`` falls back to the bundled one."""
    use = root if root is not None and (root / COMMAND_TEMPLATE).is_file() else None
    return template(COMMAND_TEMPLATE, use).substitute(**_task_facts(task, ws), deadline=deadline)


def verifier_prompt(task: TaskSpec, ws: Workspace, root: Path | None = None) -> str:
    """The verifier's prompt: the same task, date and start-database facts the agent was given,
    so it can compare row counts with what the sources held before the work began."""
    return template("verifier.md", root).substitute(instruction=task.instruction.strip(),
                                              date=task.date.isoformat(),
                                              database=_database_text(ws))


def verify_request(root: Path | None = None) -> str:
    return template("verify_request.md", root).substitute()


def fix_request(report: str, root: Path | None = None) -> str:
    return template("fix_request.md", root).substitute(report=report.strip()
                                                       or "(empty report)")


def parse_verdict(report: str) -> bool | None:
    """True for PASS, False for FAIL (the last verdict line wins), None when there is none."""
    found = _VERDICT.findall(report)
    return None if not found else found[-1].upper() == "PASS"

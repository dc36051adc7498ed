"""What one task left in its run folder, read for people: the files the agent wrote (as a diff
against the start project), the queries it ran, its dbt errors, its transcript in readable
entries, the verifier's reports, and the integrity evidence.

Everything is read from the task's folder alone. The diff's "before" side is the copy of the
start project the runner keeps (``start_project/``, written when the workspace is prepared);
a run made before that copy existed falls back to the dataset's project when the run's
recorded dataset is still reachable, and otherwise lists the files as the agent left them,
saying so (:attr:`TaskDetails.diff_source`).

Outputs are kept as text a person reads: terminal escapes stripped (dbt colours its output
and its error messages, :func:`spider2local.clock.dbt.strip_ansi`), a tool call's input kept
key by key as strings (a written file's content with its real newlines), and a cut output
with its whole size (:func:`size_text`).

Every reader here is defensive: a missing, truncated or hand-edited file yields less detail,
never an exception (one broken task must not stop the report of the others). Sizes are capped
so one huge transcript cannot make an unusable page. A run folder may come from elsewhere (a CI
artifact): a file of the task folder is read only when it is a plain regular file below it
(:func:`spider2local.workspace.guard.is_workspace_file`), since a link named ``error.txt`` once
put a file of this machine into the page, and a FIFO named like a log hung the report.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.clock.dbt import strip_ansi
from spider2local.core import upstream
from spider2local.core.layout import (
    DBT_LOGS,
    ERROR_TRACEBACK,
    PROJECT_FILES,
    QUERIES,
    RESULT,
    START_PROJECT,
    TRANSCRIPT,
)
from spider2local.workspace.guard import is_workspace_file

MAX_TEXT = 20_000
"""Characters kept of one transcript entry, query, diff or traceback."""
MAX_ENTRIES = 2_000
"""Transcript entries and queries kept per task."""
MAX_LINE = 4_000_000
"""Characters read of one JSON line; a longer line is skipped whole, not held in memory."""
OUTPUT_KINDS = frozenset({"stdout", "stderr"})
"""Transcript kinds whose text is a process's whole output (a command agent's streams): folded
with their size, like a tool's result."""


@dataclass(frozen=True)
class FileChange:
    path: str
    change: str
    """``added``, ``changed``, ``removed`` or ``as left`` (no start copy to compare with)."""
    diff: str


@dataclass(frozen=True)
class Query:
    sql: str
    rows: int | None
    seconds: float | None
    error: str | None


@dataclass(frozen=True)
class Entry:
    """One readable step of the transcript."""

    kind: str
    """``prompt``, ``assistant``, ``thinking``, ``tool call``, ``tool result``, ``tool error``,
    ``result``, ``subagent`` (its report), a command agent's ``stdout`` / ``stderr``, or the
    runner's own kinds (``attempt``...)."""
    title: str
    text: str
    inputs: tuple[tuple[str, str], ...] = ()
    """A tool call's input, key by key: a string value as it is (a file's content reads as
    text, never as a ``\\n``-escaped JSON string), anything else as indented JSON."""
    tool_id: str = ""
    """A tool call's id, or the id of the call a tool result answers."""
    parent: str = ""
    """For a message of a subagent (the verifier): the id of the tool call that started it."""
    size: str = ""
    """A tool result's or an output's whole size before any cut (``4,812 lines, 212 KB``)."""


@dataclass(frozen=True)
class TaskDetails:
    task_id: str
    files: tuple[FileChange, ...] = ()
    diff_source: str = ""
    queries: tuple[Query, ...] = ()
    transcript: tuple[Entry, ...] = ()
    subagent_reports: tuple[Entry, ...] = ()
    """What subagents (the verifier) answered: the verifier's findings."""
    dbt_errors: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    """The integrity scan's evidence lines (empty for a clean task)."""
    traceback: str = ""


def size_text(text: str) -> str:
    """``text``'s size as a person reads it: ``4,812 lines, 212 KB`` (``1 line, 12 bytes``)."""
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    size = len(text.encode("utf-8", errors="replace"))
    amount = f"{size:,} bytes" if size < 1024 else f"{size / 1024:,.0f} KB" \
        if size < 1024 * 1024 else f"{size / 1024 / 1024:,.1f} MB"
    return f"{lines:,} line{'' if lines == 1 else 's'}, {amount}"


def _output(text: str) -> tuple[str, str]:
    """A tool's or a command's output as shown: no terminal escapes (dbt colours everything),
    cut to :data:`MAX_TEXT`, with its whole size."""
    plain = strip_ansi(text)
    return _cut(plain), size_text(plain)


def _inputs(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        return (("input", _cut(json.dumps(value, indent=2, ensure_ascii=False,
                                          default=str))),) if value is not None else ()
    return tuple((str(k), _cut(v if isinstance(v, str) else json.dumps(
        v, indent=2, ensure_ascii=False, default=str))) for k, v in value.items())


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… [{len(text) - limit} more " \
                                                          "characters cut]"


def _plain(task_dir: Path, path: Path) -> bool:
    """Whether ``path`` (below ``task_dir``) is a plain file of the task folder, safe to read."""
    return is_workspace_file(task_dir, path)


def _json_lines(task_dir: Path, path: Path) -> Iterator[dict[str, Any]]:
    if not _plain(task_dir, path):
        return
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for _ in range(MAX_ENTRIES):
                line = fh.readline(MAX_LINE)
                if not line:
                    return
                if len(line) >= MAX_LINE and not line.endswith("\n"):
                    while (rest := fh.readline(MAX_LINE)) and not rest.endswith("\n"):
                        pass
                    continue
                try:
                    item = json.loads(line)
                except ValueError:
                    continue
                if isinstance(item, dict):
                    yield item
    except OSError:
        return


def _read(path: Path, task_dir: Path | None = None) -> str | None:
    """The file's text; with ``task_dir``, only a plain file of that task folder."""
    if task_dir is not None and not _plain(task_dir, path):
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _text_files(root: Path) -> dict[str, Path]:
    if not root.is_dir() or root.is_symlink():
        return {}
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def project_changes(task_dir: Path, start: Path | None) -> tuple[FileChange, ...]:
    """The agent's files against ``start`` (unified diffs); without ``start``, every file as
    left. Unchanged files are left out."""
    after = _text_files(task_dir / PROJECT_FILES)
    if start is None:
        return tuple(FileChange(rel, "as left", _cut(_read(p) or "")) for rel, p in after.items())
    before = _text_files(start)
    changes = []
    for rel in sorted(set(before) | set(after)):
        old = _read(before[rel]) if rel in before else None
        new = _read(after[rel]) if rel in after else None
        if old == new:
            continue
        change = "added" if old is None else "removed" if new is None else "changed"
        diff = "".join(difflib.unified_diff(
            (old or "").splitlines(keepends=True), (new or "").splitlines(keepends=True),
            fromfile=f"start/{rel}", tofile=f"agent/{rel}"))
        changes.append(FileChange(rel, change, _cut(diff)))
    return tuple(changes)


def _start_project(task_dir: Path, dataset: str | None) -> tuple[Path | None, str]:
    kept = task_dir / START_PROJECT
    if kept.is_dir():
        return kept, "the start project kept in the run folder"
    if dataset:
        project = upstream.project_dir(Path(dataset), task_dir.name)
        if project.is_dir():
            return project, f"the dataset's project {project} (this run kept no start copy)"
    return None, "the files as the agent left them (no start copy kept, dataset not reachable)"


def _queries(task_dir: Path) -> tuple[Query, ...]:
    def number(value: Any) -> float | None:
        return float(value) if isinstance(value, int | float) and \
            not isinstance(value, bool) else None

    out = []
    for item in _json_lines(task_dir, task_dir / QUERIES):
        rows = item.get("rows")
        out.append(Query(_cut(str(item.get("sql", ""))),
                         rows if isinstance(rows, int) and not isinstance(rows, bool) else None,
                         number(item.get("duration")),
                         None if item.get("error") is None else _cut(str(item["error"]))))
    return tuple(out)


def _block_entries(block: Mapping[str, Any], role: str, parent: str = "") -> Iterator[Entry]:
    if "text" in block and role == "assistant":
        yield Entry("assistant", "assistant", _cut(str(block["text"])), parent=parent)
    elif "thinking" in block:
        yield Entry("thinking", "thinking", _cut(str(block["thinking"])), parent=parent)
    elif "name" in block and "input" in block:
        body = json.dumps(block.get("input"), indent=2, ensure_ascii=False, default=str)
        yield Entry("tool call", str(block["name"]), _cut(body), inputs=_inputs(block["input"]),
                    tool_id=str(block.get("id") or ""), parent=parent)
    elif "tool_use_id" in block:
        kind = "tool error" if block.get("is_error") else "tool result"
        text, size = _output(_content(block.get("content")))
        yield Entry(kind, f"result of {block['tool_use_id']}", text,
                    tool_id=str(block["tool_use_id"]), parent=parent, size=size)
    elif "text" in block:
        yield Entry(role, role, _cut(str(block["text"])), parent=parent)


def _content(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) if isinstance(c, dict) else str(c)
                         for c in content)
    return "" if content is None else str(content)


def transcript_entries(path: Path) -> tuple[tuple[Entry, ...], tuple[Entry, ...]]:
    """The transcript as readable entries, and the subagents' reports (the verifier's
    findings: the results of tool calls that named a ``subagent_type``)."""
    entries: list[Entry] = []
    reports: list[Entry] = []
    subagents: dict[str, str] = {}
    for line in _json_lines(path.parent, path):
        kind, data = str(line.get("kind", "")), line.get("data")
        if kind in OUTPUT_KINDS and isinstance(data, str):
            if data:  # a command agent's streams: outputs, folded like a tool's
                text, size = _output(data)
                entries.append(Entry(kind, kind, text, size=size))
            continue
        if isinstance(data, str):
            entries.append(Entry(kind, kind, _cut(strip_ansi(data))))
            continue
        if not isinstance(data, dict):
            continue
        content = data.get("content")
        if kind == "command" and isinstance(data.get("command"), str):
            # a command agent's command line: shown as the shell command it is
            entries.append(Entry("tool call", "command", _cut(data["command"]),
                                 inputs=_inputs({"command": data["command"], **{
                                     k: v for k, v in data.items() if k != "command"}})))
            continue
        if kind in ("AssistantMessage", "UserMessage") and isinstance(content, list):
            role = "assistant" if kind == "AssistantMessage" else "user"
            parent = data.get("parent_tool_use_id")
            for block in content:
                if not isinstance(block, dict):
                    continue
                inputs = block.get("input")
                if isinstance(inputs, dict) and inputs.get("subagent_type"):
                    subagents[str(block.get("id"))] = str(inputs["subagent_type"])
                for entry in _block_entries(block, role,
                                            parent if isinstance(parent, str) else ""):
                    entries.append(entry)
                    who = subagents.get(str(block.get("tool_use_id")))
                    if who is not None and entry.kind == "tool result":
                        reports.append(Entry("subagent", who, entry.text))
        elif kind == "UserMessage" and isinstance(content, str):
            entries.append(Entry("user", "user", _cut(content)))
        elif kind == "ResultMessage":
            text = f"{data.get('subtype', '')}: {data.get('result') or ''}".strip(": ")
            entries.append(Entry("result", "result", _cut(text)))
        elif kind != "SystemMessage":
            entries.append(Entry(kind, kind, _cut(json.dumps(data, indent=2, default=str))))
    return tuple(entries), tuple(reports)


def _dbt_errors(task_dir: Path) -> tuple[str, ...]:
    """Each distinct node error of the trial's dbt calls, once, in call order. The plain
    ``run_results.json`` is a copy of the last call's (collected beside the numbered records)
    and is read only when there are no records; an error that several calls repeat is shown
    once too: it is one thing to fix."""
    paths = sorted((task_dir / DBT_LOGS).glob("*run_results*.json"))
    numbered = [p for p in paths if p.name != "run_results.json"]
    out: list[str] = []
    for path in numbered or paths:
        if not _plain(task_dir, path):
            continue
        try:
            results = json.loads(path.read_text(encoding="utf-8")).get("results") or []
        except (OSError, ValueError, AttributeError):
            continue
        for item in results if isinstance(results, list) else []:
            if isinstance(item, dict) and item.get("status") in ("error", "fail",
                                                                  "runtime error"):
                text = _cut(strip_ansi(f"{item.get('unique_id', '?')}: "
                                       f"{item.get('message') or ''}"))
                if text not in out:
                    out.append(text)
    return tuple(out)


def _evidence(task_dir: Path) -> tuple[str, ...]:
    text = _read(task_dir / RESULT, task_dir)
    try:
        found = json.loads(text).get("integrity_evidence") if text else None
    except (ValueError, AttributeError):
        return ()
    if not isinstance(found, list):
        return ()
    return tuple(_cut(" ".join(f"{k}: {v}" for k, v in e.items()) if isinstance(e, dict)
                      else str(e), 2_000) for e in found)


def load_details(task_dir: Path, dataset: str | None = None) -> TaskDetails:
    """Everything readable about one task in ``task_dir`` (see the module docstring)."""
    start, source = _start_project(task_dir, dataset)
    transcript, reports = transcript_entries(task_dir / TRANSCRIPT)
    return TaskDetails(
        task_id=task_dir.name, files=project_changes(task_dir, start), diff_source=source,
        queries=_queries(task_dir), transcript=transcript, subagent_reports=reports,
        dbt_errors=_dbt_errors(task_dir), evidence=_evidence(task_dir),
        traceback=_cut(_read(task_dir / ERROR_TRACEBACK, task_dir) or ""))

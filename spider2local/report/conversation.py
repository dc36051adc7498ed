"""A task's transcript as a conversation for the HTML report.

The prompt and the agent's text read as prose; each tool call shows its name and its input as
what it is: a Bash command (or a command agent's command line) as a shell block, a Write as the
file's content, an Edit as a diff of what it replaced, a database query as highlighted SQL, a
subagent's call as its prompt. Each call's result is folded right under it (``<details>``),
saying its size, since results are most of a transcript's length and rarely what one reads
first; a result that is an error says so in its summary. Messages of a subagent (the verifier)
are indented under its name. The runner's own entries (attempt, dbt calls, outcome) are one
short line each, their data folded.

Everything arrives escaped by :mod:`.htmlcode`; terminal escapes were already stripped when the
entries were read (:mod:`.details`).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence

from spider2local.report.details import Entry, size_text
from spider2local.report.htmlcode import (
    FOLD_LINES,
    code_html,
    diff_html,
    e,
    first_line,
    folded,
    line_count,
)

SHELL_TOOLS = frozenset({"Bash", "command", "BashOutput"})
SQL_KEYS = ("sql", "query")
SUBAGENT_TOOLS = frozenset({"Agent", "Task"})
PROSE_KINDS = {"prompt": "prompt", "follow_up": "follow-up", "user": "user",
               "assistant": "assistant", "result": "final result"}


def _language(path: str) -> str:
    return "sql" if path.lower().endswith(".sql") else "shell" if path.endswith(".sh") else ""


def _block(text: str, language: str = "", label: str = "") -> str:
    """A code block, folded when longer than :data:`FOLD_LINES` (its size in the summary)."""
    block = code_html(text, language)
    lines = line_count(text)
    if lines <= FOLD_LINES:
        return block
    return folded(f"{e(label or first_line(text))} <span class=\"size\">"
                  f"{e(size_text(text))}</span>", block, css="fold code-fold")


def _edit_diff(old: str, new: str) -> str:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=2))
    return diff_html("\n".join(lines[2:]) if len(lines) > 2 else "")


def _tool_body(name: str, inputs: Mapping[str, str]) -> tuple[str, str]:
    """The call's caption (short facts, markup) and its body (markup)."""
    shown: set[str] = set()

    def take(key: str) -> str:
        shown.add(key)
        return inputs.get(key, "")

    body = ""
    caption = ""
    if name in SHELL_TOOLS and "command" in inputs:
        body = _block(take("command"), "shell")
        caption = e(take("description"))
    elif "file_path" in inputs and "content" in inputs:  # Write
        path = take("file_path")
        caption = f'<code class="path">{e(path)}</code>'
        body = _block(take("content"), _language(path), label="content")
    elif "file_path" in inputs and "old_string" in inputs:  # Edit
        caption = f'<code class="path">{e(take("file_path"))}</code>'
        body = _edit_diff(take("old_string"), take("new_string"))
    elif "file_path" in inputs and "edits" in inputs:  # MultiEdit
        caption = f'<code class="path">{e(take("file_path"))}</code>'
        try:
            edits = json.loads(take("edits"))
        except ValueError:
            edits = None
        if isinstance(edits, list):
            body = "".join(_edit_diff(str(x.get("old_string", "")), str(x.get("new_string", "")))
                           for x in edits if isinstance(x, dict))
        else:
            body = _block(inputs["edits"])
    elif any(k in inputs for k in SQL_KEYS):
        key = next(k for k in SQL_KEYS if k in inputs)
        body = _block(take(key), "sql")
    elif name in SUBAGENT_TOOLS and "prompt" in inputs:
        caption = e(take("subagent_type") or take("description"))
        body = f'<div class="prose">{_prose(take("prompt"))}</div>'
    elif "file_path" in inputs:
        caption = f'<code class="path">{e(take("file_path"))}</code>'
    rest = [(k, v) for k, v in inputs.items() if k not in shown]
    short = [(k, v) for k, v in rest if "\n" not in v and len(v) <= 80]
    long = [(k, v) for k, v in rest if (k, v) not in short]
    if short:
        caption += (" " if caption else "") + " ".join(
            f'<span class="arg"><span class="key">{e(k)}</span>={e(v)}</span>' for k, v in short)
    for key, value in long:
        body += f'<div class="arg-name">{e(key)}</div>' + _block(value, label=key)
    return caption, body


def _prose(text: str) -> str:
    """Agent text as prose: escaped, its lines kept, and fenced code (```) as code blocks."""
    parts = text.split("```")
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(f'<span class="para">{e(part.strip(chr(10)))}</span>' if part.strip()
                       else "")
        else:
            language, _, code = part.partition("\n")
            out.append(code_html(code.rstrip("\n"), "sql" if language.strip().lower() == "sql"
                                 else "shell" if language.strip() in ("sh", "bash", "shell")
                                 else ""))
    return "".join(out)


def _output(entry: Entry, label: str) -> str:
    error = entry.kind == "tool error"
    size = entry.size or size_text(entry.text)
    summary = (f'<span class="{"err" if error else "ok"}">{e(label)}</span> '
               f'<span class="size">{e(size)}</span> '
               f'<span class="peek">{e(first_line(entry.text, 100))}</span>')
    return folded(summary, f'<pre class="out">{e(entry.text)}</pre>',
                  css="result error" if error else "result")


def _who(entry: Entry, subagents: Mapping[str, str]) -> str:
    return subagents.get(entry.parent, "subagent") if entry.parent else ""


def _message(entry: Entry, who: str, body: str, css: str) -> str:
    label = f"{who} › " if who else ""
    return (f'<div class="msg {css}{" sub" if who else ""}"><div class="who">{e(label)}'
            f"{e(PROSE_KINDS.get(entry.kind, entry.kind))}</div>{body}</div>")


def transcript_html(entries: Sequence[Entry]) -> str:
    """The transcript (see the module docstring); ``""`` for none."""
    subagents = {x.tool_id: dict(x.inputs).get("subagent_type", "subagent") for x in entries
                 if x.kind == "tool call" and "subagent_type" in dict(x.inputs)}
    results: dict[str, Entry] = {}
    for x in entries:
        if x.kind in ("tool result", "tool error") and x.tool_id and x.tool_id not in results:
            results[x.tool_id] = x
    calls = {x.tool_id for x in entries if x.kind == "tool call" and x.tool_id}
    out = []
    for x in entries:
        who = _who(x, subagents)
        if x.kind in PROSE_KINDS:
            out.append(_message(x, who, f'<div class="prose">{_prose(x.text)}</div>',
                                "final" if x.kind == "result" else x.kind.replace("_", "-")))
        elif x.kind == "thinking":
            out.append(_message(x, who, folded(e(first_line(x.text)), f'<div class="prose">'
                                               f"{_prose(x.text)}</div>"), "thinking"))
        elif x.kind == "tool call":
            caption, body = _tool_body(x.title, dict(x.inputs))
            answer = results.get(x.tool_id) if x.tool_id else None
            result = _output(answer, "error" if answer.kind == "tool error" else "result") \
                if answer is not None else ""
            out.append(f'<div class="tool{" sub" if who else ""}"><div class="tool-head">'
                       + (f'<span class="who">{e(who)} ›</span> ' if who else "")
                       + f'<span class="tool-name">{e(x.title)}</span> {caption}</div>'
                       f"{body}{result}</div>")
        elif x.kind in ("tool result", "tool error"):
            if x.tool_id in calls and results.get(x.tool_id) is x:
                continue  # shown under its call
            out.append(f'<div class="tool orphan{" sub" if who else ""}">'
                       + _output(x, "error" if x.kind == "tool error" else "result") + "</div>")
        elif x.kind in ("stdout", "stderr"):
            out.append('<div class="tool">' + _output(x, x.kind) + "</div>")
        else:  # the runner's own entries and the SDK's system messages
            text = x.text
            try:
                data = json.loads(text)
            except ValueError:
                data = text
            compact = json.dumps(data, ensure_ascii=False, default=str) \
                if not isinstance(data, str) else data
            if isinstance(data, dict) and isinstance(data.get("subtype"), str):
                # the SDK's system messages: their subtype says what happened
                compact = " ".join(str(data[k]) for k in ("subtype", "description", "status")
                                   if isinstance(data.get(k), str))
            if len(compact) <= 160 and "\n" not in compact:
                out.append(f'<div class="event"><span class="kind">{e(x.kind)}</span> '
                           f"<code>{e(compact)}</code></div>")
            else:
                out.append('<div class="event">' + folded(
                    f'<span class="kind">{e(x.kind)}</span> <span class="peek">'
                    f"{e(first_line(compact, 100))}</span>",
                    f'<pre class="out">{e(text)}</pre>') + "</div>")
    return '<div class="conversation">' + "".join(out) + "</div>" if out else ""

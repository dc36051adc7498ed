"""A finished run read back for export: each trial's result and its conversation as messages.

Exporters (:mod:`.inspectlog`) write other tools' formats from this model alone, so what a
trial "said" is decided once, here, from the run folder's records: ``run.json``, each trial's
``result.json`` (through :meth:`RunFolder.trial_results`, the one reader of results) and its
``transcript.jsonl`` (every agent message as it arrived). Nothing of the runner's memory or
internals is read: a run copied from CI exports like one made here.

The transcript's Claude messages arrive one content block per line; the blocks of one API
message share a ``message_id`` and are joined back into one message. Messages of a subagent
(the verifier) carry the id of the tool call that started it (``parent_tool_use_id``): they
are kept apart, as that subagent's own conversation, and the main conversation keeps the call
and its result (the subagent's final report). A command agent's command line and outputs
become one tool call and its results, unless the agent kept its own trajectory
(mini-swe-agent's chat messages, ``agent.trajectory.json``), which is then its conversation.
The runner's own entries (attempt, outcome, dbt
timings) are not messages and are left out.

A run folder may come from elsewhere and be damaged: a file is read only when it is a plain
file of its trial folder (:func:`~spider2local.workspace.guard.is_workspace_file`), a line that
is not JSON (a transcript cut by a kill) is skipped and counted, a trial without a readable
result is named in :attr:`RunRecords.unreadable`, and a run with nothing finished is one
:class:`UserError`, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from spider2local.clock.dbt import strip_ansi
from spider2local.core.layout import AGENT_TRAJECTORY, ERROR_TRACEBACK, RESULT, TRANSCRIPT
from spider2local.core.results import TaskResult
from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest
from spider2local.workspace.guard import is_workspace_file

MAX_TRAJECTORY = 256 * 1024 * 1024
"""Bytes read of a command agent's own trajectory file; a larger one is left out (the
transcript's command line and outputs stand in for it)."""
MAX_LINE = 64_000_000
"""Characters read of one transcript line; a longer line is skipped whole (counted), never
held in memory: the runner's own lines are far shorter."""


class Role(StrEnum):
    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Message:
    """One message of a conversation, in the terms every trajectory format shares."""

    role: Role
    text: str = ""
    reasoning: tuple[str, ...] = ()
    tool_calls: tuple[ToolUse, ...] = ()
    tool_call_id: str = ""
    """For a tool result: the call it answers."""
    function: str = ""
    """For a tool result: the called tool's name (when the call was seen)."""
    is_error: bool = False
    model: str | None = None
    message_id: str = ""
    time: float | None = None
    """Unix seconds when the runner received it."""


@dataclass(frozen=True)
class Subagent:
    """A subagent's own conversation (the verifier), started by the main agent's tool call."""

    call_id: str
    kind: str
    """Its ``subagent_type`` (``verifier``), or ``subagent`` when the call did not say."""
    messages: tuple[Message, ...]
    report: str = ""
    """What it handed back: the result of the call that started it."""


@dataclass(frozen=True)
class Trial:
    task_id: str
    trial: int
    folder: Path
    result: TaskResult
    prompt: str
    """The task's first prompt ("" when the transcript has none)."""
    messages: tuple[Message, ...]
    subagents: tuple[Subagent, ...] = ()
    skipped_lines: int = 0
    """Transcript lines that were not JSON objects (a line cut by a kill) or too long."""
    traceback: str = ""
    """``error.txt``: the whole traceback of an unexpected exception, when one was kept."""


@dataclass(frozen=True)
class RunRecords:
    run_id: str
    root: Path
    manifest: RunManifest
    trials: tuple[Trial, ...]
    unreadable: tuple[str, ...] = field(default_factory=tuple)
    """Trial folders without a readable result (``task`` or ``task#k``): unfinished, a
    truncated or hand-edited result.json; not exported."""

    @property
    def task_ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.task_id for t in self.trials))

    @property
    def trials_per_task(self) -> int:
        """The run's planned trials (``settings.trials``), at least the highest one found."""
        planned = self.manifest.settings.get("trials")
        found = max((t.trial for t in self.trials), default=1)
        return max(found, planned if isinstance(planned, int) and planned > 0 else 1)


def _label(task_id: str, trial: int) -> str:
    return task_id if trial == 1 else f"{task_id}#{trial}"


def json_lines(folder: Path, path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines file of ``folder``, and how many lines were skipped.
    A missing file, or one that is not a plain file of the folder (a link, a FIFO), reads as
    empty: it is not this run's record."""
    items: list[dict[str, Any]] = []
    skipped = 0
    if not is_workspace_file(folder, path):
        return items, skipped
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            while line := fh.readline(MAX_LINE):
                if len(line) >= MAX_LINE and not line.endswith("\n"):
                    while (rest := fh.readline(MAX_LINE)) and not rest.endswith("\n"):
                        pass
                    skipped += 1
                    continue
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except ValueError:
                    skipped += 1
                    continue
                if isinstance(item, dict):
                    items.append(item)
                else:
                    skipped += 1
    except OSError:
        return items, skipped
    return items, skipped


def _text_of(content: Any) -> str:
    """A tool result's content as text: a string, or the text of its blocks."""
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) if isinstance(c, dict) else str(c)
                         for c in content)
    return "" if content is None else str(content)


def _time(line: Mapping[str, Any]) -> float | None:
    value = line.get("t")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


class _Conversation:
    """Builds the main conversation and the subagents' from transcript lines, in order."""

    def __init__(self) -> None:
        self.main: list[Message] = []
        self.sub: dict[str, list[Message]] = {}
        self.kinds: dict[str, str] = {}
        self.reports: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.prompt = ""

    def _into(self, parent: str) -> list[Message]:
        return self.sub.setdefault(parent, []) if parent else self.main

    def user(self, text: str, parent: str = "", when: float | None = None) -> None:
        if not parent and not self.prompt:
            self.prompt = text
        self._into(parent).append(Message(Role.USER, text, time=when))

    def assistant(self, data: Mapping[str, Any], parent: str, when: float | None) -> None:
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolUse] = []
        content = data.get("content")
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if "name" in block and "input" in block:
                inputs = block["input"]
                call = ToolUse(str(block.get("id") or ""), str(block["name"]),
                               inputs if isinstance(inputs, dict) else {"input": inputs})
                calls.append(call)
                self.names[call.id] = call.name
                kind = call.arguments.get("subagent_type")
                if isinstance(kind, str) and kind:
                    self.kinds[call.id] = kind
            elif "thinking" in block:
                reasoning.append(str(block["thinking"]))
            elif "text" in block:
                texts.append(str(block["text"]))
        model = data.get("model")
        message_id = str(data.get("message_id") or "")
        into = self._into(parent)
        last = into[-1] if into else None
        if last is not None and last.role is Role.ASSISTANT and message_id \
                and last.message_id == message_id:
            # the SDK sends one line per content block of the same API message
            into[-1] = Message(Role.ASSISTANT, "\n\n".join(x for x in (last.text, *texts) if x),
                               (*last.reasoning, *reasoning), (*last.tool_calls, *calls),
                               model=last.model, message_id=message_id, time=last.time)
            return
        into.append(Message(Role.ASSISTANT, "\n\n".join(texts), tuple(reasoning), tuple(calls),
                            model=model if isinstance(model, str) else None,
                            message_id=message_id, time=when))

    def user_blocks(self, content: list[Any], parent: str, when: float | None) -> None:
        for block in content:
            if not isinstance(block, dict):
                continue
            if "tool_use_id" in block:
                call_id = str(block["tool_use_id"])
                text = strip_ansi(_text_of(block.get("content")))
                self._into(parent).append(Message(
                    Role.TOOL, text, tool_call_id=call_id, function=self.names.get(call_id, ""),
                    is_error=bool(block.get("is_error")), time=when))
                if call_id in self.kinds and call_id not in self.reports:
                    self.reports[call_id] = text
            elif "text" in block:
                self.user(str(block["text"]), parent, when)

    def command(self, data: Mapping[str, Any], when: float | None) -> None:
        """A command agent's command line: one call of a ``command`` tool."""
        call = ToolUse(f"command_{len(self.main)}", "command", dict(data))
        self.names[call.id] = call.name
        self.main.append(Message(Role.ASSISTANT, "", tool_calls=(call,), time=when))

    def output(self, kind: str, text: str, when: float | None) -> None:
        """A command agent's stdout or stderr: a result of its last command."""
        call_id = next((c.id for m in reversed(self.main) for c in m.tool_calls), "")
        self.main.append(Message(Role.TOOL, strip_ansi(text), tool_call_id=call_id,
                                 function=kind, time=when))

    def subagents(self) -> tuple[Subagent, ...]:
        return tuple(Subagent(call_id, self.kinds.get(call_id, "subagent"), tuple(messages),
                              self.reports.get(call_id, ""))
                     for call_id, messages in self.sub.items())


def read_conversation(folder: Path) -> tuple[_Conversation, int]:
    """The trial's transcript as conversations (see the module docstring)."""
    lines, skipped = json_lines(folder, folder / TRANSCRIPT)
    talk = _Conversation()
    for line in lines:
        kind, data, when = str(line.get("kind", "")), line.get("data"), _time(line)
        if kind == "prompt" and isinstance(data, str):
            talk.user(data, when=when)
        elif kind in ("stdout", "stderr") and isinstance(data, str):
            if data:
                talk.output(kind, data, when)
        elif not isinstance(data, dict):
            continue
        elif kind == "command" and isinstance(data.get("command"), str):
            talk.command(data, when)
        elif kind in ("AssistantMessage", "UserMessage"):
            parent = data.get("parent_tool_use_id")
            parent = parent if isinstance(parent, str) else ""
            content = data.get("content")
            if kind == "AssistantMessage":
                talk.assistant(data, parent, when)
            elif isinstance(content, list):
                talk.user_blocks(content, parent, when)
            elif isinstance(content, str):
                talk.user(content, parent, when)
    return talk, skipped


def _chat_call(call: Any) -> ToolUse | None:
    """An OpenAI chat tool call (``{"id", "function": {"name", "arguments": "<json>"}}``)."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return None
    function = call["function"]
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    return ToolUse(str(call.get("id") or ""), str(function.get("name") or ""),
                   arguments if isinstance(arguments, dict) else {"arguments": raw})


def read_agent_trajectory(folder: Path) -> tuple[Message, ...] | None:
    """A command agent's own conversation, from the trajectory it wrote (mini-swe-agent's
    ``agent.trajectory.json``: OpenAI chat messages): what the model was told and answered,
    which the transcript (the command line and its outputs) does not hold. ``None`` when the
    trial kept no readable one."""
    path = folder / AGENT_TRAJECTORY
    if not is_workspace_file(folder, path):
        return None
    try:
        if path.stat().st_size > MAX_TRAJECTORY:
            return None
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return None
    items = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    names: dict[str, str] = {}
    out: list[Message] = []
    for item in items:
        if not isinstance(item, dict) or item.get("role") not in {r.value for r in Role}:
            continue
        role = Role(item["role"])
        text = strip_ansi(_text_of(item.get("content")))
        extra = item.get("extra")
        when = _time({"t": extra.get("timestamp")}) if isinstance(extra, dict) else None
        if role is Role.ASSISTANT:
            raw_calls = item.get("tool_calls")
            calls = [c for c in map(_chat_call, raw_calls if isinstance(raw_calls, list)
                                    else []) if c is not None]
            names.update((c.id, c.name) for c in calls)
            out.append(Message(role, text, tool_calls=tuple(calls), time=when))
        elif role is Role.TOOL:
            call_id = str(item.get("tool_call_id") or "")
            out.append(Message(role, text, tool_call_id=call_id,
                               function=names.get(call_id, ""), time=when))
        else:
            out.append(Message(role, text, time=when))
    return tuple(out)


def _traceback(folder: Path) -> str:
    path = folder / ERROR_TRACEBACK
    if not is_workspace_file(folder, path):
        return ""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def load_trial(folder: Path, result: TaskResult) -> Trial:
    talk, skipped = read_conversation(folder)
    own = read_agent_trajectory(folder)
    if own:  # the agent's own record of its conversation, richer than its outputs
        prompt = next((m.text for m in own if m.role is Role.USER), talk.prompt)
        return Trial(result.task_id, result.trial, folder, result, prompt, own,
                     talk.subagents(), skipped, _traceback(folder))
    return Trial(result.task_id, result.trial, folder, result, talk.prompt, tuple(talk.main),
                 talk.subagents(), skipped, _traceback(folder))


def load_run(folder: RunFolder) -> RunRecords:
    """Every finished trial of the run (see the module docstring). Raises :class:`UserError`
    when the folder has no readable run.json or no finished trial at all."""
    manifest = folder.read_manifest()
    if manifest is None:
        raise UserError("no run.json here", path=folder.root,
                        fix="pass a folder made by `spider2local run`")
    results = folder.trial_results()
    unreadable = tuple(_label(task_id, trial) for task_id, trial, path in folder.trial_folders()
                       if (task_id, trial) not in results and (path / RESULT).exists())
    if not results:
        problem = (f"no readable result.json ({', '.join(unreadable)})" if unreadable
                   else "no finished trial")
        raise UserError(f"nothing to export: {problem}", path=folder.root,
                        fix="export a run with finished trials; a damaged result.json is "
                            "re-run by `spider2local run --run-id ID`")
    trials = tuple(load_trial(folder.trial_dir(task_id, trial), result)
                   for (task_id, trial), result in sorted(results.items()))
    return RunRecords(folder.run_id, folder.root, manifest, trials, unreadable)

"""``export --format inspect``: the run as one Inspect eval log, written with inspect_ai's own
log API (:func:`inspect_ai.log.write_eval_log`), so ``inspect view`` and Inspect Scout open it.

The mapping: the run is one eval of task ``spider2-dbt``; each Spider2-DBT task is one sample
(its id the task id) and each trial one epoch of it (``config.epochs`` = the run's trials), so
Inspect's per-sample view lines the trials of a task up. A sample holds the conversation as
Inspect chat messages (the prompt, the agent's text, reasoning and tool calls, each tool's
result), the official verdict as the score ``duckdb_match`` (``C`` or ``I``, Inspect's
correct/incorrect, with the per-table results of result.json in its metadata and the scorer's
text report as its explanation), the tokens and cost per model, the trial's times and, for a
trial that ended without a verdict, its error. A subagent's conversation (the verifier) is kept
in the sample's metadata under ``subagents``: Inspect's messages are one flat conversation, and
the verifier's report already reads in it as the result of the call that started it.

Trials without a verdict (an error before scoring, a task without gold) have no score, so
they count in neither the accuracy nor its denominator, like Inspect's errored samples; the
results' metadata carries the run's own counts.

This module imports inspect_ai, an optional extra (``spider2local[export]``): the command
checks that it is installed before importing this module (:mod:`.extras`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inspect_ai.event import (
    Event,
    ModelEvent,
    ScoreEvent,
    SpanBeginEvent,
    SpanEndEvent,
    ToolEvent,
)
from inspect_ai.log import (
    EvalConfig,
    EvalDataset,
    EvalError,
    EvalLog,
    EvalMetric,
    EvalPlan,
    EvalResults,
    EvalSample,
    EvalScore,
    EvalSpec,
    EvalStats,
    write_eval_log,
)
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    Content,
    ContentReasoning,
    ContentText,
    GenerateConfig,
    ModelOutput,
    ModelUsage,
)
from inspect_ai.scorer import CORRECT, INCORRECT, Score
from inspect_ai.tool import ToolCall, ToolCallError

from spider2local import __version__
from spider2local.core.codec import dump
from spider2local.core.results import Status, Usage
from spider2local.evaluation.serialize import failing_tables
from spider2local.export.records import Message, Role, RunRecords, Subagent, Trial

TASK_NAME = "spider2-dbt"
SCORER = "duckdb_match"
"""The official comparison the verdicts come from (docs/scoring.md)."""


def _iso(value: str | None) -> str | None:
    return value or None


def chat_message(message: Message) -> ChatMessage:
    """One message as Inspect's chat message of the same role."""
    if message.role is Role.SYSTEM:
        return ChatMessageSystem(content=message.text, source="input")
    if message.role is Role.USER:
        return ChatMessageUser(content=message.text, source="input")
    if message.role is Role.TOOL:
        error = ToolCallError("unknown", message.text) if message.is_error else None
        return ChatMessageTool(content=message.text, tool_call_id=message.tool_call_id or None,
                               function=message.function or None, error=error)
    content: list[Content] = [ContentReasoning(reasoning=r) for r in message.reasoning]
    if message.text:
        content.append(ContentText(text=message.text))
    calls = [ToolCall(id=c.id, function=c.name, arguments=dict(c.arguments))
             for c in message.tool_calls]
    return ChatMessageAssistant(
        content=content if message.reasoning else message.text, tool_calls=calls or None,
        model=message.model, source="generate")


def model_usage(usage: Usage, model: str) -> dict[str, ModelUsage]:
    """Tokens per model as Inspect counts them; the trial's cost on its one model (a cost per
    model is not recorded, so with several models it stays in the sample's metadata)."""
    by_model = dict(usage.by_model) or ({model: {
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_creation_tokens": usage.cache_creation_tokens}} if usage.turns or
        usage.input_tokens or usage.output_tokens else {})
    out = {}
    for name, tokens in by_model.items():
        inputs, outputs = tokens.get("input_tokens", 0), tokens.get("output_tokens", 0)
        read, write = tokens.get("cache_read_tokens", 0), tokens.get("cache_creation_tokens", 0)
        out[name] = ModelUsage(
            input_tokens=inputs, output_tokens=outputs,
            total_tokens=inputs + outputs + read + write, input_tokens_cache_read=read,
            input_tokens_cache_write=write,
            total_cost=usage.cost_usd if len(by_model) == 1 else None)
    return out


def sample_score(trial: Trial) -> Score | None:
    """The official verdict as an Inspect score; ``None`` for a trial without one."""
    result = trial.result
    if result.passed is None:
        return None
    failing, first, text = failing_tables(result.score)
    tables = [] if result.score is None else dump(result.score)["tables"]
    return Score(
        value=CORRECT if result.passed else INCORRECT,
        answer=f"{result.tables_passed}/{result.tables_total} graded tables pass",
        explanation=text or first or None,
        metadata={"status": result.status.value, "tables_passed": result.tables_passed,
                  "tables_total": result.tables_total, "failing_tables": list(failing),
                  "tables": tables if isinstance(tables, list) else []})


def _error(trial: Trial) -> EvalError | None:
    error = trial.result.error
    if error is None or trial.result.passed is not None:
        return None
    return EvalError(message=f"{error.stage.value} ({error.kind.value}): {error.message}",
                     traceback=trial.traceback, traceback_ansi=trial.traceback)


def _output(messages: Sequence[ChatMessage], model: str) -> ModelOutput:
    last = next((m for m in reversed(messages) if isinstance(m, ChatMessageAssistant)), None)
    return ModelOutput.from_message(last) if last is not None else ModelOutput(model=model)


def _stamp(seconds: float | None, fallback: dt.datetime) -> dt.datetime:
    return fallback if seconds is None else dt.datetime.fromtimestamp(seconds, dt.UTC)


def _started(trial: Trial) -> dt.datetime:
    try:
        found = dt.datetime.fromisoformat(trial.result.started_at)
    except ValueError:
        return dt.datetime.fromtimestamp(0, dt.UTC)
    return found if found.tzinfo is not None else found.replace(tzinfo=dt.UTC)


def events(trial: Trial, model: str, score: Score | None) -> list[Event]:
    """The trial as Inspect's transcript events, for the viewer's Transcript tab: one model
    event per assistant message (its input: the messages that arrived since the previous one),
    one tool event per call with its result, the verifier's conversation inside an ``agent``
    span under the call that started it, and the score last."""
    subagents = {s.call_id: s for s in trial.subagents}
    out: list[Event] = []
    when = _started(trial)

    def conversation(messages: Sequence[Message], span: str | None) -> None:
        nonlocal when
        answers = {m.tool_call_id: m for m in messages if m.role is Role.TOOL and m.tool_call_id}
        pending: list[ChatMessage] = []
        for message in messages:
            when = _stamp(message.time, when)
            if message.role is not Role.ASSISTANT:
                pending.append(chat_message(message))
                continue
            out.append(ModelEvent(
                model=message.model or model, input=pending, tools=[], tool_choice="auto",
                config=GenerateConfig(), output=ModelOutput.from_message(chat_message(message)),
                timestamp=when, span_id=span))
            pending = []
            for call in message.tool_calls:
                sub: Subagent | None = subagents.get(call.id) if span is None else None
                if sub is not None:
                    out.append(SpanBeginEvent(id=call.id, type="agent", name=sub.kind,
                                              timestamp=when))
                    conversation(sub.messages, call.id)
                    out.append(SpanEndEvent(id=call.id, timestamp=when))
                answer = answers.get(call.id)
                out.append(ToolEvent(
                    id=call.id, function=call.name, arguments=dict(call.arguments),
                    result=answer.text if answer is not None else "",
                    error=ToolCallError("unknown", answer.text)
                    if answer is not None and answer.is_error else None,
                    timestamp=_stamp(answer.time if answer else None, when), span_id=span,
                    agent=sub.kind if sub is not None else None,
                    agent_span_id=call.id if sub is not None else None))

    conversation(trial.messages, None)
    if score is not None:
        out.append(ScoreEvent(score=score, scorer=SCORER, timestamp=when))
    return out


def sample(trial: Trial, model: str) -> EvalSample:
    result = trial.result
    messages = [chat_message(m) for m in trial.messages]
    score = sample_score(trial)
    cost = result.usage.cost_usd
    metadata: dict[str, Any] = {
        "status": result.status.value, "trial": result.trial, "agent": result.agent,
        "fake_date": result.fake_date, "verified": result.verified,
        "integrity": None if result.integrity is None else result.integrity.value,
        "integrity_evidence": [dump(e) for e in result.integrity_evidence],
        "error": None if result.error is None else {
            "stage": result.error.stage.value, "kind": result.error.kind.value,
            "message": result.error.message},
        "turns": result.usage.turns, "subagent_turns": result.usage.subagent_turns,
        "cost_usd": cost, "durations": dict(result.durations),
        "cut_by_budget": result.cut_by_budget, "run_folder": str(trial.folder),
        "subagents": [{"call_id": s.call_id, "type": s.kind, "report": s.report,
                       "messages": [chat_message(m).model_dump(exclude_none=True)
                                    for m in s.messages]} for s in trial.subagents],
    }
    if trial.skipped_lines:
        metadata["transcript_lines_skipped"] = trial.skipped_lines
    total = result.durations.get("total")
    return EvalSample(
        id=trial.task_id, epoch=trial.trial, input=trial.prompt or trial.task_id, target="",
        messages=messages, output=_output(messages, model),
        events=events(trial, model, score),
        scores={SCORER: score} if score is not None else None, metadata=metadata,
        model_usage=model_usage(result.usage, model),
        started_at=_iso(result.started_at), completed_at=_iso(result.finished_at),
        total_time=total, working_time=result.durations.get("agent"), error=_error(trial),
        turn_count=result.usage.turns)


def _results(records: RunRecords) -> EvalResults:
    scored = [t for t in records.trials if t.result.passed is not None]
    passed = sum(1 for t in scored if t.result.passed)
    metrics = {"accuracy": EvalMetric(name="accuracy",
                                      value=passed / len(scored) if scored else 0.0)}
    statuses = [t.result.status for t in records.trials]
    return EvalResults(
        total_samples=len(records.trials), completed_samples=len(records.trials),
        scores=[EvalScore(name=SCORER, scorer=SCORER, scored_samples=len(scored),
                          unscored_samples=len(records.trials) - len(scored),
                          metrics=metrics)],
        metadata={"trials": len(records.trials), "scored": len(scored), "passed": passed,
                  "errors": statuses.count(Status.ERROR),
                  "timeouts": statuses.count(Status.TIMEOUT),
                  "unscored": statuses.count(Status.UNSCORED),
                  "not_exported": list(records.unreadable)})


def _usage(samples: Sequence[EvalSample]) -> dict[str, ModelUsage]:
    total: dict[str, ModelUsage] = {}
    for s in samples:
        for name, usage in s.model_usage.items():
            total[name] = total[name] + usage if name in total else usage
    return total


def eval_log(records: RunRecords) -> EvalLog:
    """The run as one Inspect eval log (see the module docstring)."""
    manifest = records.manifest
    model = manifest.model or "none"
    samples = [sample(t, model) for t in records.trials]
    task_ids = list(records.task_ids)
    created = manifest.started_at or records.trials[0].result.started_at
    spec = EvalSpec(
        eval_id=f"spider2local-{records.run_id}", run_id=records.run_id, created=created,
        task=TASK_NAME, task_id=records.run_id, solver=manifest.agent,
        dataset=EvalDataset(name=TASK_NAME, location=manifest.dataset, samples=len(task_ids),
                            sample_ids=task_ids),
        model=model, config=EvalConfig(epochs=records.trials_per_task),
        packages={"spider2local": str(manifest.versions.get("spider2local") or __version__)},
        metadata={"agent": manifest.agent, "settings": dict(manifest.settings),
                  "versions": dict(manifest.versions), "run_folder": str(records.root),
                  "denominators": None if manifest.denominators is None
                  else dict(manifest.denominators)})
    return EvalLog(
        status="cancelled" if manifest.interrupted else "success", eval=spec,
        plan=EvalPlan(name=manifest.agent or "agent"), results=_results(records),
        stats=EvalStats(started_at=created, completed_at=manifest.finished_at or "",
                        model_usage=_usage(samples)),
        samples=samples)


def write_inspect(records: RunRecords, path: Path) -> Path:
    """Write the run's eval log to ``path`` (``.json``: Inspect's JSON format; otherwise its
    ``.eval`` archive) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_eval_log(eval_log(records), path, format="json" if path.suffix == ".json" else "eval")
    return path

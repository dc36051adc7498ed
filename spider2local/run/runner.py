"""Run tasks: fresh workspace, agent under a deadline, checkpoint, score, artifacts, result.

Concurrency is one anyio task group with a :class:`anyio.CapacityLimiter` of ``jobs``. Each task
is independent: whatever goes wrong inside it (agent error, dbt crash, deadline, scoring error)
becomes data in its ``result.json`` with the stage it happened in, and the run goes on. Only
cancellation (Ctrl-C / SIGTERM) stops a task without a result, so a resume re-runs it; and so
does a run folder that cannot take the result (a full disk): that one task is left unfinished,
said on stderr, and the others go on.

A fault of the machine (full disk, permission refused, a database locked by another process:
:func:`spider2local.core.faults.is_machine_fault`) is recorded as ``infrastructure``, never as a
verdict, and a resume runs the task again.

Verdicts follow the official benchmark: the database the agent left is what gets scored, also
after an agent error, a timeout or an infrastructure error in mid-session (the error is recorded
beside the verdict). Only an infrastructure failure before any turn that outlived its retries
ends without a score, because no work was done.

Integrity (:mod:`spider2local.integrity`): the gold, evaluation records and scorer sources are
fingerprinted before the first agent starts and re-checked before each score (a change is an
``integrity`` error, never a verdict), and every task's traces are scanned before its result is
written (``integrity: clean`` or ``suspect`` with the evidence, the verdict kept). Under
``--isolation none`` the run's unsealed witness (:mod:`spider2local.integrity.witness`) is told
when each trial's agent stage begins and ends, adds what it saw then to that trial's evidence,
and gives the runner the private copies of gold and the evaluation records to read.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import anyio

from spider2local.agents.contract import Agent, AgentContext, AgentOutcome, UsageMeter
from spider2local.clock import warm
from spider2local.core.faults import describe as describe_fault
from spider2local.core.faults import is_disk_full, is_machine_fault, names_disk_full
from spider2local.core.layout import API_REPLAY, GRADED_DB, QUERIES, TRANSCRIPT
from spider2local.core.results import (
    ErrorKind,
    Evidence,
    Integrity,
    Stage,
    TaskError,
    TaskResult,
    Usage,
    keep_traceback,
    save_result,
)
from spider2local.core.transcript import Transcript
from spider2local.dataset.task import TaskSpec
from spider2local.exceptions import DeadlinePassed
from spider2local.gateway.budget import Budget, Share
from spider2local.gateway.replay import Playback, Tape, Volatile
from spider2local.integrity import guard
from spider2local.integrity.scan import ScanResult, project_baseline, scan_task, witnessed
from spider2local.integrity.witness import Witness
from spider2local.proc.reap import areap
from spider2local.proc.watchdog import GRACE, bounded
from spider2local.proc.watchdog import check as watchdog_check
from spider2local.run import cut
from spider2local.run.deadlines import CHECKPOINT, SCORE, StageCosts, StageDeadline
from spider2local.run.deadlines import deadlines as stage_deadlines
from spider2local.run.folder import RunFolder
from spider2local.run.graded import Kept, keep_graded
from spider2local.run.manifest import now_iso
from spider2local.run.progress import Progress
from spider2local.run.retry import backoff, nothing_done, should_retry
from spider2local.run.settings import RunSettings, limits_for, task_skills, wants_warm_dbt
from spider2local.run.verdict import Verdict
from spider2local.safepath import UnsafePath
from spider2local.sandbox.isolation import IsolationMode
from spider2local.workspace import checkpoint as checkpoint_mod
from spider2local.workspace import collect as collect_mod
from spider2local.workspace import prepare as ws_mod
from spider2local.workspace.blame import agents_doing, held_database, too_big
from spider2local.workspace.copy import remove_tree
from spider2local.workspace.guard import OutsideWorkspace, database_ids
from spider2local.workspace.model import Workspace as Ws
from spider2local.workspace.tree import disk_usage

AgentFactory = Callable[[], Agent]
T = TypeVar("T")


@dataclass
class _Attempt:
    """Mutable state of one task while it runs (never leaves this module)."""

    task: TaskSpec
    artifacts: Path
    durations: dict[str, float] = field(default_factory=dict)
    attempts: int = 0
    ws: Ws | None = None
    baseline: dict[str, str] = field(default_factory=dict)
    """The project's files as prepared (what the integrity scan leaves out)."""
    off_limits: tuple[Path, ...] = ()
    """What the agent must not reach (``guard.Watch.off_limits``), handed to its context."""
    label: str = ""
    """How progress lines name this trial (:func:`trial_label`); the task id by default."""
    spent: Usage = field(default_factory=Usage)
    """What the agent's finished attempts spent (infrastructure retries add up)."""
    meter: UsageMeter | None = None
    """The running attempt's meter: what a cut attempt spent so far (:mod:`.cut`)."""
    checkpointed: bool = False
    """The checkpoint stage folded the database's WAL (collect need not again)."""
    share: Share = field(default_factory=lambda: Budget(None, "run").share())
    """The trial's part of the run's budget (:class:`RunBudget`), handed to each attempt's
    agent: its gateway charges it and refuses once the run's cap is spent."""
    witness: Witness | None = None
    """The run's unsealed witness (:mod:`spider2local.integrity.witness`), told when this
    trial's agent stage begins and ends."""
    trial: int = 1
    replayed: dict[str, Any] | None = None
    """``run --replay``: how the last attempt's replay went (:meth:`Playback.summary`)."""
    costs: StageCosts | None = None
    """What the checkpoint's and the scorer's work cost on the task's untouched start database
    at the run's start (``None``: not measured): the base of their deadlines (:mod:`.deadlines`)."""
    graded: Kept | None = None
    """The trial's graded tables as kept in its folder (:mod:`.graded`), once they are."""

    def spent_so_far(self) -> Usage:
        return self.spent + (self.meter.usage if self.meter is not None else Usage())

    def __post_init__(self) -> None:
        self.label = self.label or self.task.id

    def timed(self, stage: str, seconds: float) -> None:
        self.durations[stage] = round(self.durations.get(stage, 0.0) + seconds, 3)


class _Stopwatch:
    def __init__(self, state: _Attempt, stage: str) -> None:
        self.state, self.stage = state, stage

    def __enter__(self) -> None:
        self.t0 = time.monotonic()

    def __exit__(self, *_: object) -> None:
        self.state.timed(self.stage, time.monotonic() - self.t0)


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


SIZE_POLL = 5.0
"""Seconds between two measurements of a workspace's disk use while its agent works (a walk
of a few thousand files; a disk filled faster than this is caught by :func:`_blamed`)."""


async def _run_agent(agent: Agent, ctx: AgentContext,
                     workspace_size: int) -> tuple[AgentOutcome, bool]:
    """Run the agent under its deadline and its workspace size; returns (outcome, timed_out).
    Never raises except for cancellation: an agent bug becomes an error outcome like any other
    agent failure, and so does a workspace grown past ``workspace_size`` (its processes are
    killed; the work is scored as it stands, once)."""
    box: dict[str, Any] = {}
    over: list[int] = []
    try:
        with anyio.fail_after(ctx.limits.timeout):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_watch_size, ctx.workspace.root, workspace_size, tg.cancel_scope,
                              over)
                try:
                    box["outcome"] = await agent.run(ctx)
                except Exception as exc:  # raised below, outside the task group (no group)
                    box["error"] = exc
                tg.cancel_scope.cancel()
        if over:
            return AgentOutcome(usage=ctx.meter.usage, error=too_big(over[0], workspace_size),
                                acted=True), False
        if "error" in box:
            raise box["error"]
        outcome: AgentOutcome = box["outcome"]
        return outcome, False
    except TimeoutError:
        return AgentOutcome(usage=ctx.meter.usage,
                            error=f"deadline of {ctx.limits.timeout:g}s reached; "
                                  "its processes were killed"), True
    except Exception as exc:
        keep_traceback(ctx.workspace.artifacts, Stage.AGENT, exc)
        return AgentOutcome(usage=ctx.meter.usage, error=f"{type(exc).__name__}: {exc}",
                            infrastructure=is_machine_fault(exc)), False


async def _warm_server(ws: Ws, settings: RunSettings,
                       transcript: Transcript) -> warm.Server | None:
    """The workspace's warm dbt server, when the runner starts it: without a sandbox (inside
    one, the sandbox starts its own). A server that cannot start only costs speed: the shim
    runs dbt cold and says so."""
    if warm.SOCKET_ENV not in ws.env or settings.isolation is IsolationMode.NAMESPACE:
        return None
    try:
        return await warm.start_server(ws.env, ws.root)
    except (OSError, KeyError, ValueError) as exc:
        transcript.append("warm_dbt", {"unavailable": f"cannot start the server: {exc}"})
        return None


async def _watch_size(root: Path, limit: int, scope: anyio.CancelScope,
                      over: list[int]) -> None:
    """Stop the agent (cancel ``scope``) once its workspace holds more than ``limit`` bytes."""
    while True:
        await anyio.sleep(SIZE_POLL)
        used = await in_thread(disk_usage, root)
        if used > limit:
            over.append(used)
            scope.cancel()
            return


def _blamed(state: _Attempt, settings: RunSettings, *, disk_full: bool) -> str | None:
    """Why a machine fault after the agent started is the agent's doing, if it is: the rule of
    :func:`spider2local.workspace.blame.agents_doing`, on the workspace as it is now."""
    if state.ws is None:
        return None
    return agents_doing(state.ws.room, disk_usage(state.ws.root), settings.workspace_size,
                        disk_full=disk_full)


async def _reap(ws: Ws) -> None:
    """Kill what the agent left: every process working in its workspace, and every process
    holding the task's database (or its WAL) open wherever it works (a detached leftover of an
    agent without a sandbox: ``env -i``, ``cd /``, a double fork). After the agent stage the
    database lives in the task's private workspace, so whoever holds it is the agent's."""
    await areap(ws.root, files=await in_thread(database_ids, ws.root, ws.database))


async def _cleanup(state: _Attempt, keep: bool, progress: Progress) -> None:
    """Kill stragglers and remove the workspace; shielded so cancellation cannot skip it."""
    ws, state.ws = state.ws, None
    if ws is None:
        return
    with anyio.CancelScope(shield=True):
        await _reap(ws)
        if keep:
            try:  # its marker and activation script, spider2local's own again
                await in_thread(ws_mod.keep_workspace, ws)
            except OSError as exc:  # the agent left something we cannot replace
                progress.note(state.label, f"workspace kept unmarked: {_oserror(exc)}")
            progress.note(state.label, f"workspace kept: {ws.project_dir} (its dbt runs on "
                                       f"{state.task.date} after `. .spider2local/activate` "
                                       "there, or use `spider2local shell --workspace`)")
        else:
            try:
                await in_thread(ws_mod.cleanup_workspace, ws)
            except OSError as exc:  # a file the agent made undeletable (chattr +i), a busy
                # mount: the task's result still counts and the other tasks go on
                progress.note(state.label, f"workspace not removed: {_oserror(exc)}")


class _NotStarted(Exception):
    """The run's budget was spent while the trial's first workspace was prepared (by trials
    running beside it): its agent is not started. Started, its first request would be refused
    and the untouched workspace scored as if an agent had worked on it (a "pass" for free on a
    task whose start database already passes); the trial counts as never started instead."""


async def _attempt_agent(state: _Attempt, settings: RunSettings, factory: AgentFactory,
                         progress: Progress) -> tuple[AgentOutcome, bool]:
    """Prepare a fresh workspace and run the agent once (raises :class:`_NotStarted` when the
    run's budget is spent before the first attempt's agent starts)."""
    task = state.task
    state.attempts += 1
    progress.stage(state.label, Stage.PREPARE)
    # before any workspace: a recording that cannot be replayed is this trial's error, at
    # prepare, with no agent started (ReplayError: its message names the file)
    playback = await in_thread(_playback, state, settings)
    # Shielded: a worker thread cannot be cancelled anyway, and a cancellation delivered after
    # it returned would lose the workspace it made (never cleaned up).
    with _Stopwatch(state, "prepare"), anyio.CancelScope(shield=True):
        state.ws = await in_thread(ws_mod.prepare_workspace, task, artifacts=state.artifacts,
                                   parent=settings.workspace_parent,
                                   skills=task_skills(task, settings),
                                   skills_root=settings.skills_dir,
                                   skills_dir=settings.caps.skills_dir,
                                   templates=settings.templates)
    ws = state.ws
    assert ws is not None
    if wants_warm_dbt(settings):
        ws = state.ws = replace(ws, env=warm.warm_env(ws.env, ws.root))
        await in_thread(warm.prepare_dir, ws.root)
    state.baseline = await in_thread(project_baseline, ws.project_dir)
    refused = state.share.budget.refusal()  # asked of the budget: no request was refused
    if refused is not None and state.attempts == 1:
        raise _NotStarted(refused)
    transcript = Transcript(state.artifacts / TRANSCRIPT)
    transcript.append("attempt", {"attempt": state.attempts, "workspace": str(ws.root)})
    ctx = AgentContext(task=task, workspace=ws, limits=limits_for(task, settings),
                       transcript=transcript, isolation=settings.isolation,
                       prompts=settings.prompts_dir,
                       off_limits=state.off_limits, budget=state.share,
                       tape=Tape(state.artifacts / API_REPLAY, Volatile.of(ws.root), playback))
    if state.witness is not None:
        state.witness.entered(state.label)
    try:
        progress.stage(state.label, Stage.AGENT, ctx.meter)
        state.meter = ctx.meter
        with _Stopwatch(state, "agent"):
            server = await _warm_server(ws, settings, transcript)
            try:
                outcome, timed_out = await _run_agent(factory(), ctx, settings.workspace_size)
            finally:
                if server is not None:
                    await server.stop()
        await _reap(ws)
    finally:  # its processes are gone: what the witness sees from now on is not this trial's
        if state.witness is not None:
            state.witness.left(state.label)
    if warm.SOCKET_ENV in ws.env:
        transcript.append("warm_dbt", await in_thread(warm.report, ws.root,
                                                      warm.runs_dir(ws.env)))
    if outcome.infrastructure and (filled := await in_thread(
            _blamed, state, settings, disk_full=names_disk_full(outcome.error or ""))):
        outcome = replace(outcome, infrastructure=False, error=f"{outcome.error} ({filled})")
    if playback is not None:
        outcome = _replayed(state, settings, playback, outcome, transcript)
    transcript.append("outcome", {"error": outcome.error, "timed_out": timed_out,
                                  "infrastructure": outcome.infrastructure})
    return outcome, timed_out


def _playback(state: _Attempt, settings: RunSettings) -> Playback | None:
    """``run --replay``: the recorded session this attempt answers from (the scored attempt
    of the same trial of the recorded run), read whole now by the runner: the recording is
    never where the agent could read what comes next."""
    source = settings.replay
    if source is None:
        return None
    recorded = RunFolder(source.folder).trial_dir(state.task.id, state.trial) / API_REPLAY
    return Playback.load(recorded, lenient=source.lenient, until=source.until)


def _replayed(state: _Attempt, settings: RunSettings, playback: Playback,
              outcome: AgentOutcome, transcript: Transcript) -> AgentOutcome:
    """A replayed attempt's outcome: nothing was spent (the tokens are the recorded ones),
    and a replay stopped at a divergence is the trial's error, whatever the agent made of
    the refusal (never ``infrastructure``: retrying would diverge the same way)."""
    assert settings.replay is not None
    summary = playback.summary()
    state.replayed = {"run": settings.replay.run_id, "trial": state.trial,
                      "lenient": settings.replay.lenient, **summary}
    transcript.append("replay", state.replayed)
    usage = replace(outcome.usage, cost_usd_reported=0.0, cost_usd_computed=0.0)
    stopped = playback.stopped
    if stopped is None:
        return replace(outcome, usage=usage)
    return replace(outcome, usage=usage, error=stopped.message(), infrastructure=False)


async def _agent_with_retries(state: _Attempt, settings: RunSettings, factory: AgentFactory,
                              progress: Progress) -> tuple[AgentOutcome, bool]:
    """Infrastructure failures before any turn get a fresh workspace and another try, with
    backoff (see :mod:`.retry`). The outcome returned is the last attempt's, with the
    usage of every attempt added up."""
    while True:
        outcome, timed_out = await _attempt_agent(state, settings, factory, progress)
        state.spent, state.meter = state.spent + outcome.usage, None
        state.share.settle(state.spent.cost_usd)  # what no gateway of the trial charged
        if not should_retry(outcome, timed_out, state.attempts, settings.retries):
            return replace(outcome, usage=state.spent), timed_out
        wait = backoff(settings.retry_backoff, state.attempts)
        progress.note(state.label, f"infrastructure error ({outcome.error}); "
                                     f"retry {state.attempts}/{settings.retries} in {wait:g}s")
        await _cleanup(state, False, progress)
        await anyio.sleep(wait)


def _deadlines(state: _Attempt, settings: RunSettings) -> dict[str, StageDeadline]:
    """The checkpoint's and the scorer's deadlines for this task (:func:`.deadlines.derive`),
    written to its transcript (``stage_deadlines``) before either starts: a person sees what
    was in force, also when the task passed."""
    found = stage_deadlines(state.costs, settings.stage_timeout)
    with contextlib.suppress(OSError):  # a transcript that cannot grow loses a note, no more
        Transcript(state.artifacts / TRANSCRIPT).append(
            "stage_deadlines", {stage: d.to_json() for stage, d in found.items()})
    return found


def _passed(exc: DeadlinePassed, deadline: StageDeadline) -> DeadlinePassed:
    """``exc`` with where its deadline came from said (the result's error message)."""
    if not deadline.derived:
        return exc
    return DeadlinePassed(exc.stage, exc.seconds,
                          "; ".join(filter(None, (exc.detail, f"deadline {deadline.basis}"))))


async def _score(state: _Attempt, settings: RunSettings, progress: Progress,
                 watch: guard.Watch) -> Verdict:
    """Checkpoint and score the workspace database. What it is scored against is checked
    first and its gold file once more after (see module doc). Each stage runs under its
    deadline fitted to the task (:mod:`.deadlines`; ``settings.stage_timeout`` where nothing
    was measured; :mod:`.watchdog`), and the sandboxed child of each is killed at it."""
    from spider2local.sandbox.scoring import score_sandboxed

    task, ws = state.task, state.ws
    assert ws is not None
    limits = await in_thread(_deadlines, state, settings)
    if ws.database.exists() or ws.database.is_symlink():
        progress.stage(state.label, Stage.CHECKPOINT)
        deadline = limits[CHECKPOINT]
        try:
            with _Stopwatch(state, "checkpoint"):
                try:
                    # the child outlives the watchdog's timer by half the grace: killed at
                    # it, it raises once the deadline is known to have passed
                    await bounded("checkpoint", deadline.seconds,
                                  checkpoint_mod.checkpoint_database,
                                  ws.database, root=ws.root,
                                  timeout=deadline.seconds + GRACE / 2)
                except DeadlinePassed as exc:
                    raise _passed(exc, deadline) from exc.__cause__
            state.checkpointed = True
        except (OutsideWorkspace, DeadlinePassed) as exc:  # the agent's doing: no verdict
            return _agent_fault(task, Stage.CHECKPOINT, exc)
        except Exception as exc:
            if (held := held_database(exc)) is not None:  # its holders were killed: the agent's
                keep_traceback(state.artifacts, Stage.CHECKPOINT, exc)
                return _agent_fault(task, Stage.CHECKPOINT, f"{held}: {describe_fault(exc)}")
            return await _stage_error(state, settings, Stage.CHECKPOINT, exc)
    if task.gold is None:
        return Verdict.unscored()
    progress.stage(state.label, Stage.SCORE)
    deadline = limits[SCORE]
    try:
        with _Stopwatch(state, "score"):
            # what the runner reads: the witness's private copies while it watches the originals
            reading = watch.reading(task)
            assert reading.gold is not None
            check = await in_thread(watch.changes, task)
            if check.changed:
                return _integrity_error(check.changed)
            try:
                with anyio.fail_after(deadline.seconds):  # cancelling kills the scorer's child
                    score = await score_sandboxed(ws.database, reading.gold.db,
                                                  reading.gold.params, hidden=state.off_limits)
            except TimeoutError:
                raise _passed(DeadlinePassed("score", deadline.seconds), deadline) from None
            moved = await in_thread(guard.gold_moved, check, reading)
            if moved is not None:
                return _integrity_error((moved,))
    except DeadlinePassed as exc:
        return _agent_fault(task, Stage.SCORE, exc)
    except Exception as exc:
        return await _stage_error(state, settings, Stage.SCORE, exc)
    if settings.keep_graded and score.error is None:
        await _keep_graded(state, progress, deadline)
    return Verdict.scored(score)


async def _keep_graded(state: _Attempt, progress: Progress, deadline: StageDeadline) -> None:
    """Keep the scored tables in the trial's folder (:mod:`.graded`), under the scorer's
    deadline (the same tables read once more). Never changes the verdict: a copy that fails
    or hangs is one note in the transcript (and on the progress), and no file is recorded."""
    ws, task = state.ws, state.task
    assert ws is not None and task.gold is not None
    out = state.artifacts / GRADED_DB
    with _Stopwatch(state, "graded"):
        try:
            with anyio.fail_after(deadline.seconds):  # cancelling kills the reader child
                state.graded = await keep_graded(ws.database, out, task.gold.params.condition_tabs,
                                                 hidden=state.off_limits)
        except Exception as exc:  # TimeoutError included
            why = (f"still copying after the scorer's deadline of {deadline.seconds:g}s"
                   if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}")
            await in_thread(_drop_graded, out)
            progress.note(state.label, f"graded tables not kept: {why}")
            with contextlib.suppress(OSError):
                Transcript(state.artifacts / TRANSCRIPT).append("graded", {"error": why})
            return
    with contextlib.suppress(OSError):  # a transcript that cannot grow loses a note, no more
        Transcript(state.artifacts / TRANSCRIPT).append("graded", state.graded.to_json())


def _drop_graded(out: Path) -> None:
    with contextlib.suppress(OSError):
        out.unlink(missing_ok=True)


async def _stage_error(state: _Attempt, settings: RunSettings, stage: Stage,
                       exc: Exception) -> Verdict:
    """:func:`_error`, except that a full disk the agent filled (:mod:`.blame`) is the agent's
    doing (a verdict: no usable result), not a fault of the machine that a resume would run
    again (a free re-roll)."""
    if is_machine_fault(exc) and (filled := await in_thread(
            _blamed, state, settings, disk_full=is_disk_full(exc))):
        keep_traceback(state.artifacts, stage, exc)
        return _agent_fault(state.task, stage, f"{describe_fault(exc)} ({filled})")
    return _error(state, stage, exc)


def _agent_fault(task: TaskSpec, stage: Stage, exc: Exception | str) -> Verdict:
    """What the agent left cannot be read (a symlink, a FIFO, a file made unopenable) or makes
    a stage hang: failed, with the reason, as the agent's doing (scored as no result; never
    ``infrastructure``, which a resume would run again: a free re-roll)."""
    return Verdict.refused(TaskError(stage, ErrorKind.AGENT, str(exc)),
                           tables_total=len(task.gold.params.condition_tabs) if task.gold else 0)


def _integrity_error(changed: Sequence[str]) -> Verdict:
    return Verdict.errored(TaskError(Stage.SCORE, ErrorKind.INTEGRITY, guard.describe(changed)))


def _error(state: _Attempt, stage: Stage, exc: BaseException) -> Verdict:
    """A stage raised: the task ends with status ``error``, of kind ``infrastructure`` when the
    machine is at fault (re-run by a resume), else ``exception``; traceback in error.txt."""
    keep_traceback(state.artifacts, stage, exc)
    if is_machine_fault(exc):
        return Verdict.errored(TaskError(stage, ErrorKind.INFRASTRUCTURE, describe_fault(exc),
                                         type(exc).__name__))
    return Verdict.errored(TaskError(stage, ErrorKind.EXCEPTION, str(exc), type(exc).__name__))


async def _finish(state: _Attempt, settings: RunSettings, outcome: AgentOutcome,
                  timed_out: bool, progress: Progress, watch: guard.Watch) -> Verdict:
    if nothing_done(outcome, timed_out):  # retries exhausted: no work to score
        return Verdict.errored(TaskError(Stage.AGENT, ErrorKind.INFRASTRUCTURE,
                                         outcome.error or ""))
    verdict = (await _score(state, settings, progress, watch)).after_agent(
        outcome.error, timed_out=timed_out, infrastructure=outcome.infrastructure)
    assert state.ws is not None
    with _Stopwatch(state, "collect"):
        try:
            await bounded("collect", settings.stage_timeout, collect_mod.collect_artifacts,
                          state.ws, keep_db=settings.keep_db, check=watchdog_check,
                          checkpointed=state.checkpointed)
        except DeadlinePassed as exc:  # the agent's tree made it hang: its doing
            progress.note(state.task.id, f"artifacts not collected: {exc}")
            verdict = _agent_fault(state.task, Stage.COLLECT, exc)
        except Exception as exc:
            progress.note(state.label, f"artifacts not collected: {exc}")
    return verdict


def _scan(state: _Attempt, watch: guard.Watch) -> ScanResult:
    """Scan the task's traces while its workspace still exists (agents reaped already)."""
    ws = state.ws
    root = ws.root if ws is not None else state.artifacts
    project = ws.project_dir if ws is not None else None
    try:
        prot = watch.protected(state.task, root, project or root, state.artifacts)
    except Exception as exc:  # the result must still be written; and a blind scan is no "clean"
        keep_traceback(state.artifacts, Stage.CHECKPOINT, exc)
        return ScanResult(Integrity.SUSPECT, (Evidence("scanner", None, "scan failed",
                                                       f"{type(exc).__name__}: {exc}"),), 1)
    return scan_task(transcript=state.artifacts / TRANSCRIPT,
                     queries=state.artifacts / QUERIES, project=project,
                     baseline=state.baseline, prot=prot, check=watchdog_check)


async def _bounded_scan(state: _Attempt, settings: RunSettings,
                        watch: guard.Watch) -> tuple[ScanResult, Verdict | None]:
    """The scan under its deadline: one that cannot finish is no "clean" (suspect, with the
    reason) and fails the task as the agent's doing; returns the scan and those fields."""
    try:
        return await bounded("scan", settings.stage_timeout, _scan, state, watch), None
    except DeadlinePassed as exc:
        return (ScanResult(Integrity.SUSPECT, (Evidence("scanner", None, "scan did not finish",
                                                        str(exc)),), 1),
                _agent_fault(state.task, Stage.SCAN, exc))




@dataclass(frozen=True)
class Trial:
    """One trial of one task: what the runner schedules (a fresh workspace and agent session
    each; results are addressed by ``(task id, trial)``)."""

    task: TaskSpec
    trial: int = 1

    @property
    def key(self) -> tuple[str, int]:
        return (self.task.id, self.trial)


def interleaved(tasks: Sequence[TaskSpec], trials: int,
                done: Collection[tuple[str, int]] = ()) -> list[Trial]:
    """Every trial of ``tasks`` up to ``trials`` not in ``done``, trial 1 of every task before
    trial 2 of any: a run stopped early (a signal, the budget) is still an even sample."""
    return [Trial(task, k) for k in range(1, trials + 1) for task in tasks
            if (task.id, k) not in done]


def trial_label(task_id: str, trial: int, trials: int) -> str:
    """How progress lines name a trial: the task id alone in a 1-trial run."""
    return task_id if trials <= 1 and trial == 1 else f"{task_id}#{trial}"


class RunBudget:
    """The whole run's spending cap (``--max-cost-usd``) and the one tally of what it spent.

    The tally is one :class:`~spider2local.gateway.budget.Budget` (``shared``), seeded with
    what earlier invocations of the run spent. Every trial gets a
    :class:`~spider2local.gateway.budget.Share` of it: its model gateways charge each call as
    it is answered and refuse further requests once the cap is spent, so running trials are cut
    there (scored as they stand, their result marked ``cut_by_budget``) and the spend passes
    the cap by at most one call per session running at that moment. After each attempt the
    runner settles the attempt's reported cost into the share: what no gateway saw (an agent
    reporting its own cost) is added, what a gateway charged is not charged again.

    Why no separate tally of finished trials, as before: it lagged the gateway's by every
    running trial's spend and only kept new trials from starting (a $1 cap spent $16.25 with
    two trials at once). No trial starts once the budget refuses (``reached``: the same test
    the gateway makes, so the two never disagree); ``not_run`` counts those left unstarted.
    """

    def __init__(self, cap: float | None, spent: float = 0.0) -> None:
        self.shared = Budget(cap, "run", spent_usd=spent)
        self.not_run = 0

    @property
    def cap(self) -> float | None:
        return self.shared.cap_usd

    @property
    def spent(self) -> float:
        return self.shared.spent_usd

    @property
    def reached(self) -> bool:
        return self.shared.refusal() is not None

    def share(self) -> Share:
        return self.shared.share()


async def run_task(task: TaskSpec, folder: RunFolder, settings: RunSettings,
                   factory: AgentFactory, progress: Progress,
                   watch: guard.Watch | None = None, trial: int = 1,
                   budget: RunBudget | None = None,
                   costs: StageCosts | None = None) -> TaskResult | None:
    """Run one trial of a task start to finish and write its result.json (the last thing
    written).

    ``watch``: the run's fingerprints (taken here, for this task alone, when not given).
    ``budget``: the run's (:class:`RunBudget`; none: the trial's spend is counted, uncapped).
    ``costs``: what the task's stages cost on its untouched start database (:mod:`.deadlines`;
    none: their deadlines are ``settings.stage_timeout``).
    Returns ``None`` when the run folder could not take the trial (its folder or its result
    could not be written: a full disk): the trial stays unfinished, which a resume re-runs, and
    one line on stderr names the path. Nothing else of the run is stopped. Also ``None`` when
    the run's budget was spent before its agent started (:class:`_NotStarted`): its folder is
    removed and ``budget.not_run`` counts it."""
    label = trial_label(task.id, trial, settings.trials)
    if watch is None:
        watch = guard.Watch(await in_thread(guard.take, [task]), runs_dir=folder.root.parent)
    try:
        artifacts = await in_thread(folder.reset_trial, task.id, trial)
    except OSError as exc:
        progress.note(label, f"not run: cannot prepare its run folder: {_oserror(exc)}")
        return None
    except UnsafePath as exc:  # its folder leads elsewhere: that task only, never the run
        progress.note(label, f"not run: {exc}")
        return None
    hidden = watch.off_limits(task)
    if settings.replay is not None:  # the recording of what comes next, too
        hidden = (*hidden, settings.replay.folder)
    state = _Attempt(task, artifacts, off_limits=hidden, label=label,
                     share=(budget or RunBudget(None)).share(), witness=watch.witness,
                     costs=costs, trial=trial)
    started_at, t0 = now_iso(), time.monotonic()
    progress.task_started(label)
    outcome, timed_out = AgentOutcome(), False
    saved = False
    try:
        try:
            unreadable = await in_thread(guard.gold_unreadable, watch.reading(task))
            if unreadable is not None:  # a machine fault (EACCES) or a broken dataset: no agent
                raise unreadable
            outcome, timed_out = await _agent_with_retries(state, settings, factory, progress)
            verdict = await _finish(state, settings, outcome, timed_out, progress, watch)
        except _NotStarted as exc:  # as if never begun: no result, no folder, counted
            await _cleanup(state, False, progress)
            await in_thread(remove_tree, artifacts)
            if budget is not None:
                budget.not_run += 1
            progress.task_not_started(label, f"not started: {exc}")
            return None
        except Exception as exc:
            verdict = _error(state, Stage.PREPARE if state.ws is None else Stage.CHECKPOINT, exc)
        with _Stopwatch(state, "scan"):
            scan, hung = await _bounded_scan(state, settings, watch)
        if watch.witness is not None:  # what it saw in this trial's agent stage
            scan = witnessed(scan, watch.witness.evidence(label))
        if hung is not None:
            verdict = hung
        if scan.evidence:
            first = scan.evidence[0]
            progress.note(label, f"suspect ({scan.hits} hits): {first.rule} in {first.source}")
        with _Stopwatch(state, "cleanup"):
            await _cleanup(state, settings.keep, progress)
        state.timed("total", time.monotonic() - t0)
        result = TaskResult(task_id=task.id, agent=settings.agent,
                            fake_date=task.date.isoformat(), started_at=started_at,
                            finished_at=now_iso(), durations=dict(state.durations),
                            usage=outcome.usage, attempts=max(1, state.attempts),
                            model=settings.model, verified=outcome.verified,
                            integrity=scan.integrity, integrity_evidence=scan.evidence,
                            isolation=settings.isolation.value, trial=trial,
                            cut_by_budget=state.share.refused is not None,
                            graded_sha256=None if state.graded is None
                            else state.graded.sha256,
                            replayed=state.replayed,
                            **verdict.fields())
        path = folder.result_path(task.id, trial)
        try:
            await in_thread(save_result, path, result)
        except OSError as exc:
            progress.note(label, f"result not saved, the trial stays unfinished (a resume "
                                 f"re-runs it): {_oserror(exc, path)}")
            await in_thread(_keep_cut, folder, state, trial, started_at, label, progress)
            return None
        saved = True
    except anyio.get_cancelled_exc_class():
        if not saved:
            with anyio.CancelScope(shield=True):
                await in_thread(_keep_cut, folder, state, trial, started_at, label, progress)
        raise
    finally:
        await _cleanup(state, settings.keep, progress)
    progress.task_finished(result, label)
    return result


def _keep_cut(folder: RunFolder, state: _Attempt, trial: int, started_at: str, label: str,
              progress: Progress) -> None:
    """Record what a trial left without a result spent (:mod:`.cut`), when its agent began."""
    if state.attempts == 0:
        return
    try:
        cut.record(folder.root, cut.CutAttempt(state.task.id, trial, started_at, now_iso(),
                                               state.spent_so_far()))
    except OSError as exc:
        progress.note(label, f"what the cut attempt spent is not recorded: {_oserror(exc)}")


def _oserror(exc: OSError, path: Path | None = None) -> str:
    """``<path>: <what the OS said>`` in one line: what is full, or refused, and where."""
    where = exc.filename or path
    return f"{where}: {exc.strerror or exc}" if where else str(exc)


async def run_tasks(tasks: Sequence[TaskSpec | Trial], folder: RunFolder,
                    settings: RunSettings, factory: AgentFactory, progress: Progress,
                    results: dict[tuple[str, int], TaskResult] | None = None,
                    watch: guard.Watch | None = None, budget: RunBudget | None = None,
                    costs: Mapping[str, StageCosts] | None = None,
                    ) -> dict[tuple[str, int], TaskResult]:
    """Run ``tasks`` (trials, or tasks meaning their trial 1) in the order given, at most
    ``settings.jobs`` at a time; returns the results written, by ``(task id, trial)``.

    ``settings.jobs`` workers take the next trial in order (:func:`interleaved` makes the
    order), so every trial of the run shares the one limit and they start in that order.
    ``results`` (filled as trials finish) lets a caller see what finished before a
    cancellation. ``watch``: the run's fingerprints (:func:`~spider2local.run.plan.
    execute_run` records them in run.json); when not given they are taken here, before any
    agent starts. ``budget``: shared by every trial; none starts once it is reached
    (:class:`RunBudget`). ``costs``: by task id, what its stages cost on its untouched start
    database at the run's start (:func:`~spider2local.audit.tasks.start_baseline`), the base
    of its checkpoint's and scorer's deadlines (:mod:`.deadlines`).
    """
    queue = deque(t if isinstance(t, Trial) else Trial(t) for t in tasks)
    results = {} if results is None else results
    budget = budget if budget is not None else RunBudget(None)
    if watch is None:
        watch = guard.Watch(await in_thread(guard.take, list({t.task.id: t.task for t in queue}
                                                              .values())),
                            runs_dir=folder.root.parent)

    async def worker() -> None:
        while queue:
            if budget.reached:  # the first worker to see it counts what is left
                budget.not_run += len(queue)
                queue.clear()
                return
            item = queue.popleft()
            result = await run_task(item.task, folder, settings, factory, progress, watch,
                                    item.trial, budget, (costs or {}).get(item.task.id))
            if result is not None:
                results[item.key] = result

    async with anyio.create_task_group() as outer:
        outer.start_soon(progress.refresh_loop)
        async with anyio.create_task_group() as tg:
            for _ in range(max(1, min(settings.jobs, len(queue)))):
                tg.start_soon(worker)
        outer.cancel_scope.cancel()
    return results

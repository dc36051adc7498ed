"""One ``spider2local run`` invocation: from command-line options to a finished run folder.

:func:`plan_run` resolves options against the suite (defaults, selection, agent, credentials)
and fails fast with a one-line :class:`UserError` before anything starts. :func:`execute_run`
writes the manifest, skips tasks an earlier invocation finished (resume), runs the rest and
turns SIGINT/SIGTERM into a clean stop. Re-scoring a finished run is :mod:`.rescore`.

Before any agent starts, the scorer is imported and the gold, evaluation records and scorer
sources of the tasks to run are fingerprinted into run.json (``integrity``; see
:mod:`spider2local.integrity.guard`). A resume keeps the first fingerprints and is refused when
the scorer or the gold of any selected task (finished ones too) changed since. Under
``--isolation none`` the unsealed witness then takes its private copies and watches the
originals until the invocation ends (:mod:`spider2local.integrity.witness`; its record is the
session's ``witness`` in run.json).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import anyio

from spider2local.agents.registry import capabilities, make_agent, takes_option
from spider2local.audit.tasks import Denominators, denominators, start_baseline
from spider2local.clock.faketime import find_library
from spider2local.core.layout import API_REPLAY
from spider2local.core.results import Status, TaskResult
from spider2local.dataset import known
from spider2local.dataset.load import dataset_fingerprint
from spider2local.dataset.task import Dataset
from spider2local.exceptions import UserError
from spider2local.gateway.replay import ReplaySource
from spider2local.integrity import guard
from spider2local.integrity import witness as witness_mod
from spider2local.proc.kill import hurry, unhurry
from spider2local.run import cut
from spider2local.run.deadlines import CHECKPOINT, SCORE, StageCosts
from spider2local.run.folder import RunFolder, claim_run_id, new_run_id, open_run_dir, resolve_run
from spider2local.run.lock import run_lock
from spider2local.run.manifest import Rerun, RunManifest, SelectedTask, SelectionRequest, now_iso
from spider2local.run.progress import Progress
from spider2local.run.resume import (
    check_resumable,
    is_finished,
    merged_tasks,
    remembered,
    remembered_settings,
    selection_request,
)
from spider2local.run.runner import AgentFactory, RunBudget, Trial, interleaved, run_tasks
from spider2local.run.selection import Selection, parse_shard, select_tasks
from spider2local.run.sequential import (
    SequentialSpec,
    analyse_run,
    from_record,
    resolve,
    run_rounds,
)
from spider2local.run.settings import RunSettings, check_skills, kit_dirs, suite_skills
from spider2local.sandbox.isolation import IsolationChoice, IsolationMode, choose_isolation
from spider2local.sequential.analysis import MAX_ROUNDS, MIN_DIFFERENCE, Design
from spider2local.suite.model import Suite
from spider2local.suite.options import Isolation

T = TypeVar("T")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals that stop a run cleanly. SIGHUP (a closed terminal, a dropped ssh session) is one:
its default action kills the runner outright, leaving dbt running and run.json unfinished."""


_stopping = threading.Event()


def stop_requested() -> bool:
    """Has a signal stopped the current (or last) run? After :func:`until_signal` has given its
    handlers back, a late second Ctrl-C must still only hurry the exit (see
    :func:`spider2local.cli.commands.run_command`)."""
    return _stopping.is_set()


async def until_signal(main: Callable[[], Awaitable[T]],
                       signals: Sequence[signal.Signals] = STOP_SIGNALS,
                       ) -> tuple[T | None, bool]:
    """Run ``main``; on the first of ``signals`` cancel it (its cleanup is shielded) and
    return ``(None, True)``. Cancellation stops queued tasks and kills running ones' processes.

    The signals stay ours until ``main`` has finished cleaning up: a second one (Ctrl-C
    pressed twice) only hurries that same shutdown (:func:`spider2local.proc.kill.hurry`:
    no more grace before SIGKILL) instead of raising KeyboardInterrupt into the middle of it,
    which printed a traceback per running task and left run.json unfinished.
    """
    box: list[T] = []
    interrupted = False
    _stopping.clear()
    unhurry()
    with anyio.open_signal_receiver(*signals) as received:

        async def watch(scope: anyio.CancelScope) -> None:
            nonlocal interrupted
            async for _ in received:
                if interrupted:
                    hurry()
                else:
                    interrupted = True
                    _stopping.set()
                    scope.cancel()

        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as work:
                tg.start_soon(watch, work)
                box.append(await main())
            tg.cancel_scope.cancel()
    return (box[0] if box else None), interrupted


@dataclass(frozen=True)
class RunPlan:
    """Everything one ``spider2local run`` invocation needs, resolved from the command line."""

    folder: RunFolder
    selection: Selection
    settings: RunSettings
    factory: AgentFactory
    suite_path: Path
    suite_sha256: str
    dataset_root: Path
    argv: list[str] | None = None
    isolation: IsolationChoice | None = None
    """How the agent is isolated, resolved once (``settings.isolation`` is its mode)."""
    request: SelectionRequest | None = None
    """How the tasks were chosen (:func:`.resume.selection_request`), recorded in run.json."""
    agent_options: Mapping[str, Any] = field(default_factory=dict)
    """The agent's own options (``replay_dir``), recorded so a resume can reuse them."""
    denominators: Denominators | None = None
    """The dataset audit's counts the report divides by (recorded in run.json)."""
    rerun: tuple[str, ...] = ()
    """``--rerun``: task ids, or ``failed``, whose trials are discarded (into the run's
    history) and run again (:func:`rerun_keys`)."""
    sequential: SequentialSpec | None = None
    """``--against RUN_A --until-decided`` (or a resumed sequential run): B's trials run in
    rounds until the comparison is decided (:mod:`.sequential`)."""
    fresh: bool = False
    """No --run-id was given: ``folder`` carries a provisional timestamp id, and the run
    claims a free id (:func:`.folder.claim_run_id`) when it starts, so two runs started in the
    same second get two folders and a plan that is refused leaves none behind."""


@dataclass(frozen=True)
class RunOutcome:
    folder: RunFolder
    ran: Mapping[tuple[str, int], TaskResult]
    """Results written by this invocation, by ``(task id, trial)``."""
    already_done: tuple[tuple[str, int], ...]
    """Trials of the selection skipped because an earlier invocation finished them."""
    interrupted: bool
    not_run_for_budget: int = 0
    """Trials left unstarted because the run's budget was reached."""


RERUN_FAILED = "failed"
"""``--rerun failed``: every task with a finished trial that did not pass (failed, timeout,
error); tasks without gold (unscored) are left alone, as running them again proves nothing."""


def rerun_keys(request: Sequence[str], results: Mapping[tuple[str, int], TaskResult],
               selected: Sequence[str], folder: RunFolder) -> list[tuple[str, int]]:
    """The trials ``--rerun`` discards: every trial on disk of the tasks named (``failed``:
    see :data:`RERUN_FAILED`). A name that is not a task of the run is one line (exit 2)."""
    if not request:
        return []
    known = set(selected) | {tid for tid, _ in results}
    wanted: set[str] = set()
    for name in request:
        if name == RERUN_FAILED:
            wanted |= {tid for (tid, _), r in results.items()
                       if r.status not in (Status.PASSED, Status.UNSCORED)}
        elif name in known:
            wanted.add(name)
        else:
            raise UserError(f"--rerun {name}: not a task of run {folder.run_id}",
                            path=folder.root,
                            fix=f"name tasks the run selected, or '{RERUN_FAILED}'")
    return [key for key in results if key[0] in wanted] + \
        [(tid, 1) for tid in sorted(wanted) if not any(k[0] == tid for k in results)]


def _check_trials(folder: RunFolder, trials: int,
                  results: Mapping[tuple[str, int], TaskResult]) -> None:
    """A run never loses trials: asking for fewer than it holds is refused (one line)."""
    held = max((trial for _, trial in results), default=1)
    if held > trials:
        raise UserError(f"run {folder.run_id} has {held} trials per task; --trials {trials} "
                        "would drop some", path=folder.root,
                        fix=f"resume with --trials {held} or more, or start a new --run-id")


def _selected(plan: RunPlan, free: Mapping[str, bool | None]) -> list[SelectedTask]:
    sel = plan.selection
    run = [SelectedTask(t.id, t.date.isoformat(), sel.graded.get(t.id, 0), None,
                        free.get(t.id)) for t in sel.tasks]
    skipped = [SelectedTask(tid, "", sel.graded.get(tid, 0), why) for tid, why in sel.skipped]
    return sorted(run + skipped, key=lambda s: s.id)


async def execute_run(plan: RunPlan, progress: Progress) -> RunOutcome:
    """Under the run's lock: write the manifest, run the trials not finished yet (trial 1 of
    every task first), stop cleanly on SIGINT/SIGTERM or at the budget."""
    if plan.fresh:
        plan = replace(plan, folder=RunFolder.at(plan.folder.root.parent,
                                                 claim_run_id(plan.folder.root.parent)))
    folder, settings = plan.folder, plan.settings
    folder.create()
    # every runs folder and gold folder this machine used stays hidden from later runs' agents
    await anyio.to_thread.run_sync(known.remember, known.Kind.RUNS_FOLDER, folder.root.parent)
    for gold in sorted({t.gold.db.parent.parent for t in plan.selection.tasks
                        if t.gold is not None}):
        await anyio.to_thread.run_sync(known.remember, known.Kind.GOLD_FOLDER, gold)
    with run_lock(folder):
        results = folder.trial_results()
        _check_trials(folder, settings.trials, results)
        discard = rerun_keys(plan.rerun, results, plan.selection.ids, folder)
        kept = {k: r for k, r in results.items() if k not in set(discard)}
        done = {key for key, r in kept.items() if is_finished(r)}
        todo = interleaved(plan.selection.tasks, settings.trials, done) \
            if plan.sequential is None else interleaved(plan.selection.tasks, 1, done)
        already = tuple(sorted(k for k in done if k[0] in plan.selection.ids
                               and k[1] <= settings.trials))
        # Every selected task's gold, finished ones included: a resume is refused when any of
        # them changed since the run started, also when nothing is left to run (only the tasks
        # to run were fingerprinted: a finished run "resumed" over changed gold, "0 task(s) to
        # run", and rewrote run.json and the report as if its verdicts still held).
        taken = await anyio.to_thread.run_sync(guard.take, list(plan.selection.tasks))
        free, costs = await _free_passes(plan, {t.task.id for t in todo})
        manifest, fingerprints = _start_manifest(plan, taken, free)
        if discard:
            entry = await anyio.to_thread.run_sync(folder.discard, discard)
            manifest = replace(manifest, reruns=(*manifest.reruns, Rerun(
                at=now_iso(), history=entry.name if entry else None,
                tasks=tuple(sorted({tid for tid, _ in discard})),
                request=tuple(plan.rerun))))
            folder.write_manifest(manifest)
        witness = await _witness(plan, todo, progress)
        if witness is not None:
            manifest = manifest.witnessed(witness.to_json())
            folder.write_manifest(manifest)
        watch = guard.Watch(fingerprints, runs_dir=folder.root.parent,
                            suite_file=plan.suite_path, witness=witness)
        # what cut attempts spent counts too: a resume must not spend past the cap again
        budget = RunBudget(settings.max_cost_usd,
                           sum(r.usage.cost_usd or 0.0 for r in kept.values())
                           + (cut.total(cut.read(folder.root)).cost_usd or 0.0))
        progress.run_started(folder.run_id, todo=len(todo), already_done=already,
                             skipped=plan.selection.skipped, trials=settings.trials,
                             spent_usd=budget.spent, jobs=settings.jobs)
        ran: dict[tuple[str, int], TaskResult] = {}
        try:
            if plan.sequential is None:
                _, interrupted = await until_signal(
                    lambda: run_tasks(todo, folder, settings, plan.factory, progress, ran, watch,
                                      budget, costs))
            else:
                spec = plan.sequential
                by_id = {t.id: t for t in plan.selection.tasks}
                for line in spec.notes:
                    progress.note(folder.run_id, line)

                async def one_round(trials: list[Trial]) -> object:
                    return await run_tasks(trials, folder, settings, plan.factory, progress, ran,
                                           watch, budget, costs)

                _, interrupted = await until_signal(lambda: run_rounds(
                    spec, folder, by_id, one_round, lambda: round(budget.spent, 6),
                    lambda line: progress.note(folder.run_id, line)))
                # the partial round a signal or the budget left is in the record too
                analyse_run(spec, folder, round(budget.spent, 6))
        finally:
            if witness is not None:
                manifest = manifest.witnessed(witness.to_json())
                await anyio.to_thread.run_sync(witness.close)
        if witness is not None:
            _say_strays(witness.to_json(), folder.run_id, progress)
        if budget.not_run:
            why = ("cannot be enforced (a model used has no price in spider2local's table)"
                   if budget.shared.unknown else f"was reached (spent ${budget.spent:.2f})")
            progress.note(folder.run_id, f"{budget.not_run} trial(s) not started: the run's "
                                         f"budget of ${budget.cap:.2f} {why}; resume with a "
                                         "higher --max-cost-usd to run them")
        manifest = replace(manifest, not_run_for_budget=budget.not_run,
                           spent_usd=round(budget.spent, 6))
        folder.write_manifest(manifest.finish(interrupted=interrupted))
    return RunOutcome(folder, ran, already, interrupted, budget.not_run)


async def _witness(plan: RunPlan, todo: Sequence[Trial],
                   progress: Progress) -> witness_mod.Witness | None:
    """The unsealed witness of a run whose agent works without a sandbox
    (:mod:`spider2local.integrity.witness`), started after everything that reads the originals
    at the run's start (fingerprints, free passes); ``None`` for a sandboxed agent (nothing
    changes there). Off (the reason on stderr and in run.json) where inotify cannot work."""
    if plan.settings.isolation is not IsolationMode.NONE or not todo:
        return None
    tasks = list({t.task.id: t.task for t in todo}.values())
    found = await anyio.to_thread.run_sync(witness_mod.open_witness, tasks)
    if not found.on:
        progress.note(plan.folder.run_id, f"warning: the unsealed witness is off "
                                          f"({found.reason}): an agent that reads gold without "
                                          "naming it goes unseen")
    return found


def _say_strays(record: Mapping[str, Any], run_id: str, progress: Progress) -> None:
    """One line for what the witness saw while no agent was in its stage (kept in run.json)."""
    strays = record.get("unattributed") or []
    if strays:
        first = strays[0]
        progress.note(run_id, f"witness: {len(strays)} access(es) to watched files while no "
                              f"agent was in its stage (a leftover, another program), first: "
                              f"{first['kind']} {first['path']} {first['what']} at "
                              f"{first['at']}; see run.json")


async def _free_passes(plan: RunPlan, to_run: Collection[str]
                       ) -> tuple[dict[str, bool | None], dict[str, StageCosts]]:
    """Which selected tasks pass untouched, so the report can say how many passes were free,
    and what that work cost for each task ``to_run`` (the base of its stage deadlines,
    :mod:`.deadlines`). A task's free pass is measured once per run: what an earlier invocation
    recorded is kept (the start and gold databases are the dataset's, unchanged between
    sessions); its cost is measured again by every invocation that runs it, on the machine as
    it is now."""
    previous = plan.folder.read_manifest()
    known = {t.id: t.free for t in (previous.tasks if previous else ())
             if isinstance(t.free, bool)}
    todo = [t for t in plan.selection.tasks if t.id not in known or t.id in to_run]
    found = await start_baseline(todo)
    costs = {tid: StageCosts(checkpoint=s.get(CHECKPOINT), score=s.get(SCORE))
             for tid, s in found.seconds.items()}
    return {**found.free, **known}, costs


def _start_manifest(plan: RunPlan, taken: guard.Fingerprints, free: Mapping[str, bool | None]
                    ) -> tuple[RunManifest, guard.Fingerprints]:
    """The manifest of this invocation, written before any task starts, and the fingerprints
    it records; a resume must match the run's first settings and fingerprints and keeps every
    task selected so far."""
    folder, settings = plan.folder, plan.settings
    previous = folder.read_manifest()
    counts = plan.denominators.to_json() if plan.denominators is not None else None
    manifest = RunManifest.begin(
        run_id=folder.run_id, agent=settings.agent, settings=settings.to_json(),
        suite_path=plan.suite_path, suite_sha256=plan.suite_sha256,
        dataset_root=plan.dataset_root, tasks=_selected(plan, free), previous=previous,
        argv=plan.argv, prompts_dir=settings.prompts_dir, skills_dir=settings.skills_dir,
        denominators=counts)
    manifest = replace(
        manifest, isolation=plan.isolation.record if plan.isolation is not None else None,
        dataset_sha256=dataset_fingerprint(plan.dataset_root),
        selection=plan.request,
        agent_options={k: str(v) for k, v in plan.agent_options.items()})
    check_resumable(previous, manifest, folder)
    recorded = previous.integrity if previous else None
    fingerprints = taken if recorded is None else _resumed(recorded, taken, folder)
    manifest = replace(manifest, tasks=merged_tasks(previous, manifest.tasks),
                       integrity=fingerprints)
    folder.write_manifest(manifest)
    return manifest, fingerprints


def _resumed(recorded: guard.Fingerprints, taken: guard.Fingerprints,
             folder: RunFolder) -> guard.Fingerprints:
    """The first invocation's fingerprints stay the reference: a resume with another scorer,
    or after a task's gold or evaluation record changed, would score against other files."""
    changed = guard.differences(recorded, taken, all_recorded=False)
    if changed:
        more = f" (+{len(changed) - 3} more)" if len(changed) > 3 else ""
        raise UserError(f"run {folder.run_id} cannot be resumed: changed since it started: "
                        + "; ".join(changed[:3]) + more, path=folder.root,
                        fix="restore those files, or start a new run with another --run-id")
    return recorded.merged(taken)


def run_plan_sync(plan: RunPlan, progress: Progress) -> RunOutcome:
    return anyio.run(execute_run, plan, progress)


def plan_run(suite: Suite, data: Dataset, *, ids: Sequence[str] = (), subset: str | None = None,
             shard: str | None = None, limit: int | None = None, agent: str | None = None,
             replay_dir: Path | None = None, runs_dir: Path = Path("runs"),
             run_id: str | None = None, argv: list[str] | None = None,
             isolation: Isolation | str | None = None, rerun: Sequence[str] = (),
             against: RunFolder | None = None, until_decided: bool = False,
             max_trials: int | None = None, min_difference: float | None = None,
             replay: str | Path | None = None, replay_lenient: bool = False,
             replay_until: int | None = None, **overrides: Any) -> RunPlan:
    """Resolve the command line; every problem is a UserError raised before anything runs.
    ``overrides`` are RunSettings fields (None means "the suite's default"). ``isolation``
    (default: the suite's) is resolved here, probing the machine once. Resuming ``run_id``,
    every option left out is the one its run.json recorded (:func:`.resume.remembered`).
    ``replay`` (``--replay RUN``): a run whose recorded model exchanges every trial replays
    (:mod:`spider2local.gateway.replay`); its options are taken as a resume takes its own
    run's, so that the replayed agent is the recorded one."""
    folder = RunFolder.at(runs_dir, run_id or new_run_id())
    previous = folder.read_manifest() if run_id is not None else None
    if rerun and previous is None:
        raise UserError("--rerun needs the --run-id of an existing run",
                        fix="name the run whose tasks to run again with --run-id")
    recorded = from_record(folder) if previous is not None else None
    design: Design | None = None
    if recorded is not None:  # a sequential run stays one: its record says against what
        if against is not None and against.root.resolve() != recorded.against.root.resolve():
            raise UserError(f"run {folder.run_id} is compared with {recorded.against.root}, "
                            f"not {against.root}", path=folder.root,
                            fix="resume it without --against, or start a new --run-id")
        against, design = recorded.against, recorded.design
    elif until_decided:
        if against is None:
            raise UserError("--until-decided needs --against RUN_A",
                            fix="name the run to compare with: its folder, id or 'latest'")
        design = Design(max_rounds=max_trials or MAX_ROUNDS,
                        min_difference=MIN_DIFFERENCE if min_difference is None
                        else min_difference)
    elif against is not None or max_trials is not None or min_difference is not None:
        raise UserError("--against, --max-trials and --min-difference go with --until-decided",
                        fix="add --until-decided")
    if design is not None:
        if overrides.get("trials") not in (None, design.max_rounds) and recorded is None:
            raise UserError("--trials does not apply with --until-decided",
                            fix="use --max-trials K (the most rounds)")
        overrides["trials"] = design.max_rounds
    source = _replay_source(replay, replay_lenient, replay_until, runs_dir, folder)
    source = _resumed_replay(previous, source, folder)
    memory = remembered(previous if previous is not None or source is None
                        else open_run_dir(source.folder).read_manifest())
    if memory:
        if not ids and subset is None and shard is None and limit is None:
            ids, subset, shard, limit = (memory["ids"] or (), memory["subset"],
                                         memory["shard"], memory["limit"])
        agent = agent or memory["agent"]
        if replay_dir is None and memory["replay_dir"] is not None:
            replay_dir = Path(memory["replay_dir"])
        isolation = isolation or memory["isolation"]
        for s in remembered_settings():
            if s.name in ("agent", "isolation"):
                continue
            # flags come as None when absent (False, from a caller, counts as absent too):
            # once on, a resume keeps them
            given, kept = overrides.get(s.name), memory.get(s.name)
            if kept is not None and (given is None or given is False):
                overrides[s.name] = kept
    name = agent or suite.defaults.agent
    options: dict[str, Any] = {}
    kind = name
    apis = overrides.get("agent_apis")
    if name in suite.agents:  # [agents.NAME]: a command agent defined once in the suite
        spec = suite.agents[name]
        kind = "command"
        options.update(spec.options())
        if overrides.get("agent_command") not in (None, spec.command):
            raise UserError(f"--agent-command does not apply to --agent {name}",
                            path=suite.path, fix=f"its command is [agents.{name}]'s")
        if apis is not None and tuple(apis) != spec.apis:
            raise UserError(f"--agent-api does not apply to --agent {name}", path=suite.path,
                            fix=f"its APIs are [agents.{name}] apis")
        # recorded: compare/merge/resume see them
        overrides["agent_command"], overrides["agent_apis"] = spec.command, spec.apis
    elif overrides.get("agent_command") is not None:
        if name != "command":
            raise UserError(f"--agent-command does not apply to --agent {name}",
                            fix="use it with --agent command")
        options["command"] = overrides["agent_command"]
        options["apis"] = tuple(apis or ())
    if apis and kind != "command":
        raise UserError(f"--agent-api does not apply to --agent {name}",
                        fix="use it with --agent command --agent-command '...'")
    caps = capabilities(kind)  # an unknown name fails here, with one line; resolved once
    if replay_dir is not None:
        if not takes_option(kind, "replay_dir"):
            raise UserError(f"--replay-dir does not apply to --agent {name}",
                            fix="it is an option of the agents that replay files (--agent replay)")
        options["replay_dir"] = replay_dir
    if source is None:  # a replay calls no API: no credential is needed, none is used
        caps.check_credentials(name, os.environ)
    make_agent(kind, **options)  # fails now, with one line, on a bad agent or option
    find_library()  # every task needs the fake clock: fail once here, not once per task
    selection = select_tasks(data, ids, subset=subset,
                             shard=parse_shard(shard) if shard else None, limit=limit)
    if caps.needs_solution:
        selection = _needs_solution(selection)
    if source is not None:
        _check_recorded(source, selection)
    choice = choose_isolation(Isolation(isolation or suite.defaults.isolation),
                              sandboxed=caps.sandboxed, agent=name)
    prompts, skills = kit_dirs(overrides.pop("prompts_dir", None),
                               overrides.pop("skills_dir", None))
    settings = RunSettings.from_defaults(suite.defaults,
                                         suite_skills(suite.defaults, caps, skills),
                                         agent=name, capabilities=caps,
                                         isolation=choice.mode, prompts_dir=prompts,
                                         skills_dir=skills, replay=source, **overrides)
    check_skills(selection.tasks, settings, suite.path)
    pairing: SequentialSpec | None = None
    if design is not None and against is not None:
        pairing = recorded if recorded is not None else resolve(
            against, [t.id for t in selection.tasks], design, folder)
        paired = set(pairing.tasks)
        selection = replace(selection,
                            tasks=tuple(t for t in selection.tasks if t.id in paired),
                            skipped=(*selection.skipped,
                                     *((t.id, f"no scored trial in run {against.run_id}")
                                       for t in selection.tasks if t.id not in paired)))
    return RunPlan(folder=folder, selection=selection,
                   settings=settings, factory=lambda: make_agent(kind, **options),
                   suite_path=suite.path, suite_sha256=suite.sha256, dataset_root=data.root,
                   argv=argv, isolation=choice, denominators=denominators(data),
                   request=selection_request(ids, subset, shard, limit),
                   rerun=tuple(rerun), sequential=pairing,
                   agent_options={k: Path(v).resolve() for k, v in options.items()
                                  if k == "replay_dir"},
                   fresh=run_id is None)


def _replay_source(replay: str | Path | None, lenient: bool, until: int | None,
                   runs_dir: Path, folder: RunFolder) -> ReplaySource | None:
    """``--replay RUN`` resolved (a folder, a run id or 'latest', as everywhere)."""
    if replay is None:
        for given, flag in ((lenient, "--replay-lenient"), (until is not None, "--replay-until")):
            if given:
                raise UserError(f"{flag} needs --replay RUN",
                                fix="name the recorded run to replay with --replay RUN")
        return None
    recorded = open_run_dir(resolve_run(replay, runs_dir))
    where = recorded.root.resolve()
    if where == folder.root.resolve():
        raise UserError(f"run {recorded.run_id} cannot replay into itself", path=where,
                        fix="leave out --run-id (a new run), or give another one")
    return ReplaySource(recorded.run_id, where, lenient, until)


def _resumed_replay(previous: RunManifest | None, source: ReplaySource | None,
                    folder: RunFolder) -> ReplaySource | None:
    """A resume keeps what the run replays: left out, the recorded source (a replayed run
    resumed without ``--replay`` must not call a live API for its remaining trials); given,
    it must be the same, and a live run cannot become a replay (one run, one experiment)."""
    if previous is None:
        return source
    kept = previous.setting("replay")
    if not isinstance(kept, dict):
        if source is not None:
            raise UserError(f"run {folder.run_id} was not a replay: it cannot be resumed with "
                            "--replay", path=folder.root,
                            fix="start a new run (leave out --run-id) to replay")
        return None
    until = kept.get("until")
    recorded = ReplaySource(str(kept.get("run")), Path(str(kept.get("folder"))),
                            bool(kept.get("lenient")), until if isinstance(until, int) else None)
    if source is not None and source != recorded:
        raise UserError(f"run {folder.run_id} replays {recorded.run_id} "
                        f"({'lenient' if recorded.lenient else 'strict'}): a resume must too",
                        path=folder.root, fix="resume it without --replay, or start a new run")
    return recorded


def _check_recorded(source: ReplaySource, selection: Selection) -> None:
    """A replay of a run none of whose selected tasks has a recording would only report
    one error per trial: one line before anything starts instead. (A task without one is
    that trial's error: one broken task never stops a run.)"""
    recorded = RunFolder(source.folder)
    if selection.tasks and not any((recorded.trial_dir(t.id) / API_REPLAY).is_file()
                                   for t in selection.tasks):
        raise UserError(f"run {source.run_id} holds no recorded model exchanges of the "
                        f"selected tasks ({API_REPLAY} in their folders)", path=source.folder,
                        fix="replay a run made by this version of spider2local with an agent "
                            "that calls a model through its gateway")


def _needs_solution(selection: Selection) -> Selection:
    """An agent that applies reference solutions proves a task's solution, date and gold agree;
    a task without one would only be scored on its untouched database, which proves nothing."""
    unsolved = [t for t in selection.tasks if t.solution_dir is None]
    if selection.tasks and len(unsolved) == len(selection.tasks):
        # every task would be skipped and the run "complete" with exit 0: nothing was tested
        raise UserError(f"none of the {len(unsolved)} selected tasks has a reference solution",
                        fix="add solutions/<id>/ folders (or the suite's solution setting), "
                            "or choose another --agent")
    return replace(selection,
                   tasks=tuple(t for t in selection.tasks if t.solution_dir is not None),
                   skipped=(*selection.skipped,
                            *((t.id, "no reference solution (solutions/<id>/ or the suite's "
                               "solution setting)") for t in unsolved)))

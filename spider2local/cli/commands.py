"""The bodies of ``spider2local run`` and ``score``: run or score, print, choose the exit code.

Kept out of cli/app.py so the command line module stays declarations (options, help, error
handling) and these rules can be read in one place: ``run`` exits 0 when the run completed
whatever the verdicts and 130 when interrupted; ``score FILE`` exits 0 when the database passes
and 1 when it fails; ``score RUN_DIR`` exits 1 when not a single task could be re-scored,
because a report that silently kept every old verdict would look like a successful re-score.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from spider2local.cli.exits import FAILED, INTERRUPTED, OK
from spider2local.dataset.task import Dataset, Gold
from spider2local.evaluation.params import EvalParams
from spider2local.exceptions import ScoringError, UserError
from spider2local.proc.kill import hurry
from spider2local.report.jsonout import report_json
from spider2local.report.summary import load_report
from spider2local.report.terminal import render_terminal, write_terminal
from spider2local.run.folder import RunFolder
from spider2local.run.plan import STOP_SIGNALS, RunPlan, run_plan_sync, stop_requested
from spider2local.run.progress import Progress
from spider2local.run.rescore import rescore_run


def _out(text: str) -> None:
    print(text, flush=True)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def print_report(folder: RunFolder, as_json: bool, color: bool | None = None) -> None:
    """The final report on stdout: JSON, or the table fitted to the terminal and coloured
    there (``color=False``: ``--no-color``; rich also honours ``NO_COLOR``)."""
    report = load_report(folder)
    if as_json:
        _out(json.dumps(report_json(report), indent=2, default=str, allow_nan=False))
    else:
        write_terminal(report, sys.stdout, color=color)


@contextlib.contextmanager
def _late_signals_hurry() -> Iterator[None]:
    """Around a run: a stop signal is the run's (``until_signal``) while it runs; one that
    arrives outside it (before, or once the run gave its handlers back) is a KeyboardInterrupt
    when nothing was stopped yet, and only hurries the exit when the run was stopped already:
    two Ctrl-C 50 ms apart used to kill the runner with SIGINT in the middle of its report.
    Once a run was stopped, further stop signals are ignored (the command only prints and
    exits)."""
    def handler(signum: int, frame: object) -> None:
        if stop_requested():
            hurry()
            return
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        # Stopped: the command only prints and exits. SIG_IGN, not a Python handler: the
        # interpreter's finalization resets Python handlers to SIG_DFL, and a signal then
        # killed the runner (exit -2 instead of 130); it leaves SIG_IGN alone.
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_IGN if stop_requested() else old)


def run_command(plan: RunPlan, as_json: bool, progress: Progress | None = None,
                color: bool | None = None) -> int:
    """Run ``plan``, print the final report; returns the exit code."""
    if plan.isolation is not None and plan.isolation.warning:
        _err(plan.isolation.warning)
    with _late_signals_hurry():
        outcome = run_plan_sync(plan, progress or Progress(color=color))
    print_report(outcome.folder, as_json, color)
    page = write_html_report(outcome.folder)
    if not as_json:
        _out(f"run folder: {outcome.folder.root}")
        if page is not None:
            _out(f"report: {page}")
    if outcome.interrupted:
        _err(f"interrupted: run the same command with --run-id {outcome.folder.run_id} "
             "to resume")
        return INTERRUPTED
    return OK


def score_command(folder: RunFolder, data: Dataset, as_json: bool,
                  accept_changes: bool = False) -> int:
    """Re-score ``folder`` from its kept databases, print the report; returns the exit code."""
    rescored = rescore_run(folder, data, accept_changes=accept_changes)
    for item in rescored:
        if item.result is None:
            name = item.task_id if item.trial == 1 else f"{item.task_id}#{item.trial}"
            _err(f"{name}: not re-scorable: {item.reason}")
    print_report(folder, as_json)
    done = sum(item.result is not None for item in rescored)
    if not done:
        why = "no finished task" if not rescored else "no task"
        _err(f"nothing re-scored: {why} of {folder.root} could be re-scored "
             "(kept databases come from `run --keep-db`)")
        return FAILED
    return OK


def regrade_command(folder: RunFolder, data: Dataset, write: bool) -> int:
    """``regrade RUN``: each trial that could not be regraded on stderr, then the delta on
    stdout (``regrade: N trials changed: ...``); 1 when a graded file was refused or nothing
    could be regraded, else 0."""
    from spider2local.run.regrade import regrade_run

    found = regrade_run(folder, data, write=write)
    for item in found.trials:
        if item.new is None:
            _err(f"{item.label}: {'refused' if item.refused else 'not regradable'}: "
                 f"{item.reason}")
    if found.changed_since_run:
        more = len(found.changed_since_run) - 3
        _err("note: changed since the run: " + "; ".join(found.changed_since_run[:3])
             + (f" (+{more} more)" if more > 0 else ""))
    changed, regraded = found.changed, len(found.regraded)
    if changed:
        _out(f"regrade: {_trials(len(changed))} changed (of {regraded} regraded):")
        for item in changed:
            _out(f"  {item.label}: {item.describe()}")
    else:
        _out(f"regrade: 0 trials changed ({_trials(regraded)} regraded)")
    if write:
        _out(f"regrade: {found.written} result.json rewritten")
        if found.written:
            write_html_report(folder)
    elif changed:
        _out("regrade: nothing written (--write rewrites the changed trials' results)")
    if not regraded:
        _err(f"nothing regraded: no trial of {folder.root} could be regraded")
    return FAILED if found.refused or not regraded else OK


def _trials(n: int) -> str:
    return f"{n} trial{'' if n == 1 else 's'}"


def render_format(folder: RunFolder, fmt: str) -> str:
    """The report of ``folder`` in ``fmt`` (one of
    :data:`spider2local.report.formats.REPORT_FORMATS`), from the folder
    alone: no dataset, no credentials."""
    report = load_report(folder)
    if fmt == "json":
        return json.dumps(report_json(report), indent=2, default=str, allow_nan=False) + "\n"
    if fmt == "markdown":
        from spider2local.report.markdown import render_markdown

        return render_markdown(report)
    if fmt == "junit":
        from spider2local.report.junit import render_junit

        return render_junit(report)
    if fmt == "html":
        from spider2local.report.html import render_html

        return render_html(report, folder)
    return render_terminal(report) + "\n"


def write_html_report(folder: RunFolder, page: str | None = None) -> Path | None:
    """Write ``<run>/report.html`` (what a person opens after a run; ``page`` when it is
    rendered already); returns its path, or None after one warning line on stderr when it
    cannot be written: the run's results are on disk whatever happens to their page, and
    ``report RUN`` rebuilds it."""
    from spider2local.core.layout import REPORT_HTML
    from spider2local.core.results import write_text_atomic
    from spider2local.report.html import render_html

    path = folder.root / REPORT_HTML
    try:
        write_text_atomic(path, page if page is not None
                          else render_html(load_report(folder), folder))
    except Exception as exc:  # any failure of the page must not fail the run
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        _err(f"warning: {path} not written ({type(exc).__name__}: {why}); "
             f"`spider2local report {folder.root}` rebuilds it")
        return None
    return path


def report_command(folder: RunFolder, fmt: str, output: Path | None, *,
                   task_id: str | None = None, trial: int | None = None,
                   color: bool | None = None) -> int:
    """``spider2local report``: print the report, or write it to ``output`` (atomically, so a
    CI step never uploads half a file); with ``task_id``, that one task whole
    (:mod:`spider2local.report.task`). The run's report.html is rebuilt too (a folder that
    cannot take it, a read-only CI artifact, gets one warning line). The terminal format on a
    terminal is what ``run`` ends with: fitted to its width and coloured."""
    if task_id is None and fmt == "terminal" and output is None:
        report = load_report(folder)
        if folder.read_manifest() is not None:
            write_html_report(folder)
        write_terminal(report, sys.stdout, color=color)
        return OK
    if task_id is not None:
        from spider2local.report.task import render_task

        text = render_task(folder, load_report(folder), task_id, trial)
    else:
        text = render_format(folder, fmt)
        if folder.read_manifest() is not None:
            write_html_report(folder, text if fmt == "html" else None)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return OK
    from spider2local.core.results import write_text_atomic

    try:
        write_text_atomic(output, text)
    except OSError as exc:
        raise UserError(f"cannot write the report: {exc.strerror or exc}", path=output,
                        fix="pass a writable --output path") from None
    return OK


def task_gold(data: Dataset, task_id: str) -> Gold:
    """The gold database and evaluation parameters of ``task_id`` (``score FILE --task``)."""
    task = data.get(task_id)
    if task is None or task.gold is None:
        raise UserError(f"task {task_id!r} has no usable gold in this dataset",
                        fix="see `spider2local list`")
    return task.gold


def score_file_command(db: Path, gold: Path, params: EvalParams, as_json: bool) -> int:
    """Score one database against ``gold``, print the verdict; 0 when it passes, else 1."""
    from spider2local.core.codec import dump
    from spider2local.db.header import duckdb_file_problem
    from spider2local.evaluation import render_text
    from spider2local.sandbox.scoring import score_sandboxed_sync

    problem = duckdb_file_problem(db)  # a typo'd path must not read as a FAIL verdict
    if problem is not None:
        raise UserError(f"cannot score: {problem}", path=db,
                        fix="pass the result .duckdb file (run --keep-db keeps them)")
    try:
        result = score_sandboxed_sync(db, gold, params)
    except ScoringError as exc:
        raise UserError(f"cannot score: {exc}") from None
    _out(json.dumps(dump(result), indent=2, default=str, allow_nan=False) if as_json
         else render_text(result))
    return OK if result.passed else FAILED

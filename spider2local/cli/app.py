"""The command line. The only module that imports click: everything else is plain functions.

Every command takes the global options ``--suite`` and ``--dataset`` (before or after the command
name). A :class:`UserError` anywhere becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from spider2local import __version__
from spider2local.cli import complete
from spider2local.cli.exits import BAD_INPUT, FAILED, INTERRUPTED, NO_MEMORY, OK
from spider2local.exceptions import UserError
from spider2local.export.extras import FORMATS as EXPORT_FORMATS
from spider2local.report.formats import REPORT_FORMATS
from spider2local.suite import options
from spider2local.suite.load import default_suite_path, load_suite
from spider2local.suite.model import Suite

if TYPE_CHECKING:
    from spider2local.dataset.task import Dataset
    from spider2local.run.folder import RunFolder

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Globals:
    suite: Path | None = None
    dataset: str | None = None

    def load_suite(self) -> Suite:
        return load_suite(self.suite or default_suite_path()).with_dataset(self.dataset)


class _Group(click.Group):
    """Turns :class:`UserError` into a one-line message and exit code 2, never a traceback;
    Ctrl-C outside a run (a run handles it itself) into "interrupted" and exit code 130;
    running out of memory in this process (:func:`~spider2local.core.faults.is_out_of_memory`,
    also inside a task group's exception group) into one line and exit code 3: under
    ``ulimit -v`` the runner printed a traceback or nothing at all."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            one_line = " ".join(str(exc).split())  # library messages may span lines
            click.echo(f"spider2local: error: {one_line}", err=True)
            ctx.exit(BAD_INPUT)
        except KeyboardInterrupt:
            click.echo("\nspider2local: interrupted", err=True)
            ctx.exit(INTERRUPTED)
        except Exception as exc:
            from spider2local.core.faults import is_out_of_memory

            if not is_out_of_memory(exc):
                raise
            del exc  # let the frames it holds go: the line below needs a little memory
            click.echo("spider2local: error: not enough memory to go on (the tasks recorded "
                       "so far stay; free memory, then resume the run)", err=True)
            ctx.exit(NO_MEMORY)
        except BaseExceptionGroup as group:
            # a stop signal before the run took its handlers raises KeyboardInterrupt wherever
            # the code is; inside a task group (the free passes' reader starting) it arrives
            # wrapped, and printed a traceback with exit code 1 (a SIGTERM in a CI run)
            if group.split(KeyboardInterrupt)[1] is not None:
                raise
            click.echo("\nspider2local: interrupted", err=True)
            ctx.exit(INTERRUPTED)


def _set_suite(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    if value is not None:
        ctx.ensure_object(Globals).suite = value


def _set_dataset(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(Globals).dataset = value


def global_options(fn: F) -> F:
    """``--suite`` and ``--dataset``, accepted on the group and on every command."""
    fn = click.option("--dataset", metavar="PATH", expose_value=False, callback=_set_dataset,
                      help="Dataset root (spider2-dbt folder); overrides the suite's. "
                           "'sample' means the bundled sample suite.")(fn)
    fn = click.option("--suite", metavar="FILE", type=click.Path(path_type=Path),
                      expose_value=False, callback=_set_suite,
                      help="Suite file (default: the nearest tasks.toml in this folder or "
                           "above, else the bundled sample suite).")(fn)
    return fn


RUNS_DIR = Path("runs")


def runs_dir_option(fn: F) -> F:
    """``--runs-dir``, where run ids (and 'latest') are looked up: the same default as run's."""
    return click.option("--runs-dir", type=click.Path(path_type=Path, file_okay=False),
                        default=RUNS_DIR, show_default=True,
                        help="Where run ids and 'latest' are looked up.")(fn)


def _open_run(ref: str, runs_dir: Path) -> RunFolder:
    """A run given on the command line as a folder, a run id of ``runs_dir`` or 'latest'."""
    from spider2local.run.folder import open_run_dir, resolve_run

    return open_run_dir(resolve_run(ref, runs_dir))


ENV_PREFIX = "SPIDER2LOCAL"
"""Every option can also be set in the environment: ``SPIDER2LOCAL_<OPTION>`` for the global
ones (``SPIDER2LOCAL_SUITE``), ``SPIDER2LOCAL_<COMMAND>_<OPTION>`` for a command's
(``SPIDER2LOCAL_RUN_JOBS=2``); a flag on the command line wins (click's auto_envvar_prefix)."""


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"],
                                           "auto_envvar_prefix": ENV_PREFIX})
@click.version_option(__version__, prog_name="spider2local")
@global_options
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run the Spider2-DBT benchmark locally: no Docker, a fixed clock per task, official
    scoring."""
    _configure_logging()
    ctx.ensure_object(Globals)


LOG_LEVEL_ENV = "SPIDER2LOCAL_LOG_LEVEL"


def _configure_logging() -> None:
    """Diagnostics go through :mod:`logging` to stderr: warnings by default, everything with
    ``SPIDER2LOCAL_LOG_LEVEL=debug`` (the tracebacks behind a task's error.txt included)."""
    level = os.environ.get(LOG_LEVEL_ENV, "WARNING").upper()
    logging.basicConfig(level=level if level in logging.getLevelNamesMapping() else "WARNING",
                        format="spider2local: %(levelname)s %(name)s: %(message)s")
    asyncio_log = logging.getLogger("asyncio")
    if not any(isinstance(f, ClosedLoopChild) for f in asyncio_log.filters):
        asyncio_log.addFilter(ClosedLoopChild())


class ClosedLoopChild(logging.Filter):
    """Drops asyncio's "Loop ... that handles pid N is closed": its child watcher thread says
    so when a child it waits for ends after the event loop closed, and reaps it all the same.
    That happened on the way out of an interrupted run (a reader child, asked from a worker
    thread's loop when the stop signal landed, killed with the run's process tree), where it
    printed after "interrupted" (a clean-clone CI run caught it). Such a reader now ends with
    the task that asked (:func:`spider2local.sandbox.readers.ask_reader_sync`); the filter
    stays for any child of a loop that closes first. Any other asyncio record passes."""

    MESSAGE = "Loop %r that handles pid %r is closed"

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != self.MESSAGE


def _globals() -> Globals:
    return click.get_current_context().ensure_object(Globals)


def _echo_dataset_warnings(data: Dataset) -> None:
    """The dataset's file-level warnings on stderr, once, worded the same by every command."""
    from spider2local.cli.listing import warning_lines

    for line in warning_lines(data):
        click.echo(line, err=True)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str, allow_nan=False))


class SettingType(click.ParamType):  # type: ignore[type-arg]
    """A flag's value through its setting's parser (:mod:`spider2local.suite.options`): the
    same rule and phrase as the suite key, as one line and exit 2 (``--trials: must be
    positive, not 0``). ``click.FloatRange(min=0, min_open=True)`` let ``nan`` through."""

    def __init__(self, setting: options.Setting) -> None:
        self.setting = setting
        self.name = setting.parser.metavar.lower() or "value"

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        parser = self.setting.parser
        if isinstance(parser, options.Choice):
            return "[" + "|".join(parser.choices()) + "]"
        return parser.metavar

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self.setting.parse(value, text=True)
        except ValueError as exc:
            raise UserError(f"{self.setting.option}: {exc}",
                            fix=f"see `spider2local run --help` for {self.setting.option}"
                            ) from None


@cli.command("list")
@global_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--shards", type=click.IntRange(min=1), metavar="N",
              help="Instead of the tasks: the N shards `run --shard K/N` would run (with "
                   "--json: a GitHub Actions matrix).")
@click.option("--subset", help="Only this subset's tasks (as `run --subset` selects them); "
                               "with --shards: shard this subset.")
@click.option("--trials", type=SettingType(options.setting("trials")), default=None,
              help="With --shards: the trials each shard's job runs (`run --trials K`), in "
                   "every row of the matrix.")
def list_cmd(as_json: bool, shards: int | None, subset: str | None,
             trials: int | None) -> None:
    """One row per task: id, runnable or the problem, fake date, graded tables."""
    from spider2local.cli.listing import (
        listed_tasks,
        listing_json,
        listing_text,
        shard_matrix,
        shard_text,
    )
    from spider2local.clock.dates import undated_warning
    from spider2local.dataset.load import load_dataset

    suite = _globals().load_suite()
    data = load_dataset(suite)
    if trials is not None and shards is None:
        raise UserError("--trials applies to --shards", fix="add --shards N, or drop --trials")
    if shards is not None:
        matrix = shard_matrix(data, shards, subset, trials or 1)
        if not matrix["include"]:
            raise UserError(f"no task to shard in subset {subset or 'all'!r}",
                            path=suite.path, fix="pick a subset that holds tasks")
        if as_json:
            click.echo(json.dumps(matrix, separators=(",", ":")))  # one line: $GITHUB_OUTPUT
        else:
            click.echo(shard_text(matrix))
        _echo_dataset_warnings(data)
        return
    if as_json:
        _echo_json(listing_json(data, subset))
    else:
        click.echo(listing_text(data, subset))
        _echo_dataset_warnings(data)
    undated = undated_warning((t for t in listed_tasks(data, subset) if t.runnable), suite)
    if undated is not None:
        click.echo(f"warning: {undated}", err=True)


@cli.command()
@global_options
@click.option("--no-clock-test", is_flag=True, help="Skip the fake-clock self-test (faster).")
@click.option("--check-api", is_flag=True,
              help="Also send one tiny real request (max_tokens 1) to the agent's API with the "
                   "suite's model and the credential from the environment.")
@click.option("--api-timeout", type=click.FloatRange(min=0.1, max=600), default=None,
              help="Seconds --check-api waits for an answer (default 30).")
@click.option("--agent", "agent", metavar="AGENT",
              help="Check what this agent needs (default: the suite's); what only other "
                   "agents need is reported as optional.")
def doctor(no_clock_test: bool, check_api: bool, api_timeout: float | None,
           agent: str | None) -> None:
    """Check this machine: versions, libfaketime, the fake clock, Claude CLI, credentials,
    dataset (and, with --check-api, the API itself). Exit 1 if something the chosen agent
    needs is missing."""
    from spider2local.agents.registry import capabilities
    from spider2local.cli.doctor import API_TIMEOUT, exit_code, run_checks

    if agent is not None:
        capabilities(agent)  # an unknown agent: one line, exit 2
    try:
        suite = _globals().load_suite()
    except UserError as exc:
        click.echo(f"FAIL  suite: {exc}")
        sys.exit(1)
    checks = run_checks(suite, clock_selftest=not no_clock_test, check_api=check_api,
                        api_timeout=API_TIMEOUT if api_timeout is None else api_timeout,
                        agent=agent)
    for check in checks:
        click.echo(check.line)
    sys.exit(exit_code(checks))




def _joined(ctx: click.Context, param: click.Parameter, value: tuple[Any, ...]) -> Any:
    """A repeatable setting's values as one tuple (each occurrence parsed to a tuple of its
    own); none given: ``None``, so the suite or a resume decides, as for every option."""
    joined = tuple(dict.fromkeys(name for given in value for name in given))
    return joined or None


def setting_options(fn: F) -> F:
    """One option per flag of the settings table, in its order (``run --help``). A setting
    added to the table is a flag here with no other edit; absent, every option is ``None``
    (the suite's value, or on a resume the recorded one, applies)."""
    for setting in reversed(options.flags()):
        assert setting.option is not None
        if isinstance(setting.parser, options.OffFlag):  # --no-X: given, off
            fn = click.option(setting.option, setting.name, flag_value=False, default=None,
                              help=setting.help)(fn)
        elif isinstance(setting.parser, options.Flag):
            fn = click.option(setting.option, setting.name, is_flag=True, default=None,
                              help=setting.help)(fn)
        elif getattr(setting.parser, "repeatable", False):
            fn = click.option(setting.option, setting.name, type=SettingType(setting),
                              multiple=True, callback=_joined, help=setting.help)(fn)
        else:
            fn = click.option(setting.option, setting.name, type=SettingType(setting),
                              default=None, help=setting.help)(fn)
    return fn


@cli.command()
@global_options
@click.argument("task_ids", nargs=-1, shell_complete=complete.task_ids)
@setting_options
@click.option("--replay-dir", type=click.Path(path_type=Path, file_okay=False),
              help="For --agent replay: a folder with one sub-folder of files per task id.")
@click.option("--replay", "replay", metavar="RUN", shell_complete=complete.run_ids,
              help="Replay RUN's recorded model exchanges (a folder, a run id or 'latest'): "
                   "fresh trials whose gateway answers from RUN's trials, calling no API; "
                   "a request that differs stops the trial ('diverged at exchange N').")
@click.option("--replay-lenient", is_flag=True,
              help="With --replay: serve the recorded answers even after a request differs "
                   "(every later step is marked unverified).")
@click.option("--replay-until", type=click.IntRange(min=0), metavar="N",
              help="With --replay: serve exchanges 1 to N only, then stop the session (with "
                   "--keep, `shell` opens the workspace as it stood after exchange N).")
@click.option("--runs-dir", type=click.Path(path_type=Path, file_okay=False),
              default=RUNS_DIR, show_default=True, help="Where run folders are made.")
@click.option("--run-id", help="Default: a timestamp. An existing id resumes that run, with "
                                "its recorded options for those not given.")
@click.option("--subset", help="all, runnable, has-gold, or a subset of the suite file.")
@click.option("--shard", metavar="K/N", help="Run only shard K of N (round-robin, by id).")
@click.option("--limit", type=click.IntRange(min=1), help="At most N tasks.")
@click.option("--rerun", "rerun", multiple=True, metavar="failed|ID[,ID...]",
              help="With --run-id: discard these tasks' trials (into the run's _history/, "
                   "never deleted) and run them again; 'failed' means every task with a "
                   "trial that did not pass. Repeatable.")
@click.option("--against", "against", metavar="RUN_A", shell_complete=complete.run_ids,
              help="With --until-decided: the run to compare this one with (folder, id or "
                   "'latest').")
@click.option("--until-decided", is_flag=True,
              help="Run trials in rounds against --against RUN_A until the paired comparison "
                   "is decided (B better or worse), futile, or --max-trials rounds are run "
                   "(docs/statistics.md).")
@click.option("--max-trials", type=click.IntRange(min=1, max=50), metavar="K",
              help="With --until-decided: the most rounds (default 6).")
@click.option("--min-difference", metavar="D",
              help="With --until-decided: stop for futility when a difference of D points "
                   "could no longer be shown (default 5; 0: never).")
@click.option("--json", "as_json", is_flag=True, help="Print the final report as JSON.")
@click.option("-q", "--quiet", is_flag=True,
              help="Print only each task's verdict line and the final report.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also print every stage of every task, and debug logging.")
@click.option("--no-color", is_flag=True, help="No colours (also: NO_COLOR set to anything).")
def run(task_ids: tuple[str, ...], agent: str | None, replay_dir: Path | None,
        replay: str | None, replay_lenient: bool, replay_until: int | None, runs_dir: Path,
        run_id: str | None,
        subset: str | None, shard: str | None,
        limit: int | None, as_json: bool, isolation: str | None, rerun: tuple[str, ...],
        quiet: bool, verbose: bool, no_color: bool, against: str | None,
        until_decided: bool, max_trials: int | None, min_difference: str | None,
        **overrides: Any) -> None:
    """Run tasks (all of the suite by default) and score them into <runs-dir>/<run-id>/.
    Exit 0 when the run completed whatever the verdicts, 130 when interrupted.

    On a terminal a live display shows the run (done/total, passes, ETA, tokens and cost so
    far, one row per running task); piped, each task event is one plain line."""
    from spider2local.cli.commands import run_command
    from spider2local.clock.dates import undated_warning
    from spider2local.dataset.load import load_dataset
    from spider2local.run.plan import plan_run
    from spider2local.run.progress import Progress

    if quiet and verbose:
        raise click.UsageError("-q/--quiet and -v/--verbose exclude each other")
    if verbose:
        logging.getLogger("spider2local").setLevel(logging.DEBUG)
    color = False if no_color else None
    g = _globals()
    if run_id is not None and g.suite is None and g.dataset is None:
        from spider2local.run.folder import RunFolder
        from spider2local.run.rescore import run_dataset_source

        existing = RunFolder.at(runs_dir, run_id)
        if existing.read_manifest() is not None:  # a resume: the run's own suite and dataset
            g.suite, g.dataset = run_dataset_source(existing)
    if replay is not None and g.suite is None and g.dataset is None:
        from spider2local.run.rescore import run_dataset_source

        # a replay: the recorded run's suite and dataset, as a resume takes its own
        g.suite, g.dataset = run_dataset_source(_open_run(replay, runs_dir))
    suite = g.load_suite()
    data = load_dataset(suite)
    _echo_dataset_warnings(data)  # a skipped line of the task list must not go unnoticed
    least = None
    if min_difference is not None:
        least = _fraction(min_difference, "--min-difference", "points")
        if not 0 <= least <= 1:
            raise UserError("--min-difference must be between 0 and 100 points",
                            fix="give it in points, e.g. 5 (0: never stop for futility)")
    plan = plan_run(suite, data, ids=task_ids, subset=subset, shard=shard,
                    limit=limit, agent=agent, replay_dir=replay_dir, runs_dir=runs_dir,
                    run_id=run_id, argv=sys.argv[1:], isolation=isolation,
                    rerun=[n.strip() for v in rerun for n in v.split(",") if n.strip()],
                    against=_open_run(against, runs_dir) if against is not None else None,
                    until_decided=until_decided, max_trials=max_trials, min_difference=least,
                    replay=replay, replay_lenient=replay_lenient, replay_until=replay_until,
                    **overrides)
    undated = undated_warning(plan.selection.tasks, suite)
    if undated is not None:
        click.echo(f"warning: {undated}", err=True)
    progress = Progress(quiet=quiet, verbose=verbose, color=color)
    sys.exit(run_command(plan, as_json, progress, color))


@cli.command()
@global_options
@click.argument("target")
@runs_dir_option
@click.option("--task", "task_id", help="For a .duckdb file: the task whose gold to use.")
@click.option("--gold", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="For a .duckdb file: a gold database (instead of --task).")
@click.option("--tables", help="With --gold: graded tables, comma-separated.")
@click.option("--cols", help="With --gold: graded column positions per table, as JSON, "
                             "e.g. '[[0,1],[]]' ([] = every column; default: all).")
@click.option("--ignore-order", help="With --gold: per table, as JSON, e.g. '[true,false]' "
                                     "(default: false for every table).")
@click.option("--accept-changes", is_flag=True,
              help="For a run folder: score against today's gold and scorer although they "
                   "differ from the fingerprints the run recorded (a deliberate fix).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def score(target: str, runs_dir: Path, task_id: str | None, gold: Path | None,
          tables: str | None, cols: str | None, ignore_order: str | None,
          accept_changes: bool, as_json: bool) -> None:
    """Score TARGET: a run (a folder, a run id or 'latest'; re-scores every kept result.duckdb,
    rewriting result.json),
    or one result .duckdb file with --task ID or with --gold FILE --tables a,b [--cols ...]
    [--ignore-order ...]. For a file, exit 0 when it passes and 1 when it fails; for a run
    folder, exit 1 when no task could be re-scored."""
    from spider2local.cli.commands import score_command, score_file_command, task_gold
    from spider2local.dataset.load import load_dataset
    from spider2local.run.rescore import run_dataset_source

    path = Path(target)
    if not path.is_dir() and (path.exists() or path.suffix == ".duckdb"):
        target_file = path
        if gold is not None:
            from spider2local.cli.scoreargs import params_from_options

            params = params_from_options(gold, tables, cols, ignore_order)
            sys.exit(score_file_command(target_file, gold, params, as_json))
        if task_id is None:
            raise UserError("scoring a .duckdb file needs --task ID or --gold FILE",
                            path=target_file, fix="say whose gold to compare with")
        task = task_gold(load_dataset(_globals().load_suite()), task_id)
        sys.exit(score_file_command(target_file, task.db, task.params, as_json))
    folder = _open_run(target, runs_dir)
    g = _globals()
    if g.suite is None and g.dataset is None:
        g.suite, g.dataset = run_dataset_source(folder)
    sys.exit(score_command(folder, load_dataset(g.load_suite()), as_json, accept_changes))


@cli.command()
@global_options
@click.argument("run_dir", metavar="RUN", shell_complete=complete.run_ids)
@runs_dir_option
@click.option("--write", is_flag=True,
              help="Rewrite the result.json of every trial whose verdict changed (and record "
                   "today's dataset and scorer fingerprints as the run's).")
def regrade(run_dir: str, runs_dir: Path, write: bool) -> None:
    """Score every trial of RUN (a folder, a run id or 'latest') again from the graded tables
    it kept (graded.duckdb), with today's scorer and dataset records, and print which
    verdicts change. Nothing is written unless --write. A graded file that does not match the
    sha256 its result.json recorded is refused, never scored. Exit 1 when a file was refused
    or no trial could be regraded."""
    from spider2local.cli.commands import regrade_command
    from spider2local.dataset.load import load_dataset
    from spider2local.run.rescore import run_dataset_source

    folder = _open_run(run_dir, runs_dir)
    g = _globals()
    if g.suite is None and g.dataset is None:
        g.suite, g.dataset = run_dataset_source(folder)
    sys.exit(regrade_command(folder, load_dataset(g.load_suite()), write))


@cli.command()
@global_options
@click.argument("run_a", shell_complete=complete.run_ids)
@click.argument("run_b", shell_complete=complete.run_ids)
@runs_dir_option
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "json"]),
              default="terminal", show_default=True)
@click.option("--force", is_flag=True,
              help="Compare runs of different datasets anyway.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when B is significantly worse than A (p < 0.05; a CI gate).")
def compare(run_a: str, run_b: str, runs_dir: Path, fmt: str, force: bool,
            fail_on_regression: bool) -> None:
    """Paired comparison of RUN_A and RUN_B on the tasks both attempted: the difference in
    pass@1 with its 95% interval, an exact p-value, the smallest difference the runs could
    detect, the flips and status changes, cost and time deltas. Tasks only one run attempted
    are listed apart. Runs of two agents are compared (each named); runs of two datasets are
    refused unless --force."""
    from spider2local.report.compare import (
        compare_json,
        compare_runs,
        render_compare,
        render_compare_markdown,
    )

    comparison = compare_runs(_open_run(run_a, runs_dir), _open_run(run_b, runs_dir),
                              force=force)
    if fmt == "json":
        click.echo(json.dumps(compare_json(comparison), indent=2, allow_nan=False))
    else:
        click.echo(render_compare_markdown(comparison) if fmt == "markdown"
                   else render_compare(comparison))
    sys.exit(FAILED if fail_on_regression and comparison.regression else OK)


def _fraction(text: str, what: str, unit: str) -> float:
    """``20%`` or ``0.2`` (a fraction) for a flip rate; ``10`` or ``10%`` (points) for a
    difference (``unit`` says which the bare number is)."""
    raw = text.strip()
    try:
        value = float(raw.rstrip("%"))
    except ValueError:
        raise UserError(f"{what} {text!r} is not a number",
                        fix=f"give it as e.g. {'20%' if unit == 'fraction' else '10'}") from None
    if raw.endswith("%") or unit == "points":
        return value / 100
    return value


@cli.command()
@global_options
@click.option("--tasks", type=click.IntRange(min=1), default=64, show_default=True,
              help="Tasks in the comparison.")
@click.option("--flip-rate", default="20%", show_default=True,
              help="Share of tasks two one-trial runs of the same kit disagree on (20% or "
                   "0.2; at most 33%).")
@click.option("--difference", default="10", show_default=True,
              help="The true difference in pass@1 to detect, in points.")
@click.option("--trials", type=click.IntRange(min=1, max=50), default=5, show_default=True,
              help="Trials per task of the fixed design.")
@click.option("--max-trials", type=click.IntRange(min=1, max=50), default=None,
              help="Rounds at most of the sequential design (default: --trials + 1, as "
                   "`run --until-decided` uses 6).")
@click.option("--min-difference", default="5", show_default=True,
              help="The sequential design's futility difference, in points (as `run`).")
@click.option("--simulations", type=click.IntRange(min=10, max=100_000), default=1000,
              show_default=True, help="Simulated pairs of runs per design and hypothesis.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def plan(tasks: int, flip_rate: str, difference: str, trials: int, max_trials: int | None,
         min_difference: str, simulations: int, as_json: bool) -> None:
    """What a comparison of two kits will cost: simulates, with the decision code `run
    --until-decided` uses, the fixed design (--trials trials of every task) and the
    sequential one on a suite like Spider2-DBT's, and prints for each the power at
    --difference, the false-positive rate, and the expected trials with their 10th and 90th
    percentiles (docs/statistics.md says how the tasks are drawn)."""
    from spider2local.report.planner import MAX_FLIP_RATE, render_plan, simulate

    flip = _fraction(flip_rate, "--flip-rate", "fraction")
    if not 0 <= flip <= MAX_FLIP_RATE:
        raise UserError(f"--flip-rate {flip_rate} is outside 0-33%",
                        fix="a suite whose runs disagree on more than a third of the tasks "
                            "is not modelled; give e.g. 20%")
    diff = _fraction(difference, "--difference", "points")
    least = _fraction(min_difference, "--min-difference", "points")
    for name, value in (("--difference", diff), ("--min-difference", least)):
        if not 0 < value <= 1:
            raise UserError(f"{name} must be between 0 and 100 points",
                            fix="give it in points, e.g. 10")
    result = simulate(tasks, flip, diff, trials=trials, max_rounds=max_trials,
                      min_difference=least, simulations=simulations)
    if as_json:
        _echo_json(result.as_json())
    else:
        click.echo(render_plan(result))


@cli.command()
@global_options
@click.argument("runs", nargs=-1, required=True, shell_complete=complete.run_ids)
@runs_dir_option
@click.option("--into", required=True, type=click.Path(path_type=Path),
              help="The merged run folder to create (new or empty).")
@click.option("--force", is_flag=True,
              help="Merge runs made with different settings or datasets (recorded in run.json).")
@click.option("--json", "as_json", is_flag=True, help="Print the merged report as JSON.")
def merge(runs: tuple[str, ...], runs_dir: Path, into: Path, force: bool,
          as_json: bool) -> None:
    """Join run folders (the shards of one run) into one run folder, INTO, that `report`,
    `score` and `run --run-id` read. Refuses runs of different settings or datasets unless
    --force; a task finished twice keeps the result that finished last, and says so."""
    from spider2local.cli.commands import print_report
    from spider2local.run.folder import RunFolder, check_run_id
    from spider2local.run.merge import merge_runs

    check_run_id(into.name)
    merged = merge_runs([_open_run(p, runs_dir) for p in runs], RunFolder(into), force=force)
    for note in merged.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"merged {len(merged.kept)} finished task(s) from {len(runs)} run folder(s) "
               f"into {into}", err=True)
    print_report(merged.into, as_json)


@cli.command()
@global_options
@click.argument("run_dir", metavar="RUN", shell_complete=complete.run_ids)
@runs_dir_option
@click.option("--format", "fmt", type=click.Choice(REPORT_FORMATS),
              default="terminal", show_default=True,
              help="markdown fits $GITHUB_STEP_SUMMARY; junit is one testcase per task; html "
                   "is one self-contained file.")
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False),
              help="Write to this file instead of stdout.")
@click.option("--task", "task_id", metavar="ID",
              help="Print this one task whole instead: verdict per trial, per-table "
                   "diagnostics, dbt errors, files changed, the verifier's last report and "
                   "where its transcript, logs and database are.")
@click.option("--trial", type=click.IntRange(min=1), metavar="N",
              help="With --task: only this trial (default: every trial of the task).")
@click.option("--no-color", is_flag=True, help="No colours (also: NO_COLOR set to anything).")
def report(run_dir: str, runs_dir: Path, fmt: str, output: Path | None, task_id: str | None,
           trial: int | None, no_color: bool) -> None:
    """The report of RUN (a folder, a run id or 'latest'), rebuilt from its folder alone (no
    dataset, no credentials): the honest headline (passed over the official, with-gold,
    runnable and attempted denominators; free and suspect passes; tokens, cost, time) and one
    row per task. Also rewrites RUN/report.html. With --task ID: that task whole."""
    from spider2local.cli.commands import report_command

    if trial is not None and task_id is None:
        raise UserError("--trial needs --task", fix="add --task ID")
    if task_id is not None and fmt != "terminal":
        raise UserError(f"--task prints text; --format {fmt} is for the whole run's report",
                        fix="drop --format, or drop --task")
    sys.exit(report_command(_open_run(run_dir, runs_dir), fmt, output, task_id=task_id,
                            trial=trial, color=False if no_color else None))


@cli.command()
@global_options
@click.argument("run_dir", metavar="RUN", shell_complete=complete.run_ids)
@runs_dir_option
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), required=True,
              help="inspect: one Inspect eval log of the run (`inspect view` opens it); atif: "
                   "Harbor's trajectories (needs Python 3.12+, not available yet).")
@click.option("--output", "-o", type=click.Path(path_type=Path),
              help="The file to write (.eval, or .json for Inspect's JSON format; default: "
                   "RUN/inspect/<run-id>.eval).")
def export(run_dir: str, runs_dir: Path, fmt: str, output: Path | None) -> None:
    """Export RUN (a folder, a run id or 'latest') for other tools, from its folder alone:
    --format inspect writes one Inspect eval log (a sample per task, an epoch per trial, the
    verdict with its per-table results, the messages, tokens and cost). Needs the optional
    extra: pip install 'spider2local[export]'."""
    from spider2local.export.write import export_run

    done = export_run(_open_run(run_dir, runs_dir), fmt, output)
    for note in done.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"wrote {done.path} ({done.tasks} task(s), {done.trials} trial(s)); "
               f"open it with: {done.view_command}", err=True)
    click.echo(str(done.path))


@cli.command()
@global_options
@runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--min-trials", type=click.IntRange(min=1), default=3, show_default=True,
              help="Trials a task needs before it is flagged 'always solved'.")
def tasks(runs_dir: Path, as_json: bool, min_trials: int) -> None:
    """What the finished runs of --runs-dir know about each task: trials run and passed by
    agent and model, lenient passes, failure classes seen, and flags (never solved, always
    solved, flaky). Runs of another dataset or suite are kept apart."""
    from spider2local.report.history import histories_json, render_histories, task_histories

    groups = task_histories(runs_dir, min_trials)
    if as_json:
        _echo_json(histories_json(groups))
    else:
        click.echo(render_histories(groups, runs_dir))


@cli.command()
@global_options
@runs_dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def runs(runs_dir: Path, as_json: bool) -> None:
    """List the runs of --runs-dir, oldest first: id, start, agent, model, tasks, passed,
    cost and state (finished, interrupted, running or damaged). Any id works as RUN for
    report, compare, score and merge, and so does 'latest'."""
    from spider2local.report.runs import past_runs, render_runs

    found = past_runs(runs_dir)
    if as_json:
        _echo_json([r.to_json() for r in found])
    else:
        click.echo(render_runs(found, runs_dir))


@cli.command()
@global_options
@runs_dir_option
@click.argument("target", nargs=-1, metavar="[TASK | RUN TASK]",
                shell_complete=complete.run_or_task)
@click.option("--workspace", "workspace", metavar="PATH", type=click.Path(path_type=Path),
              help="Open this kept workspace (a folder `run --keep` or `shell --keep` "
                   "printed) instead of preparing a fresh one.")
@click.option("--trial", type=click.IntRange(min=1), default=1, show_default=True,
              help="With RUN TASK: the trial whose kept workspace to open.")
@click.option("--command", "command", help="Run this one command instead of $SHELL; exit "
                                           "with its code.")
@click.option("--agent", metavar="AGENT",
              help="Prepare the workspace as this agent gets it (default: the suite's).")
@click.option("--keep", is_flag=True, help="Keep the fresh workspace afterwards (it is "
                                           "marked kept and can be opened again).")
def shell(runs_dir: Path, target: tuple[str, ...], workspace: Path | None, trial: int,
          command: str | None, agent: str | None, keep: bool) -> None:
    """Open a shell in a workspace with the agent's PATH (dbt shim) and fake clock, for
    debugging by hand: a fresh workspace of TASK, the workspace RUN kept for TASK
    (`run --keep`; RUN is a folder, a run id or 'latest'), or --workspace PATH. Inside,
    `spider2local` is on PATH and the prompt names the task and its date; on exit one line
    says whether the workspace was deleted or kept."""
    from spider2local.run.shell import kept_workspace_of, open_kept, open_shell, shell_skills
    from spider2local.workspace.activate import open_workspace

    if workspace is not None or len(target) == 2:
        if workspace is not None and target:
            raise click.UsageError("pass either --workspace PATH or RUN TASK, not both")
        if agent is not None or keep:
            raise click.UsageError("--agent and --keep only apply to a fresh workspace "
                                   "(a kept one is opened as it is, and stays)")
        found = open_workspace(workspace) if workspace is not None else kept_workspace_of(
            _open_run(target[0], runs_dir), target[1], trial)
        sys.exit(open_kept(found, command=command, suite=_globals().suite))
    if len(target) != 1:
        raise click.UsageError("pass TASK (a fresh workspace), RUN TASK (a kept one) or "
                               "--workspace PATH")
    from spider2local.dataset.load import load_dataset
    from spider2local.run.selection import select_tasks

    task_id = target[0]
    suite = _globals().load_suite()
    selection = select_tasks(load_dataset(suite), [task_id])
    if not selection.tasks:
        raise UserError(f"task {task_id} cannot run: {selection.skipped[0][1]}")
    task = selection.tasks[0]
    from spider2local.agents.registry import capabilities

    caps = capabilities(agent or suite.defaults.agent)  # unknown or broken: one line, exit 2
    skills = shell_skills(task, suite.defaults, agent or suite.defaults.agent)
    sys.exit(open_shell(task, skills=skills, skills_dir=caps.skills_dir, command=command,
                        keep=keep, suite=suite.path))


@cli.command("derive-dates")
@global_options
@click.argument("task_ids", nargs=-1, shell_complete=complete.task_ids)
@click.option("--dry-run", is_flag=True, help="Print a unified diff of the suite file instead.")
@click.option("--no-verify", is_flag=True, help="Heuristics only: no dbt rebuilds (faster).")
def derive_dates_cmd(task_ids: tuple[str, ...], dry_run: bool, no_verify: bool) -> None:
    """Infer the date each task's gold was built on, with evidence, into the suite file."""
    import anyio

    from spider2local.clock.dates import derivation_rows, derive_all
    from spider2local.core.table import render_table
    from spider2local.dataset.load import load_dataset
    from spider2local.suite.edit import dry_run_diff, set_task_dates, write_suite, write_target

    suite = _globals().load_suite()
    data = load_dataset(suite)
    unknown = sorted({tid for tid in task_ids if data.get(tid) is None})
    if unknown:
        raise UserError(f"unknown task id(s): {', '.join(unknown)}", path=data.root,
                        fix="see `spider2local list` for the task ids")
    tasks = [t for t in data.tasks if not task_ids or t.id in task_ids]
    for t in (t for t in tasks if not t.has_gold):
        click.echo(f"skipped {t.id}: no usable gold ({t.status})", err=True)
    found = anyio.run(lambda: derive_all(tasks, verify=not no_verify))
    click.echo(render_table(["task", "date", "method", "confidence", "evidence"],
                            derivation_rows(found), max_width=90))
    target, old = write_target(suite, Path.cwd())
    new = set_task_dates(old, [d.record() for d in found], target)
    if dry_run:
        click.echo(dry_run_diff(suite, target, new) or "(suite file unchanged)")
    elif new != old or not target.exists():
        write_suite(target, new)
        click.echo(f"wrote {len(found)} task(s) into {target}")


@cli.command()
@global_options
@click.option("--spider2", type=click.Path(exists=True, file_okay=False, path_type=Path),
              required=True, help="A Spider2 checkout or its spider2-dbt folder.")
@click.option("--start-zip", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="DBT_start_db.zip (omit both zips to check the existing layout).")
@click.option("--gold-zip", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="dbt_gold.zip.")
@click.option("--force", is_flag=True,
              help="Accept a --start-zip named like a gold zip (or the reverse).")
def setup(spider2: Path, start_zip: Path | None, gold_zip: Path | None, force: bool) -> None:
    """Place the zips' DuckDB files as upstream's setup does, supply packages from sibling
    tasks, and verify every file. Safe to re-run. Exit 1 if a file is unusable."""
    from spider2local.dataset.install import setup_dataset

    report = setup_dataset(spider2, start_zip, gold_zip, force=force)
    for line in report.lines():
        click.echo(line)
    sys.exit(0 if report.ok else 1)


@cli.command()
@global_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--baseline", is_flag=True,
              help="Also score each untouched start database (= the noop agent's result).")
@click.option("--write-subsets", is_flag=True, help="Write the suggested subsets to the suite.")
def audit(as_json: bool, baseline: bool, write_subsets: bool) -> None:
    """Per task: runnable or why not, clock dependence and date, graded tables, free passes."""
    import anyio

    from spider2local.audit.tasks import audit_dataset, audit_json, audit_text, suggested_subsets
    from spider2local.dataset.load import load_dataset
    from spider2local.suite.edit import set_subsets, write_suite, write_target

    suite = _globals().load_suite()
    audits = anyio.run(lambda: audit_dataset(load_dataset(suite), baseline=baseline))
    if as_json:
        _echo_json(audit_json(audits))
    else:
        click.echo(audit_text(audits))
    if write_subsets:
        target, old = write_target(suite, Path.cwd())
        write_suite(target, set_subsets(old, suggested_subsets(audits), target))
        click.echo(f"wrote subsets into {target}", err=as_json)


@cli.command("mcp-server")
@click.option("--config", "config_path", type=click.Path(path_type=Path, dir_okay=False),
              help="A tool config (ToolConfig.write) naming the database, query log, date.")
@click.option("--database", type=click.Path(path_type=Path, dir_okay=False),
              help="Instead of --config: serve this database (read-only).")
@click.option("--log", "log_path", type=click.Path(path_type=Path, dir_okay=False),
              help="With --database: the query log (default: queries.jsonl beside it).")
@click.option("--date", "fake_date", help="With --database: the fake date (YYYY-MM-DD).")
def mcp_server(config_path: Path | None, database: Path | None, log_path: Path | None,
               fake_date: str | None) -> None:
    """Serve the governed read-only database tools (query, list_tables, describe_table,
    project_scan) as an MCP server on stdin/stdout, for an agent's own MCP client."""
    import datetime as dt

    from spider2local.dbtools.config import ToolConfig

    if (config_path is None) == (database is None):
        raise UserError("mcp-server needs --config FILE or --database FILE (one of them)",
                        fix="pass the tool config a run wrote, or a database to serve")
    if config_path is not None:
        config = ToolConfig.read(config_path)
    else:
        assert database is not None
        try:
            date = dt.date.fromisoformat(fake_date) if fake_date else None
        except ValueError:
            raise UserError(f"--date {fake_date!r} is not a date",
                            fix="write it as YYYY-MM-DD") from None
        config = ToolConfig(database=database.absolute(),
                            audit=(log_path or database.parent / "queries.jsonl").absolute(),
                            date=date)
    from spider2local.dbtools.server import main as serve  # mcp is heavy: after the checks

    serve(config)


OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EPIPE, errno.EIO, errno.EFBIG,
                           errno.EBADF})
"""Why writing to stdout fails: it is a full disk (``> /dev/full``), a closed pipe, a lost
terminal, or closed."""


def usage_line(exc: click.UsageError) -> str:
    """Click's usage error as our one line: the problem, then the fix (the command's help),
    the way :class:`UserError` reads; click prints a usage line, a hint and the error over
    three lines instead."""
    ctx = exc.ctx
    command = ctx.command_path if ctx is not None else "spider2local"
    problem = " ".join(exc.format_message().split())
    return f"spider2local: error: {problem} (see `{command} --help`)"


def _stdout_writes() -> bool:
    """Whether stdout still takes bytes: it is the one that refused when a flush of what is
    pending, or one more byte, fails too (a stray newline only where some other file failed,
    before that traceback)."""
    try:
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), b"\n")
    except (OSError, ValueError):
        return False
    return True


def _stdout_gone() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what could not be written
    does not print "Exception ignored" after our one line."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main() -> None:
    """Console-script entry point. Errors click would print over several lines (usage errors)
    and output that cannot be written (stdout on a full disk, a closed pipe) end as one line on
    stderr and exit code 2, as every :class:`UserError` does."""
    try:
        code = cli.main(prog_name="spider2local", standalone_mode=False)
    except click.UsageError as exc:
        click.echo(usage_line(exc), err=True)
        sys.exit(BAD_INPUT)
    except click.ClickException as exc:
        click.echo(f"spider2local: error: {' '.join(exc.format_message().split())}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("\nspider2local: interrupted", err=True)
        sys.exit(INTERRUPTED)
    except OSError as exc:
        if exc.errno not in OUTPUT_ERRNOS or exc.filename is not None or _stdout_writes():
            raise
        _stdout_gone()
        click.echo(f"spider2local: error: cannot write the output: {exc.strerror or exc} "
                   "(redirect stdout to a disk with room; what a command writes to its run "
                   "folder is kept)", err=True)
        sys.exit(BAD_INPUT)
    sys.exit(code if isinstance(code, int) else 0)

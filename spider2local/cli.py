"""The command line. The only module that imports click: everything else is plain functions.

Every command takes the global options ``--suite`` and ``--dataset`` (before or after the command
name). A :class:`UserError` anywhere becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from spider2local import __version__
from spider2local.exceptions import UserError
from spider2local.suite import Suite, default_suite_path, load_suite

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Globals:
    suite: Path | None = None
    dataset: str | None = None

    def load_suite(self) -> Suite:
        return load_suite(self.suite or default_suite_path()).with_dataset(self.dataset)


class _Group(click.Group):
    """Turns :class:`UserError` into a one-line message and exit code 2, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"spider2local: error: {exc}", err=True)
            ctx.exit(2)


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
                      help="Suite file (default: ./tasks.toml if present, else the bundled "
                           "sample suite).")(fn)
    return fn


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="spider2local")
@global_options
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run the Spider2-DBT benchmark locally: no Docker, a fixed clock per task, official
    scoring."""
    ctx.ensure_object(Globals)


def _globals() -> Globals:
    return click.get_current_context().ensure_object(Globals)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


@cli.command("list")
@global_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_cmd(as_json: bool) -> None:
    """One row per task: id, runnable or the problem, fake date, graded tables."""
    from spider2local.dataset import load_dataset
    from spider2local.listing import listing_json, listing_text

    data = load_dataset(_globals().load_suite())
    if as_json:
        _echo_json(listing_json(data))
    else:
        click.echo(listing_text(data))
        for warning in data.warnings:
            click.echo(f"warning: {warning}", err=True)


@cli.command()
@global_options
@click.option("--no-clock-test", is_flag=True, help="Skip the fake-clock self-test (faster).")
def doctor(no_clock_test: bool) -> None:
    """Check this machine: versions, libfaketime, the fake clock, Claude CLI, credentials,
    dataset. Exit 1 if something needed is missing."""
    from spider2local.doctor import exit_code, run_checks

    try:
        suite = _globals().load_suite()
    except UserError as exc:
        click.echo(f"FAIL  suite: {exc}")
        sys.exit(1)
    checks = run_checks(suite, clock_selftest=not no_clock_test)
    for check in checks:
        click.echo(check.line)
    sys.exit(exit_code(checks))


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="spider2local")

"""Shell completion of the values only this tool knows: task ids and run ids.

click completes commands and options by itself (README, "Shell completion": one ``eval`` line
in the shell's rc file). Task ids come from the suite the command would use (``--suite``,
``--dataset``, else the nearest tasks.toml), run ids from its ``--runs-dir``. A completion
never prints an error or a traceback into the user's prompt: whatever fails completes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from click.shell_completion import CompletionItem

from spider2local.core.printable import printable


def _suite_task_ids(ctx: click.Context) -> list[str]:
    from spider2local.cli.app import Globals
    from spider2local.dataset.load import load_dataset

    found = ctx.find_object(Globals) or Globals()
    return sorted(load_dataset(found.load_suite()).ids())


def _run_ids(ctx: click.Context) -> list[str]:
    from spider2local.cli.app import RUNS_DIR
    from spider2local.run.folder import run_folders

    runs_dir = ctx.params.get("runs_dir")
    folders = run_folders(runs_dir if isinstance(runs_dir, Path) else RUNS_DIR)
    return [f.run_id for f in reversed(folders)] + (["latest"] if folders else [])


def _items(values: list[str], incomplete: str, help_text: str) -> list[CompletionItem]:
    # names from disk are printed into the user's shell: controls are escaped
    return [CompletionItem(printable(v), help=help_text) for v in dict.fromkeys(values)
            if v.startswith(incomplete)]


def _safely(fn: Callable[[click.Context], list[str]], ctx: click.Context) -> list[str]:
    try:
        return fn(ctx)
    except Exception:  # a broken suite or runs folder completes nothing, silently
        return []


def task_ids(ctx: click.Context, _param: click.Parameter,
             incomplete: str) -> list[CompletionItem]:
    return _items(_safely(_suite_task_ids, ctx), incomplete, "task")


def run_ids(ctx: click.Context, _param: click.Parameter,
            incomplete: str) -> list[CompletionItem]:
    return _items(_safely(_run_ids, ctx), incomplete, "run")


def run_or_task(ctx: click.Context, param: click.Parameter,
                incomplete: str) -> list[CompletionItem]:
    """``shell [TASK | RUN TASK]``: the first word is either; after a run id, its tasks."""
    given = ctx.params.get(param.name or "") or ()
    if given and given[0] in _safely(_run_ids, ctx):
        return task_ids(ctx, param, incomplete)
    if given:
        return []
    return run_ids(ctx, param, incomplete) + task_ids(ctx, param, incomplete)

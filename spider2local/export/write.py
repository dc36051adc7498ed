"""``spider2local export RUN --format FMT [-o PATH]``: what it writes, where, and what it says.

The writer of a format is imported only after :func:`~.extras.require` found its package, so a
missing optional extra is one line naming it. The default output lives in the run folder
(``<run>/inspect/<run-id>.eval``), beside the report it was made from; ``-o`` writes anywhere
else (``.json`` for Inspect's JSON format). A path that cannot be written is one line too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from spider2local.core.layout import INSPECT_LOGS
from spider2local.exceptions import UserError
from spider2local.export.extras import INSPECT, require
from spider2local.export.records import load_run
from spider2local.run.folder import RunFolder

INSPECT_FOLDER = INSPECT_LOGS
"""In the run folder: where ``export --format inspect`` writes by default."""


@dataclass(frozen=True)
class Exported:
    path: Path
    tasks: int
    trials: int
    notes: tuple[str, ...] = ()
    """What a person should know: trials left out, transcript lines skipped."""

    @property
    def view_command(self) -> str:
        return f"inspect view --log-dir {self.path.parent}"


def default_output(folder: RunFolder, fmt: str) -> Path:
    return folder.root / INSPECT_FOLDER / f"{folder.run_id}.eval"


def export_run(folder: RunFolder, fmt: str, output: Path | None = None) -> Exported:
    """Export the run in ``fmt`` (see the module docstring)."""
    require(fmt)
    records = load_run(folder)
    path = output if output is not None else default_output(folder, fmt)
    if path.is_dir():
        raise UserError("is a folder; --format inspect writes one file", path=path,
                        fix="pass a file name ending in .eval or .json")
    notes = []
    if records.unreadable:
        notes.append(f"not exported (no readable result.json): {', '.join(records.unreadable)}")
    for trial in records.trials:
        if trial.skipped_lines:
            notes.append(f"{trial.task_id}#{trial.trial}: {trial.skipped_lines} transcript "
                         "line(s) that are not JSON skipped")
    if fmt == INSPECT:
        # imported here, once require() found inspect_ai (an optional extra); not a cycle
        from spider2local.export.inspectlog import write_inspect

        try:
            write_inspect(records, path)
        except OSError as exc:
            raise UserError(f"cannot write the eval log: {exc.strerror or exc}", path=path,
                            fix="pass a writable -o path") from None
    return Exported(path, len(records.task_ids), len(records.trials), tuple(notes))

"""Edit the suite file in place with tomlkit, keeping its comments, order and formatting.

The suite file is hand-curated (comments explain why a task is excluded or dated), so tools
that write into it (``derive-dates``, ``audit --write-subsets``) change only the keys they own
and re-validate the result with the strict parser before anything reaches the disk.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Table

from spider2local.exceptions import SuiteError
from spider2local.suite.load import bundled_suite_path, load_suite
from spider2local.suite.model import BUILTIN_SUBSETS, Confidence, DateMethod, Suite

DATE_KEYS = ("date", "date_method", "date_evidence", "date_confidence")


@dataclass(frozen=True)
class DateRecord:
    """What derive-dates concluded for one task (``None`` fields are removed from the file)."""

    task: str
    date: dt.date | None
    method: DateMethod | None
    evidence: str | None
    confidence: Confidence | None


def _parse(text: str, path: Path) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except Exception as exc:  # tomlkit raises several unrelated exception types
        raise SuiteError(f"not valid TOML: {exc}", path=path) from None


def _task_table(doc: tomlkit.TOMLDocument, task: str) -> Table:
    tasks = doc.get("tasks")
    if tasks is None:
        tasks = tomlkit.table(is_super_table=True)
        doc["tasks"] = tasks
    if task not in tasks:
        tasks[task] = tomlkit.table()
    table = tasks[task]
    assert isinstance(table, Table)
    return table


def keeps_manual(current: Mapping[str, Any] | None, record: DateRecord) -> bool:
    """A human's ``manual`` date stays unless the new one was verified by a rebuild."""
    method = (current or {}).get("date_method")
    return method == DateMethod.MANUAL and record.method != DateMethod.VERIFIED


def set_task_dates(text: str, records: Iterable[DateRecord], path: Path) -> str:
    """Write each record's date keys into ``[tasks.<id>]``; other keys stay as they were."""
    doc = _parse(text, path)
    for record in records:
        if keeps_manual((doc.get("tasks") or {}).get(record.task), record):
            continue
        is_new = record.task not in (doc.get("tasks") or {})
        table = _task_table(doc, record.task)
        values: dict[str, Any] = {"date": record.date, "date_method": record.method,
                                  "date_evidence": record.evidence,
                                  "date_confidence": record.confidence}
        for key in DATE_KEYS:
            if values[key] is None:
                table.pop(key, None)
            else:
                _put(table, key, values[key])
        if is_new:
            table.add(tomlkit.nl())  # a blank line before whatever table follows
    return tomlkit.dumps(doc)


def _put(table: Table, key: str, value: Any) -> None:
    """Set ``key``; a new key goes right after the table's last key, not after the comments
    that trail the table (in TOML those introduce the next table)."""
    body = table.value.body
    positions = [i for i, (k, _) in enumerate(body) if k is not None]
    if not positions or positions[-1] == len(body) - 1 \
            or any(body[i][0].key == key for i in positions):  # type: ignore[union-attr]
        table[key] = value  # nothing trails the last key: appending puts it right there
    else:
        # tomlkit has no public "insert at"; its private _insert_after is gone in 0.15
        # (a fresh install broke here), _insert_at has been there throughout (0.7-0.15)
        table.value._insert_at(positions[-1] + 1, key, tomlkit.item(value))


def set_subsets(text: str, subsets: Mapping[str, Sequence[str]], path: Path) -> str:
    """Replace the named subsets in ``[subsets]`` (others stay). Built-in names are refused:
    the loader computes those itself and rejects them in the file."""
    doc = _parse(text, path)
    table = doc.get("subsets")
    if table is None:
        table = tomlkit.table()
        doc["subsets"] = table
    for name, ids in subsets.items():
        if name in BUILTIN_SUBSETS:
            raise SuiteError(f"subsets.{name}: built-in subset, cannot be written", path=path)
        array = tomlkit.array()
        array.extend(sorted(ids))
        array.multiline(len(ids) > 6)
        table[name] = array
    return tomlkit.dumps(doc)


def unified_diff(old: str, new: str, path: Path) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True),
                                        new.splitlines(keepends=True),
                                        fromfile=f"{path} (current)", tofile=f"{path} (new)"))


def dry_run_diff(suite: Suite, target: Path, new: str) -> str:
    """What ``--dry-run`` prints: the diff against the file that would be edited, or, when a new
    ``./tasks.toml`` would be created, the whole new file as an addition (nothing claims a file
    that does not exist yet is "current")."""
    if target == suite.path:
        return unified_diff(suite.path.read_text(encoding="utf-8"), new, target)
    return "".join(difflib.unified_diff([], new.splitlines(keepends=True),
                                        fromfile="/dev/null", tofile=f"{target} (new file)"))


def write_suite(path: Path, text: str) -> None:
    """Validate ``text`` with the strict suite parser, then replace the file atomically."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    try:
        load_suite(partial)
    except SuiteError:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(path)


NEW_SUITE_HEADER = """\
# spider2local suite file, written by spider2local because none was here: the dataset root
# and what the command found. Every other setting (run defaults, subsets, notes) is the
# built-in default; see docs/suite.md.
schema = 1
"""


def write_target(suite: Suite, cwd: Path) -> tuple[Path, str]:
    """Where edits to ``suite`` go, and the text they start from.

    The embedded default suite belongs to the installation (inside site-packages for a wheel),
    so edits to it go to a new ``./tasks.toml`` instead. That new file holds the ``--dataset``
    in use (so later commands need no ``--dataset``) and nothing else of the embedded suite:
    its sample tasks, dates and subsets describe the bundled sample, and copied next to a real
    dataset they would name tasks that are not there (``run --subset smoke`` failed). Any
    other suite file, and the repo's own ``tasks.toml`` when run from the repo, is edited in
    place.
    """
    local = (cwd / "tasks.toml").resolve()
    if suite.path != bundled_suite_path().resolve() or local == suite.path:
        return suite.path, suite.path.read_text(encoding="utf-8")
    if local.exists():
        raise SuiteError("exists but the bundled suite is in use", path=local,
                         fix="pass --suite tasks.toml to edit it")
    doc = _parse(NEW_SUITE_HEADER, local)
    dataset = tomlkit.table()
    dataset["root"] = str(suite.dataset)
    doc["dataset"] = dataset
    return local, tomlkit.dumps(doc)

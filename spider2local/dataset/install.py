"""Put Spider2-DBT's DuckDB files where upstream's setup script puts them, then check the result.

Upstream (``spider2-dbt/setup.py``) extracts ``DBT_start_db.zip`` and ``dbt_gold.zip``, skips
``__MACOSX``, and moves every ``*.duckdb`` found anywhere under a top-level folder ``<id>/`` to
``examples/<id>/`` (start zip) or ``evaluation_suite/gold/<id>/`` (gold zip), flattening the
path to the file name. We do the same, with three differences that make it safe to re-run:
files are streamed straight from the zip (nothing else is extracted), a file whose size and
SHA-256 already match is left alone, and every file is then opened read-only with DuckDB to
prove it is usable. Top-level folders that are not tasks of the dataset are skipped and named.

Setup also supplies packages that would need ``dbt deps`` (the network) from sibling tasks
that vendor a compatible copy (see :func:`spider2local.dbtproject.packages.supply_packages`).
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath

import duckdb

from spider2local.core import upstream
from spider2local.dataset.task import EVAL_FILE, TASKS_FILE
from spider2local.db import catalog
from spider2local.db.connect import open_database
from spider2local.db.header import duckdb_file_problem
from spider2local.dbtproject import packages
from spider2local.exceptions import DatasetError, UserError
from spider2local.safepath import name_problem


class FileKind(StrEnum):
    """Which zip a DuckDB file comes from, and so where it goes."""

    START = "start"
    GOLD = "gold"


_TARGETS = {FileKind.START: Path(upstream.EXAMPLES), FileKind.GOLD: upstream.GOLD_DIR}
_CHUNK = 1 << 20


class Action(StrEnum):
    """What setup did with one DuckDB file (the summary counts each by its value)."""

    PLACED = "placed"
    """Extracted from the zip; nothing was there."""
    REPLACED = "replaced"
    """Extracted over a file whose content differed (named in the summary)."""
    IDENTICAL = "identical"
    """The zip's file was already there, byte for byte: left alone."""
    PRESENT = "present"
    """Already in the layout and not in a zip given this time."""
    REFUSED = "refused"
    """The zip's file is unusable (a damaged member, not a DuckDB file DuckDB opens): it was
    never put in place, and a file already there was left as it was."""


@dataclass(frozen=True)
class Placement:
    """One DuckDB file of the layout and what setup did with it."""

    task: str
    kind: FileKind
    path: Path
    action: Action
    problem: str | None = None
    """Why DuckDB could not open it read-only, if it could not."""


@dataclass(frozen=True)
class SetupReport:
    root: Path
    placements: tuple[Placement, ...]
    skipped: tuple[str, ...]
    """Zip entries that are not task files (``__MACOSX/``, stray files, unknown folders)."""
    supplies: tuple[tuple[str, packages.Supply], ...]
    """(task, supply) for every package a task lacked: supplied from a sibling or not."""
    now_identical: tuple[tuple[str, str], ...] = ()
    """(task, file name) whose start and gold files became byte-identical during this setup:
    every run of such a task passes untouched, the sign of a swapped zip."""

    @property
    def ok(self) -> bool:
        return all(p.problem is None for p in self.placements)

    def lines(self) -> list[str]:
        """A short human summary (counts, then every problem)."""
        counts: dict[Action, int] = {}
        for p in self.placements:
            counts[p.action] = counts.get(p.action, 0) + 1
        out = [f"{self.root}: " + (", ".join(f"{n} {a}" for a, n in sorted(counts.items()))
                                   or "no DuckDB files")]
        out += [f"replaced {p.path.relative_to(self.root)} (its content differed)"
                for p in self.placements if p.action is Action.REPLACED]
        out += [f"WARNING {task}: start and gold {name} are now byte-identical (they were not "
                "before): every run would pass untouched; were the zips swapped?"
                for task, name in self.now_identical]
        out += [f"skipped zip entry {s}" for s in self.skipped]
        out += [f"BAD {p.path}: {p.problem}" for p in self.placements if p.problem]
        for task, s in self.supplies:
            how = (f"supplied from sibling {s.sibling} ({s.note})" if s.sibling
                   else f"missing: {s.note}")
            out.append(f"{task}: package {s.requirement.spec} {how}")
        return out


def resolve_spider2_dbt(path: Path) -> Path:
    """Accept either a Spider2 checkout or its ``spider2-dbt`` folder."""
    for candidate in (path, path / "spider2-dbt"):
        if (candidate / upstream.EXAMPLES).is_dir():
            return candidate
    raise DatasetError("no examples/ folder here or in spider2-dbt/", path=path,
                       fix="pass --spider2 with a Spider2 checkout or its spider2-dbt folder")


def setup_dataset(spider2: Path, start_zip: Path | None = None, gold_zip: Path | None = None,
                  *, force: bool = False) -> SetupReport:
    """Place the zips' files (when given), supply packages, and verify every DuckDB file.

    Zips whose names say they are the other kind are refused unless ``force``: placing the gold
    databases as start databases would silently make every task pass with no work.
    """
    if not force:
        check_zip_names(start_zip, gold_zip)
    root = resolve_spider2_dbt(spider2)
    tasks = task_ids(root)
    identical_before = identical_pairs(root)
    placements: list[Placement] = []
    skipped: list[str] = []
    for kind, archive in ((FileKind.START, start_zip), (FileKind.GOLD, gold_zip)):
        if archive is not None:
            from spider2local.dataset import known  # it stays where it was downloaded

            known.remember(known.Kind.SETUP_ZIP, archive)  # hidden from every later agent
            placements += _place_zip(root, kind, archive, tasks, skipped)
    placed = {p.path for p in placements}
    placements += [Placement(t, k, path, Action.PRESENT) for t, k, path in _layout_files(root)
                   if path not in placed]
    placements = [p if p.problem else _verified(p) for p in placements]
    supplies = [(project.name, s) for project in _projects(root)
                for s in packages.supply_packages(project)]
    now_identical = sorted(identical_pairs(root) - identical_before)
    return SetupReport(root, tuple(placements), tuple(skipped), tuple(supplies),
                       tuple(now_identical))


def check_zip_names(start_zip: Path | None, gold_zip: Path | None) -> None:
    """Refuse ``--start-zip`` named like a gold zip, or ``--gold-zip`` named like a start zip
    (upstream's are ``DBT_start_db.zip`` and ``dbt_gold.zip``)."""
    for option, archive, other in (("--start-zip", start_zip, FileKind.GOLD),
                                   ("--gold-zip", gold_zip, FileKind.START)):
        if archive is not None and other in archive.name.lower():
            raise UserError(f"{option} {archive.name} looks like the {other} zip", path=archive,
                            fix="pass DBT_start_db.zip as --start-zip and dbt_gold.zip as "
                                "--gold-zip, or add --force if the name misleads")


def identical_pairs(root: Path) -> set[tuple[str, str]]:
    """(task, file name) where ``examples/<id>/<name>`` and the gold ``<id>/<name>`` are
    byte-identical. Sizes are compared first, so only equal-sized files are read."""
    pairs = set()
    for task, kind, start in _layout_files(root):
        gold = root / _TARGETS[FileKind.GOLD] / task / start.name
        if (kind is FileKind.START and gold.is_file()
                and gold.stat().st_size == start.stat().st_size
                and filecmp.cmp(start, gold, shallow=False)):
            pairs.add((task, start.name))
    return pairs


def task_ids(root: Path) -> set[str] | None:
    """Ids from the task list and the evaluation file; ``None`` when neither exists."""
    ids: set[str] = set()
    found = False
    for name in (TASKS_FILE, EVAL_FILE):
        try:
            text = (root / name).read_text(encoding="utf-8-sig")
        except OSError:
            continue
        found = True
        for line in text.splitlines():
            try:
                tid = json.loads(line).get("instance_id") if line.strip() else None
            except (ValueError, AttributeError):
                continue
            if isinstance(tid, str):
                ids.add(tid)
    return ids if found else None


def _place_zip(root: Path, kind: FileKind, archive: Path, tasks: set[str] | None,
               skipped: list[str]) -> list[Placement]:
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"cannot open zip: {exc}", path=archive,
                           fix="pass the DBT_start_db.zip / dbt_gold.zip downloaded from Spider2"
                           ) from None
    with zf:
        result = []
        for info, task in _task_members(zf, tasks, skipped, archive.name):
            target = root / _TARGETS[kind] / task / PurePosixPath(info.filename).name
            action, problem = _extract(zf, info, target)
            result.append(Placement(task, kind, target, action, problem))
        return result


def _task_members(zf: zipfile.ZipFile, tasks: set[str] | None, skipped: list[str],
                  label: str) -> Iterator[tuple[zipfile.ZipInfo, str]]:
    """The ``<id>/**/*.duckdb`` members, as upstream picks them; everything else is reported."""
    ignored_tops: set[str] = set()
    for info in zf.infolist():
        parts = PurePosixPath(info.filename).parts
        if info.is_dir() or not parts:
            continue
        top = parts[0]
        not_task = (len(parts) < 2 or top == "__MACOSX" or name_problem(top) is not None
                    or (tasks is not None and top not in tasks))
        if not_task:
            key = top if len(parts) > 1 else info.filename
            if key not in ignored_tops:
                ignored_tops.add(key)
                skipped.append(f"{label}:{key}{'/' if len(parts) > 1 else ''}")
            continue
        name = parts[-1]
        if name.endswith(".duckdb") and not name.startswith("._"):
            yield info, top


def _extract(zf: zipfile.ZipFile, info: zipfile.ZipInfo,
             target: Path) -> tuple[Action, str | None]:
    """Write the member to ``target`` unless an identical file is already there.

    Nothing is replaced until the new file is checked: the member goes to a temporary file
    beside ``target``, which DuckDB must open (and the header check accept) before it is
    renamed over ``target``. A damaged member (bad CRC, cut short) or one that is not a DuckDB
    file is refused with the reason, and a good database already in place stays; setup once
    wrote such a member over it and only then reported it bad."""
    existed = target.is_file()
    try:
        if existed and target.stat().st_size == info.file_size:
            with zf.open(info) as member:
                if _sha256(_chunks(member)) == _file_sha256(target):
                    return Action.IDENTICAL, None
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        try:
            with zf.open(info) as member, partial.open("wb") as out:
                for chunk in _chunks(member):
                    out.write(chunk)
            problem = duckdb_file_problem(partial) or open_problem(partial)
            if problem is None:
                partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    except (zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as exc:
        problem = f"zip member {info.filename} is damaged ({exc})"
    except OSError as exc:  # a full or read-only disk: nothing was replaced, say so once
        raise DatasetError(f"cannot place {info.filename}: {exc.strerror or exc}", path=target,
                           fix="free space there and run setup again (nothing was replaced)"
                           ) from None
    if problem is not None:
        kept = "the file already there was kept" if existed else "nothing was placed"
        return Action.REFUSED, f"{problem}; {kept}"
    return (Action.REPLACED if existed else Action.PLACED), None


def _chunks(stream: object) -> Iterator[bytes]:
    read = stream.read  # type: ignore[attr-defined]
    while chunk := read(_CHUNK):
        yield chunk


def _sha256(chunks: Iterator[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return _sha256(_chunks(fh))


def _layout_files(root: Path) -> Iterator[tuple[str, FileKind, Path]]:
    """Every DuckDB file already in the layout (task folder level only, as upstream places)."""
    for kind, rel in _TARGETS.items():
        base = root / rel
        for folder in sorted(base.iterdir()) if base.is_dir() else []:
            if folder.is_dir():
                for path in sorted(folder.glob("*.duckdb")):
                    yield folder.name, kind, path


def _projects(root: Path) -> list[Path]:
    examples = root / upstream.EXAMPLES
    return [p for p in sorted(examples.iterdir()) if (p / "dbt_project.yml").is_file()]


def _verified(p: Placement) -> Placement:
    problem = open_problem(p.path)
    return p if problem is None else Placement(p.task, p.kind, p.path, p.action, problem)


def open_problem(path: Path) -> str | None:
    """Open the file read-only with DuckDB and list its tables; the error text if that fails."""
    try:
        con = open_database(path, untrusted=False)
    except duckdb.Error as exc:
        return f"DuckDB cannot open it: {str(exc).splitlines()[0]}"
    try:
        catalog.relations(con)
    except duckdb.Error as exc:
        return f"DuckDB cannot read it: {str(exc).splitlines()[0]}"
    finally:
        con.close()
    return None

"""Build the bundled sample suite into a cache folder, in upstream Spider2-DBT's exact layout.

The sample tasks live in the package as text only (SQL, CSV, YAML, TOML): binary ``.duckdb``
files in git cannot be reviewed or diffed, and DuckDB's storage format changes between versions.
On first use they are turned into a dataset root that every other part of spider2local reads
exactly like a real ``spider2-dbt`` folder, so the sample exercises the same code paths::

    examples/spider2-dbt.jsonl, examples/<id>/ (dbt project + start <db>.duckdb)
    evaluation_suite/gold/spider2_eval.jsonl, evaluation_suite/gold/<id>/<db>.duckdb
    solutions/<id>/   (our addition: reference solutions for non-LLM agents)

Gold tables come from a plain SQL script per task (``tasks/<id>/gold.sql``), never from dbt: dbt
is slow to import (about 5 s) and the gold must not depend on the code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from spider2local.core import upstream
from spider2local.db.sql import identifier, literal
from spider2local.exceptions import DatasetError

SAMPLE_TASK_IDS: tuple[str, ...] = ("bakery001", "gym001", "library001", "fleet001")
"""Every sample task, in the order they are listed in ``examples/spider2-dbt.jsonl``."""

_HERE = Path(__file__).resolve().parent
_TASKS = _HERE / "tasks"
_SOLUTIONS = _HERE / "solutions"
_MARKER = ".spider2local-sample"
"""Written last inside a finished build; a folder without it is never trusted."""
_IGNORED = ("__pycache__", "target", "logs", "*.duckdb", "*.duckdb.wal", "*.pyc", ".user.yml")
"""Artefacts a developer may leave by running dbt inside the package; never shipped or hashed."""


def default_cache_dir() -> Path:
    """``$SPIDER2LOCAL_CACHE``, else ``$XDG_CACHE_HOME/spider2local``, else ``~/.cache/...``."""
    explicit = os.environ.get("SPIDER2LOCAL_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "spider2local"


def source_digest() -> str:
    """SHA-256 over every sample source file and this builder, so any edit forces a rebuild."""
    h = hashlib.sha256()
    for path in sorted(_source_files()):
        h.update(path.relative_to(_HERE).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def ensure_built(cache_dir: Path | None = None) -> Path:
    """Return the dataset root of the built sample suite, building it first when needed.

    The build goes to a temporary folder next to the final one and is renamed into place in one
    step, so a reader never sees half a dataset and two processes building at once both end up
    with the same complete folder (the loser of the race discards its own copy).
    """
    parent = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    root = parent / f"sample-{source_digest()[:16]}"
    if (root / _MARKER).is_file():
        return root
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".sample-building-", dir=parent))
    except OSError as exc:
        raise DatasetError(f"cannot create the sample cache: {exc.strerror}", path=parent,
                           fix="set SPIDER2LOCAL_CACHE to a writable folder") from None
    try:
        try:
            _build_into(tmp)
        except (OSError, duckdb.Error) as exc:  # a full or read-only cache disk: one line
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise DatasetError(f"cannot build the sample suite: {why}", path=parent,
                               fix="free space there, or set SPIDER2LOCAL_CACHE to a "
                                   "writable folder with room") from None
        _publish(tmp, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _publish(tmp: Path, root: Path) -> None:
    """Rename ``tmp`` to ``root`` atomically; accept a complete ``root`` built concurrently."""
    for _attempt in range(2):
        try:
            tmp.rename(root)
            return
        except OSError:
            if (root / _MARKER).is_file():
                return
            shutil.rmtree(root, ignore_errors=True)  # a broken leftover: replace it
    raise DatasetError("cannot publish the built sample suite", path=root,
                       fix="delete this folder or set SPIDER2LOCAL_CACHE elsewhere")


def _source_files() -> Iterator[Path]:
    yield _HERE / "build.py"
    for top in (_TASKS, _SOLUTIONS):
        for path in top.rglob("*"):
            if path.is_file() and not _ignored(path.relative_to(_HERE)):
                yield path


def _ignored(rel: Path) -> bool:
    return any(part.match(pattern) for part in (Path(p) for p in rel.parts)
               for pattern in _IGNORED)


def _build_into(root: Path) -> None:
    examples, evaluations = [], []
    for task_id in SAMPLE_TASK_IDS:
        spec = _read_spec(task_id)
        _build_task(task_id, spec, root)
        examples.append({"instance_id": task_id, "instruction": spec["instruction"],
                         "type": "DBT"})
        evaluations.append({"instance_id": task_id, "evaluation": {
            "func": "duckdb_match",
            "parameters": {"gold": f"{spec['database']}.duckdb", **spec["evaluation"]}}})
    _write_jsonl(root / upstream.TASKS_FILE, examples)
    _write_jsonl(root / upstream.EVAL_FILE, evaluations)
    (root / _MARKER).write_text(source_digest() + "\n", encoding="utf-8")


def _read_spec(task_id: str) -> dict[str, Any]:
    """Read ``tasks/<id>/task.toml``: database name, instruction, evaluation parameters."""
    path = _TASKS / task_id / "task.toml"
    spec = tomllib.loads(path.read_text(encoding="utf-8"))
    ev = spec["evaluation"]
    spec["evaluation"] = {key: ev[key] for key in ("condition_tabs", "condition_cols",
                                                   "ignore_orders")}
    return spec


def _build_task(task_id: str, spec: dict[str, Any], root: Path) -> None:
    src = _TASKS / task_id
    db_file = f"{spec['database']}.duckdb"
    project = upstream.project_dir(root, task_id)
    shutil.copytree(src / "project", project, ignore=shutil.ignore_patterns(*_IGNORED))
    gold = upstream.gold_dir(root, task_id) / db_file
    gold.parent.mkdir(parents=True)
    # One in-memory connection per task that ATTACHes each file: about three times faster
    # than opening every file as its own database, and temp views never leak across tasks.
    con = duckdb.connect()
    try:
        _run_script(con, project / db_file, _load_raw_sql(src / "raw"))
        shutil.copyfile(project / db_file, gold)  # gold = start database + gold tables
        _run_script(con, gold, (src / "gold.sql").read_text(encoding="utf-8"))
    finally:
        con.close()
    if (_SOLUTIONS / task_id).is_dir():
        shutil.copytree(_SOLUTIONS / task_id, root / "solutions" / task_id,
                        ignore=shutil.ignore_patterns(*_IGNORED))


def _load_raw_sql(raw: Path) -> str:
    """The typed source tables of ``raw/schema.sql``, each filled from its CSV.

    Explicit ``CREATE TABLE`` first, then ``COPY``: CSV type sniffing would guess types (and may
    guess differently across DuckDB versions); here every column type is written down.
    """
    statements = [(raw / "schema.sql").read_text(encoding="utf-8")]
    for csv in sorted(raw.glob("*.csv")):
        statements.append(
            f"COPY {identifier(csv.stem)} FROM {literal(csv)} (HEADER, DELIMITER ',');")
    return "\n".join(statements)


def _run_script(con: duckdb.DuckDBPyConnection, db: Path, sql: str) -> None:
    """Run ``sql`` inside the database file ``db``; detaching checkpoints it (no WAL left)."""
    con.execute(f"ATTACH {literal(db)} AS target (TYPE duckdb)")
    try:
        con.execute("USE target")
        con.execute(sql)
    finally:
        con.execute("USE memory")
        con.execute("DETACH target")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_text(text, encoding="utf-8")

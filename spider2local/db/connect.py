"""The one place that opens a DuckDB file of a task: an agent's result, a workspace database,
the start copy, the gold scored against it. Every ``duckdb.connect`` on such a file is here
(tests/test_layout.py checks that no other module calls it).

Why one owner: DuckDB allows its temp directory even with ``enable_external_access=false``, and
by default that is ``<database>.tmp`` beside the file. An agent that leaves a symlink
``<database>.tmp -> /`` gets ``/`` into the allowed directories of every reader the runner opens
on its database: views over ``read_duckdb('<gold>')`` or ``glob('/...')`` then read the host
(measured on duckdb 1.5.6; issue 19). So each connection here names its temp directory itself,
a private empty folder of this process (mode 0700, outside every workspace), in the
configuration it is opened with, before the configuration is locked; and, for an untrusted
file, turns external access and extension loading off and locks the configuration, then checks
what DuckDB says it allows (:func:`allowed`) and refuses the connection if it is more than the
opened files and our temp folder. Nothing of the agent's ``.tmp``, ``.wal.recovery`` or
``.wal.checkpoint`` siblings is ever ours to trust: callers open copies or run inside a reader
sandbox (:mod:`spider2local.sandbox.readers`) where those paths do not exist.

A single temp folder per process, not one per connection: DuckDB refuses a second connection to
one file with another configuration (the gold scored against itself opens it twice).

SQL of ours on an untrusted file calls DuckDB's functions by their catalog's name,
``system.main.current_setting(...)``: DuckDB resolves an unqualified function to a macro of the
same name in the file's ``main`` schema first, so the file's author would answer instead
(``current_setting`` answering NULL blinded :func:`allowed`; ``json_serialize_sql`` swapped the
graded copies). Nor ``information_schema``: DuckDB refuses a schema of that name, but its
views call ``duckdb_tables()``, ``duckdb_columns()`` unqualified, so the same macros answer
there; the catalog functions are called directly instead.
"""

from __future__ import annotations

import atexit
import errno
import functools
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import duckdb

from spider2local.db.locks import is_lock_error
from spider2local.db.sql import literal
from spider2local.proc.tempdirs import make_owned_dir

__all__ = ["UnsafeConnection", "allowed", "open_database", "private_temp", "real_file"]

Setting = str | bool | int | float | list[str]
LOCKED_DOWN: Mapping[str, Setting] = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
}
"""An untrusted file's settings: no file outside the opened ones, no extension fetched or
loaded (``LOAD '<path>'`` and ``INSTALL`` fail with external access off; autoloading too)."""


class UnsafeConnection(duckdb.Error):
    """DuckDB allows more than the opened files and our temp folder: never used."""


@functools.cache
def private_temp() -> Path:
    """This process's DuckDB temp folder: made on first use, removed at exit."""
    folder = make_owned_dir("duckdb")  # a kill -9 leaves it: the next command removes it
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def open_database(path: Path, *, untrusted: bool, write: bool = False,
                  attach: Mapping[str, Path] | None = None,
                  attach_new: Mapping[str, Path] | None = None) -> duckdb.DuckDBPyConnection:
    """Open ``path`` (read-only unless ``write``) with our temp folder.

    ``untrusted``: external access and extensions off, configuration locked, allowed paths
    checked (raises :class:`UnsafeConnection`). ``attach``: ``{name: file}`` attached read-only
    first (ATTACH needs external access; it is turned off right after, the order that works on
    duckdb 1.5). ``attach_new`` (untrusted only): ``{name: file}`` of files that do not exist
    yet, created and attached read-write the same way (the graded tables' copy: a database of
    ours written from the agent's, whose SQL never gets to name another file). A trusted file
    (the dataset's gold) keeps external access, as upstream reads it.
    """
    if attach_new and not untrusted:
        raise ValueError("attach_new is for an untrusted file's connection")
    config: dict[str, Setting] = {}
    if untrusted:
        config.update({k: v for k, v in LOCKED_DOWN.items()
                       if not (attach or attach_new) or k != "enable_external_access"})
    # Last: DuckDB applies the settings in order, and with the temp folder given before
    # ``enable_external_access`` it refuses the connection ("Modifying the temp_directory has
    # been disabled"; duckdb 1.5.6, measured).
    config["temp_directory"] = str(private_temp())
    if not untrusted:
        return duckdb.connect(str(path), read_only=not write, config=config)
    # Opened by its real path, the one DuckDB reports in ``allowed_paths`` (it resolves links
    # and relative paths itself): the check below then compares like with like, and the file
    # checked is the file opened, not whatever a link swapped in between would name.
    real = real_file(path)
    attached = {name: real_file(file) for name, file in (attach or {}).items()}
    created = {name: real_file(file) for name, file in (attach_new or {}).items()}
    con = duckdb.connect(str(real), read_only=not write, config=config)
    try:
        for name, file in attached.items():
            try:
                con.execute(f"ATTACH {literal(str(file))} AS {name} (READ_ONLY)")
            except duckdb.Error as exc:
                if is_lock_error(exc):
                    raise
                # e.g. the task database is itself named so: queries go on without the copy
        for name, file in created.items():
            _attach_new(con, name, file)
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        _check(con, [real, *attached.values(), *created.values()])
    except BaseException:
        con.close()
        raise
    return con


SMALL_BLOCK = 16384
"""The block size of a database :func:`open_database` creates (``attach_new``): DuckDB's
smallest. With the default 256 KiB blocks a file holding a few small tables is about 0.5 MiB
(measured, duckdb 1.5.6: 536,576 bytes for three one-row tables; 94,208 with 16 KiB blocks);
large tables come out the same size either way."""


def _attach_new(con: duckdb.DuckDBPyConnection, name: str, file: Path) -> None:
    """Create ``file`` attached read-write as ``name`` (with small blocks where this duckdb
    knows the option: 1.2 and later). A file already there is refused: this is for files of
    ours, made now, never one found on disk."""
    if os.path.lexists(file):
        raise FileExistsError(errno.EEXIST, "refusing to attach an existing file as new",
                              str(file))
    try:
        con.execute(f"ATTACH {literal(str(file))} AS {name} "
                    f"(READ_WRITE, BLOCK_SIZE {SMALL_BLOCK})")
    except duckdb.Error:
        if os.path.lexists(file):
            raise
        con.execute(f"ATTACH {literal(str(file))} AS {name} (READ_WRITE)")


def allowed(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[str]]:
    """What DuckDB lets this connection's SQL reach: (allowed paths, allowed directories)."""
    # DuckDB's own function by its catalog's name: an untrusted file may hold a macro named
    # ``current_setting`` answering NULL, which an unqualified call runs instead (found by
    # review; tests/db/test_connect.py)
    row = con.execute("SELECT system.main.current_setting('allowed_paths'), "
                      "system.main.current_setting('allowed_directories')").fetchone()
    assert row is not None
    return [str(p) for p in row[0] or []], [str(d) for d in row[1] or []]


def real_file(path: Path) -> Path:
    """``path`` as DuckDB names the file it opens: absolute, every link (of the file or of a
    folder above it) and ``..`` resolved. The one place this rule lives: the library
    (``score_database`` on a path reached through a link, a relative path) and the CLI (whose
    reader sandbox binds the link's target at the given path) reach it the same way."""
    return Path(os.path.realpath(path))


def _check(con: duckdb.DuckDBPyConnection, opened: list[Path]) -> None:
    """Refuse a connection that allows more than ``opened`` (real paths, see :func:`real_file`;
    and their WAL siblings, which DuckDB itself names) and our temp folder: a DuckDB release
    that adds another place to the allow-list must not widen what an agent's SQL reaches
    unnoticed. A sibling counts only when it is in the opened file's own folder (a name
    built from the file's name stays where the file is: ``<db>.wal/../x`` is not a sibling)."""
    paths, dirs = allowed(con)
    temp = str(private_temp()).rstrip("/")
    bad_dirs = [d for d in dirs if d.rstrip("/") != temp]
    bad_paths = [p for p in paths if not any(_is_opened(p, file) for file in opened)]
    if bad_dirs or bad_paths:
        raise UnsafeConnection(f"DuckDB allows more than the opened files: "
                               f"{', '.join([*bad_dirs, *bad_paths])}")


def _is_opened(reported: str, file: Path) -> bool:
    """``reported`` (an allowed path, as DuckDB gives it) is ``file`` or one of its WAL
    siblings (``<name>.wal``, ``<name>.wal.recovery``, ...) in the same folder."""
    if reported == str(file):
        return True
    path = Path(reported)
    return (os.path.normpath(reported) == reported and path.parent == file.parent
            and path.name.startswith(file.name + ".wal"))

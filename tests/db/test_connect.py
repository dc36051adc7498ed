"""The one owner of DuckDB connections on task files: whatever the agent left beside its
database (a ``.tmp`` symlink to ``/``, WAL siblings pointing at gold), no file function, ATTACH,
COPY, EXPORT or extension reaches a file outside the opened ones."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from spider2local.db.connect import UnsafeConnection, allowed, open_database, private_temp
from tests.helpers import host_secrets

SECRET = "HOST-SECRET-7f3a"


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    """A secret text file, a CSV, a Parquet and a DuckDB file outside the agent's folder."""
    return host_secrets(tmp_path, SECRET)


def _agent_db(tmp_path: Path, host: dict[str, Path], link: str | None) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    db = work / "result.duckdb"
    duckdb.connect(str(db)).execute("CREATE TABLE ok AS SELECT 1 AS a").close()
    if link == "root":
        os.symlink("/", work / "result.duckdb.tmp")
    elif link == "wal-siblings":
        for suffix in (".wal.recovery", ".wal.checkpoint"):
            os.symlink(host["secret.txt"], work / f"result.duckdb{suffix}")
    return db


def attacks(host: dict[str, Path], db: Path) -> dict[str, str]:
    secret, out = host["secret.txt"], db.parent / "out"
    return {
        "read_csv": f"SELECT * FROM read_csv('{host['secret.csv']}')",
        "read_parquet": f"SELECT * FROM read_parquet('{host['secret.parquet']}')",
        "read_json": f"SELECT * FROM read_json('{host['secret.json']}')",
        "read_text": f"SELECT * FROM read_text('{secret}')",
        "read_text via .tmp": f"SELECT * FROM read_text('{db}.tmp{secret}')",
        "read_text via ..": f"SELECT * FROM read_text('{private_temp()}/../..{secret}')",
        "read_blob": f"SELECT * FROM read_blob('{secret}')",
        "read_blob of a WAL sibling": f"SELECT * FROM read_blob('{db}.wal.recovery')",
        "glob": f"SELECT * FROM glob('{secret.parent}/*')",
        "read_duckdb": f"SELECT * FROM read_duckdb('{host['gold.duckdb']}', table_name='t')",
        "file as table": f"SELECT * FROM '{host['secret.csv']}'",
        "attach": f"ATTACH '{host['gold.duckdb']}' AS g (READ_ONLY)",
        "copy": f"COPY (SELECT 1) TO '{out}.csv'",
        "export": f"EXPORT DATABASE '{out}'",
        "load": f"LOAD '{secret}'",
        "install": "INSTALL httpfs",
        "autoload": f"SELECT * FROM read_xlsx('{secret}')",
        "unlock": "SET enable_external_access = true",
        "temp dir": "SET temp_directory = '/'",
    }


@pytest.mark.parametrize("link", [None, "root", "wal-siblings"])
@pytest.mark.parametrize("write", [False, True])
def test_no_file_function_reaches_outside(tmp_path: Path, host: dict[str, Path],
                                          link: str | None, write: bool) -> None:
    db = _agent_db(tmp_path, host, link)
    try:
        con = open_database(db, untrusted=True, write=write)
    except UnsafeConnection:  # DuckDB followed a WAL sibling on opening: caught, refused
        assert link == "wal-siblings"
        return
    try:
        paths, dirs = allowed(con)
        assert dirs == [f"{private_temp()}/"]
        assert all(p == str(db) or p.startswith(f"{db}.wal") for p in paths), paths
        for name, sql in attacks(host, db).items():
            try:
                rows = con.execute(sql).fetchall()
            except duckdb.Error:
                continue
            assert SECRET not in str(rows), name
            assert rows == [], (name, rows)  # only a WAL path that is not there "reads"
    finally:
        con.close()
    assert not (db.parent / "out.csv").exists() and not (db.parent / "out").exists()


def test_a_view_over_a_host_file_reads_nothing(tmp_path: Path, host: dict[str, Path]) -> None:
    db = _agent_db(tmp_path, host, "root")
    con = duckdb.connect(str(db))
    con.execute(f"CREATE VIEW v AS SELECT * FROM read_duckdb('{host['gold.duckdb']}', "
                "table_name='t')")
    con.close()
    with open_database(db, untrusted=True) as locked, pytest.raises(duckdb.PermissionException):
        locked.execute("SELECT * FROM v").fetchall()


def test_attach_then_locked(tmp_path: Path, host: dict[str, Path]) -> None:
    """The query tool's start copy is attached before the lock; nothing else afterwards."""
    db = _agent_db(tmp_path, host, "root")
    with open_database(db, untrusted=True, attach={"start": host["gold.duckdb"]}) as con:
        assert con.execute("SELECT a FROM start.t").fetchone() == (SECRET,)
        with pytest.raises(duckdb.Error):
            con.execute(f"SELECT * FROM read_text('{host['secret.txt']}')").fetchall()


def test_more_allowed_than_opened_is_refused(tmp_path: Path, host: dict[str, Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import spider2local.db.connect as connect

    real = connect.allowed
    monkeypatch.setattr(connect, "allowed",
                        lambda con: (real(con)[0], [*real(con)[1], "/"]))
    with pytest.raises(UnsafeConnection, match="allows more"):
        open_database(_agent_db(tmp_path, host, None), untrusted=True)


@pytest.mark.parametrize("route", ["file link", "folder link", "relative", "dot-dot"])
def test_a_path_through_links_opens_and_allows_only_the_real_file(
        tmp_path: Path, host: dict[str, Path], route: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB reports the real path of the file it opened; the check compares it with the real
    path too (it compared the given one: every link or relative path was refused)."""
    db = _agent_db(tmp_path, host, None)
    if route == "file link":
        (tmp_path / "elsewhere").mkdir()
        given = tmp_path / "elsewhere" / "named_otherwise.duckdb"
        given.symlink_to(db)
    elif route == "folder link":
        (tmp_path / "linked").symlink_to(db.parent)
        given = tmp_path / "linked" / db.name
    elif route == "relative":
        monkeypatch.chdir(tmp_path)
        given = Path("work") / db.name
    else:
        given = db.parent / ".." / "work" / db.name
    with open_database(given, untrusted=True) as con:
        assert con.execute("SELECT a FROM ok").fetchone() == (1,)
        paths, _ = allowed(con)
        assert str(db) in paths and all(p.startswith(f"{db}.wal") or p == str(db)
                                        for p in paths), paths
        with pytest.raises(duckdb.Error):
            con.execute(f"SELECT * FROM read_text('{host['secret.txt']}')").fetchall()


@pytest.mark.parametrize("extra", ["{db}.wal/../../secret.txt", "{other}/result.duckdb.wal",
                                   "{db}x.wal"])
def test_a_wal_sibling_must_be_in_the_files_own_folder(
        tmp_path: Path, host: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
        extra: str) -> None:
    """A name built from the file's name counts as its sibling only where the file is."""
    import spider2local.db.connect as connect

    db = _agent_db(tmp_path, host, None)
    path = extra.format(db=db, other=tmp_path)
    real = connect.allowed
    monkeypatch.setattr(connect, "allowed", lambda con: ([*real(con)[0], path], real(con)[1]))
    with pytest.raises(UnsafeConnection, match="allows more"):
        open_database(db, untrusted=True)


def test_a_macro_named_current_setting_in_the_file_does_not_blind_the_check(
        tmp_path: Path) -> None:
    """The check reads DuckDB's settings with DuckDB's own function: a file whose macro
    ``current_setting`` answers NULL (so that nothing would look allowed) changes nothing."""
    plain, trapped = tmp_path / "plain.duckdb", tmp_path / "trapped.duckdb"
    for path in (plain, trapped):
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE t AS SELECT 1 AS x")
        if path == trapped:
            con.execute("CREATE MACRO current_setting(x) AS NULL")
            assert con.execute("SELECT current_setting('allowed_paths')").fetchone() == (None,)
        con.close()
    found = {}
    for path in (plain, trapped):
        with open_database(path, untrusted=True) as con:
            found[path.name] = allowed(con)
    for path in (plain, trapped):
        paths, dirs = found[path.name]
        assert dirs == [f"{private_temp()}/"] and str(path) in paths
        assert all(p == str(path) or p.startswith(f"{path}.wal") for p in paths), paths

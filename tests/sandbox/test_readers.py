"""The reader sandboxes: whatever DuckDB would let through, a reader's process sees only the
runtime and its job's files. Tried with an UNLOCKED connection (external access on, DuckDB's
default temp folder beside a ``.tmp -> /`` symlink), so the sandbox alone is what holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import duckdb
import pytest

from spider2local.evaluation.params import EvalParams
from spider2local.sandbox import dbreads, readers
from spider2local.sandbox.probe import Probe, probe
from spider2local.sandbox.readers import ReaderFiles, run_reader
from spider2local.sandbox.scoring import score_sandboxed_sync
from tests.helpers import host_secrets

pytestmark = pytest.mark.process

SECRET = "HOST-SECRET-91c2"
needs_namespaces = pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox: "
                                                              f"{probe().reason}")

UNLOCKED_READER = r"""
import duckdb, json, sys
con = duckdb.connect(sys.argv[1], read_only=True)  # no lock-down at all
seen = {}
for name, sql in json.loads(sys.argv[2]).items():
    try:
        seen[name] = str(con.execute(sql).fetchall())
    except Exception as exc:
        seen[name] = "ERROR " + type(exc).__name__
print(json.dumps(seen))
"""


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    return host_secrets(tmp_path, SECRET)


def _result(tmp_path: Path, host: dict[str, Path]) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    db = work / "result.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT 'mine' AS a")
    con.execute(f"CREATE VIEW via_gold AS SELECT * FROM read_duckdb('{host['gold.duckdb']}', "
                "table_name='t')")
    con.close()
    os.symlink("/", work / "result.duckdb.tmp")
    return db


def attacks(host: dict[str, Path], db: Path) -> dict[str, str]:
    secret, out = host["secret.txt"], host["secret.txt"].parent / "written"
    return {
        "view over gold": "SELECT * FROM via_gold",
        "read_csv": f"SELECT * FROM read_csv('{host['secret.csv']}')",
        "read_parquet": f"SELECT * FROM read_parquet('{host['secret.parquet']}')",
        "read_json": f"SELECT * FROM read_json('{host['secret.json']}')",
        "read_text": f"SELECT * FROM read_text('{secret}')",
        "read_text via .tmp": f"SELECT * FROM read_text('{db}.tmp{secret}')",
        "read_blob": f"SELECT * FROM read_blob('{secret}')",
        "glob": f"SELECT * FROM glob('{secret.parent}/*')",
        "read_duckdb": f"SELECT * FROM read_duckdb('{host['gold.duckdb']}', table_name='t')",
        "attach": f"ATTACH '{host['gold.duckdb']}' AS g (READ_ONLY)",
        "attached": "SELECT * FROM g.t",
        "copy": f"COPY (SELECT 1) TO '{out}.csv'",
        "export": f"EXPORT DATABASE '{out}'",
        "load": f"LOAD '{secret}'",
        "own table": "SELECT * FROM t",
    }


@needs_namespaces
def test_an_unlocked_reader_in_its_sandbox_reads_nothing_of_the_host(
        tmp_path: Path, host: dict[str, Path]) -> None:
    db = _result(tmp_path, host)
    done = anyio.run(lambda: run_reader(
        [sys.executable, "-c", UNLOCKED_READER, str(db), json.dumps(attacks(host, db))],
        ReaderFiles(read_only=(db,)), input=b"", timeout=60))
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["own table"] == "[('mine',)]"  # the bound result is there...
    leaked = {name: out for name, out in seen.items() if SECRET in out}
    assert leaked == {}  # ...and nothing of the host, with external access on
    assert seen["glob"] == "[]" and seen["attached"].startswith("ERROR")
    assert not list(host["secret.txt"].parent.glob("written*"))


@needs_namespaces
def test_the_scorer_sandbox_holds_the_gold_but_the_result_cannot_name_it(
        tmp_path: Path, host: dict[str, Path]) -> None:
    """Graded tables as views over gold, the .tmp symlink: scored 0, reading errors only."""
    db = _result(tmp_path, host)
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE t")
    con.execute("CREATE VIEW t AS SELECT * FROM via_gold")
    con.close()
    params = EvalParams(gold="gold.duckdb", condition_tabs=("t",), condition_cols=((),),
                        ignore_orders=(False,))
    score = score_sandboxed_sync(db, host["gold.duckdb"], params)
    assert score.passed is False
    assert score.tables[0].error and SECRET not in score.tables[0].error
    # the gold against itself still passes: the scorer sandbox does hold the gold
    assert score_sandboxed_sync(host["gold.duckdb"], host["gold.duckdb"], params).passed


def test_without_namespaces_readers_run_plainly_and_say_so(
        tmp_path: Path, host: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    readers.unsandboxed_reason.cache_clear()
    monkeypatch.setattr(readers, "probe", lambda: Probe(False, "no namespaces here", "a fix"))
    try:
        params = EvalParams(gold="gold.duckdb", condition_tabs=("t",), condition_cols=((),),
                            ignore_orders=(False,))
        assert score_sandboxed_sync(host["gold.duckdb"], host["gold.duckdb"], params).passed
        db = _result(tmp_path, host)
        score = score_sandboxed_sync(db, host["gold.duckdb"], params)
        assert score.passed is False  # the configuration alone still holds
        warning = capsys.readouterr().err
        assert warning.count("DuckDB readers run WITHOUT a sandbox (no namespaces here)") == 1
    finally:
        readers.unsandboxed_reason.cache_clear()


HOLD = ("import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); "
        "print('held', flush=True); time.sleep(600)")


def test_a_reader_asked_from_a_worker_thread_ends_with_the_task_that_asked(
        tmp_path: Path) -> None:
    """The workspace's snapshot and the checkpoint ask their readers from a worker thread of
    the runner. A cancelled task (Ctrl-C, a deadline) used to wait for the reader: it ran in a
    loop of the thread's own, here a checkpoint waiting its whole lock time on a database
    another process holds. Now the runner's loop owns the child: the cancellation kills and
    reaps it there, and the thread sees it cancelled."""
    from tests.cli.test_run_command import cmdline, descendants

    db = tmp_path / "held.duckdb"
    duckdb.connect(str(db)).close()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE,
                              text=True)
    raised: list[BaseException] = []

    def checkpoint() -> None:
        try:
            dbreads.checkpoint_sandboxed(db, 90.0)
        except BaseException as exc:
            raised.append(exc)
            raise

    async def main() -> float:
        started = anyio.current_time()
        with anyio.move_on_after(2):
            await anyio.to_thread.run_sync(checkpoint)
        return anyio.current_time() - started

    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        took = anyio.run(main)
    finally:
        holder.kill()
        holder.wait()
    assert took < 45, f"the cancelled task waited {took:.0f}s for its reader"
    assert [type(e).__name__ for e in raised] == ["CancelledError"]
    left = [pid for pid in descendants(os.getpid()) if dbreads.MODULE in cmdline(pid)]
    assert left == [], "a reader child outlived the task that asked"

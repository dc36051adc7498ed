"""The unsealed witness (issue 33): inotify on the originals of gold and the evaluation
records, private copies for the runner, events charged to the trials in their agent stage,
and an off witness that says why."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spider2local.core.results import Integrity
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.integrity import guard
from spider2local.integrity.scan import ScanResult, witnessed
from spider2local.integrity.witness import (
    Inotify,
    Witness,
    WitnessState,
    open_witness,
)
from spider2local.suite.model import Suite

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@pytest.fixture
def tasks(tiny_dataset: Callable[..., Path], tmp_path: Path) -> list[TaskSpec]:
    root = tiny_dataset("t1", "t2")
    return list(load_dataset(Suite(tmp_path / "tasks.toml", root)).tasks)


@pytest.fixture
def witness(tasks: list[TaskSpec], tmp_path: Path) -> Iterator[Witness]:
    parent = tmp_path / "tmp"
    parent.mkdir()
    found = open_witness(tasks, parent=parent)
    try:
        yield found
    finally:
        found.close()


def gold(task: TaskSpec) -> Path:
    assert task.gold is not None
    return task.gold.db


def read_elsewhere(path: Path) -> None:
    """Read ``path`` from another process (as an agent's script would), printing nothing."""
    subprocess.run([sys.executable, "-c", f"open({str(path)!r}, 'rb').read()"], check=True)


@pytest.mark.process
@linux
def test_an_original_read_during_the_agent_stage_is_named_and_makes_the_trial_suspect(
        tasks: list[TaskSpec], witness: Witness) -> None:
    assert witness.on, witness.reason
    t1 = tasks[0]
    witness.entered("t1")
    read_elsewhere(gold(t1))
    witness.left("t1")
    found = witness.evidence("t1")
    rules = {e.rule for e in found}
    assert f"gold file {os.path.realpath(gold(t1))} opened during the agent stage" in rules
    assert f"gold file {os.path.realpath(gold(t1))} read during the agent stage" in rules
    assert all(e.source == "witness" and "first at" in e.excerpt for e in found)
    assert witness.evidence("t1") == ()  # taken once
    # the scan's one rule: any evidence is suspect, the scan's own evidence kept after it
    result = witnessed(ScanResult(Integrity.CLEAN), found)
    assert result.integrity is Integrity.SUSPECT and result.evidence[:len(found)] == found
    assert witnessed(ScanResult(Integrity.CLEAN), ()) == ScanResult(Integrity.CLEAN)


@pytest.mark.process
@linux
def test_the_evaluation_file_and_a_replaced_gold_are_seen_too(
        tasks: list[TaskSpec], witness: Witness) -> None:
    t1 = tasks[0]
    witness.entered("t1")
    read_elsewhere(t1.eval_file)
    os.utime(gold(t1), (0, 0))  # an agent setting gold's times back
    witness.left("t1")
    rules = {e.rule for e in witness.evidence("t1")}
    assert any(r.startswith("evaluation file ") and r.endswith(" opened during the agent stage")
               for r in rules), rules
    assert any(r.startswith("gold file ") and "changed (attributes)" in r for r in rules), rules


@pytest.mark.process
@linux
def test_with_two_trials_at_once_both_are_marked_and_told_why(
        tasks: list[TaskSpec], witness: Witness) -> None:
    witness.entered("t1")
    witness.entered("t2")
    read_elsewhere(gold(tasks[1]))
    witness.left("t1")
    witness.left("t2")
    for trial in ("t1", "t2"):
        found = witness.evidence(trial)
        assert found, trial
        assert all("2 trials were in their agent stage then (t1, t2)" in e.excerpt
                   and "inotify cannot tell which one" in e.excerpt for e in found), found


@pytest.mark.process
@linux
def test_outside_an_agent_stage_nothing_is_charged_to_a_trial_and_the_run_keeps_it(
        tasks: list[TaskSpec], witness: Witness) -> None:
    witness.entered("t1")
    witness.left("t1")
    read_elsewhere(gold(tasks[0]))  # after t1's stage: a leftover, another program
    witness.entered("t2")
    witness.left("t2")
    assert witness.evidence("t1") == () and witness.evidence("t2") == ()
    record = json.loads(json.dumps(witness.to_json()))
    assert record["state"] == "on" and len(record["watched"]) == 3  # 2 gold, 1 eval file
    (first, *_) = record["unattributed"]
    assert first["kind"] == "gold file" and first["trials"] == []


@pytest.mark.process
@linux
def test_the_runner_reads_private_copies_that_the_witness_does_not_charge(
        tasks: list[TaskSpec], witness: Witness) -> None:
    """The runner's own reads (guard, scorer, gold check) go to the copies: the whole
    pre-score check during an agent stage charges nothing, and the copies equal the
    fingerprints taken of the originals."""
    t1 = tasks[0]
    taken = guard.take(tasks)  # before the stage, as the run does (before the witness, too)
    watch = guard.Watch(taken, witness=witness)
    reading = watch.reading(t1)
    assert gold(reading) != gold(t1) and gold(reading).name == gold(t1).name
    assert witness.eval_file(t1) != t1.eval_file
    witness.entered("t1")
    check = watch.changes(t1)
    assert check.changed == () and guard.gold_moved(check, reading) is None
    assert guard.gold_unreadable(reading) is None
    read_elsewhere(gold(reading))  # a copy, by its path: not an original
    witness.left("t1")
    assert witness.evidence("t1") == ()


@pytest.mark.process
@linux
def test_listing_the_private_copies_folder_is_seen(
        tasks: list[TaskSpec], witness: Witness) -> None:
    """A copy's folder has a random name: only a listing of the copies' folder finds it."""
    assert witness.folder is not None
    witness.entered("t1")
    subprocess.run(["ls", "-R", str(witness.folder.parent)], check=True,
                   stdout=subprocess.DEVNULL)
    witness.left("t1")
    rules = [e.rule for e in witness.evidence("t1")]
    assert rules == [f"private gold copies folder {witness.folder} listed during the agent "
                     "stage"], rules


@linux
def test_a_changed_private_copy_is_an_integrity_change(
        tasks: list[TaskSpec], witness: Witness) -> None:
    t1 = tasks[0]
    watch = guard.Watch(guard.take(tasks), witness=witness)
    with gold(watch.reading(t1)).open("ab") as fh:
        fh.write(b"x")
    (changed,) = watch.changes(t1).changed
    assert changed.startswith(f"gold file {gold(watch.reading(t1))} changed")


@linux
def test_close_removes_the_copies_and_stops_watching(tasks: list[TaskSpec],
                                                     tmp_path: Path) -> None:
    found = open_witness(tasks, parent=tmp_path)
    folder = found.folder
    assert folder is not None and folder.is_dir()
    found.close()
    assert not folder.exists() and found.inotify is None
    found.entered("t1")  # after close: harmless
    found.left("t1")
    assert found.evidence("t1") == ()


class _FailingLibc:
    """A libc whose inotify calls fail as they do at the per-user limits."""

    def __init__(self, init_errno: int = 0, add_errno: int = 0) -> None:
        self.inotify_init1 = _Call(-1 if init_errno else os.open("/dev/null", os.O_RDONLY),
                                   init_errno)
        self.inotify_add_watch = _Call(-1, add_errno)


class _Call:
    def __init__(self, result: int, err: int) -> None:
        self.result, self.err = result, err
        self.argtypes: Any = None
        self.restype: Any = None

    def __call__(self, *_: Any) -> int:
        ctypes.set_errno(self.err)
        return self.result


@pytest.mark.parametrize(("libc", "why"), [
    (_FailingLibc(init_errno=errno.EMFILE), "fs.inotify.max_user_instances reached"),
    (_FailingLibc(add_errno=errno.ENOSPC), "fs.inotify.max_user_watches reached"),
    (object(), "this C library has no inotify"),
])
def test_where_inotify_cannot_work_the_witness_is_off_with_the_reason(
        tasks: list[TaskSpec], tmp_path: Path, libc: object, why: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    found = open_witness(tasks, parent=tmp_path, make=lambda: Inotify(libc))
    assert found.state is WitnessState.OFF and why in found.reason, found.reason
    assert found.to_json() == {"state": "off", "reason": found.reason}
    assert found.reading(tasks[0]) is tasks[0]  # the originals, as before
    assert list(tmp_path.glob("spider2local-tmp-witness-*")) == []  # no copies left


def test_not_on_linux_the_witness_is_off(tasks: list[TaskSpec],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    found = open_witness(tasks)
    assert not found.on and found.reason == "inotify is Linux-only (this is darwin)"


@linux
def test_private_copies_that_cannot_be_taken_turn_it_off(
        tasks: list[TaskSpec], tmp_path: Path) -> None:
    missing = tmp_path / "no-such-parent"
    found = open_witness(tasks, parent=missing)
    assert not found.on and found.reason.startswith("private copies not taken: ")


@linux
def test_many_events_stay_one_item_each_and_come_fast(
        tasks: list[TaskSpec], witness: Witness) -> None:
    witness.entered("t1")
    path = gold(tasks[0])
    for _ in range(200):
        with path.open("rb") as fh:
            fh.read(1)
    time.sleep(0.1)
    witness.left("t1")
    found = witness.evidence("t1")
    assert len(found) == 2 and all("times" in e.excerpt for e in found), found


@linux
def test_an_original_gold_written_is_still_an_integrity_change_seen_without_opening_it(
        tasks: list[TaskSpec], witness: Witness) -> None:
    """The runner scores the copy, but a gold the agent wrote is no verdict, as without the
    witness: its metadata names it, and checking charges no trial (a stat is no event)."""
    t1, t2 = tasks
    watch = guard.Watch(guard.take(tasks), witness=witness)
    with gold(t1).open("ab") as fh:
        fh.write(b"x")
    gold(t2).with_name(gold(t2).name + ".wal").write_bytes(b"rows")
    witness.entered("t2")
    (changed,) = watch.changes(t1).changed
    assert changed.startswith(f"gold file {gold(t1)} changed since the run started"), changed
    (appeared,) = watch.changes(t2).changed
    assert appeared.startswith(f"gold .wal {gold(t2)}.wal appeared"), appeared
    witness.left("t2")
    assert witness.evidence("t2") == ()


@linux
@pytest.mark.slow
def test_the_runners_scorer_on_an_original_would_be_seen_on_the_copy_it_is_not(
        tasks: list[TaskSpec], witness: Witness) -> None:
    """Why an honest run is clean: the scorer child (sandboxed where namespaces work, a plain
    child elsewhere) opens whatever gold it is given; the witness charges that to the trial in
    its agent stage when it is an original, and nothing when it is the private copy."""
    import anyio

    from spider2local.sandbox.scoring import score_sandboxed

    t1 = tasks[0]
    assert t1.start_db is not None and t1.gold is not None
    reading = witness.reading(t1)
    assert reading.gold is not None
    for db, seen in ((reading.gold.db, False), (t1.gold.db, True)):
        witness.entered("t2")
        anyio.run(lambda db=db: score_sandboxed(t1.start_db, db, t1.gold.params))
        witness.left("t2")
        found = witness.evidence("t2")
        assert bool(found) is seen, (db, found)


@linux
def test_an_evaluation_file_written_is_read_again_to_name_the_record_uncharged(
        tasks: list[TaskSpec], witness: Witness) -> None:
    """Edited records are no verdict, as without the witness: once the original was written,
    the guard reads it (its own read, charged to no trial) and names the task whose record
    changed; another task's record is unchanged."""
    t1, t2 = tasks
    watch = guard.Watch(guard.take(tasks), witness=witness)
    rows = [json.loads(line) for line in t1.eval_file.read_text().splitlines()]
    rows[0]["evaluation"]["parameters"]["condition_cols"] = [[0, 1]]
    t1.eval_file.write_text("".join(json.dumps(r) + "\n" for r in rows))  # no agent stage
    assert witness.stray()  # the write was seen, as the run's
    witness.entered("t2")
    (changed,) = watch.changes(t1).changed
    assert changed.startswith("evaluation record changed"), changed
    assert watch.changes(t2).changed == ()
    witness.left("t2")
    assert witness.evidence("t2") == ()  # the runner's reads are nobody's


@linux
def test_a_reader_thread_that_cannot_start_turns_it_off(
        tasks: list[TaskSpec], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    found = open_witness(tasks, parent=tmp_path)
    assert not found.on and found.reason == ("its reader thread cannot start: can't start new "
                                             "thread"), found.reason
    assert list(tmp_path.glob("spider2local-tmp-witness-*")) == []

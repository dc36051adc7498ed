"""The typed run manifest: every version written so far reads, and what it reads writes back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spider2local.integrity.guard import Fingerprints
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import (
    MANIFEST_VERSION,
    MergedSource,
    Rerun,
    RunManifest,
    SelectedTask,
    SelectionRequest,
    Session,
)
from spider2local.sandbox.isolation import IsolationMode, IsolationRecord
from spider2local.suite.options import Isolation

VERSION_1 = {  # before fingerprints (no manifest_version key in the first releases either)
    "run_id": "old", "agent": "noop", "model": None,
    "settings": {"jobs": 2, "timeout": 60.0, "max_turns": 10},
    "versions": {"python": "3.11"}, "suite": {"path": "/x/tasks.toml", "sha256": "abc"},
    "dataset": "/data", "tasks": [{"id": "a", "fake_date": "2024-09-15", "tables": 2}],
    "started_at": "2026-01-01T00:00:00+00:00", "finished_at": None,
    "sessions": [{"started_at": "2026-01-01T00:00:00+00:00", "finished_at": None,
                  "interrupted": None, "argv": ["run"]}],
}


@pytest.mark.parametrize("version", [None, 1, 2])
def test_old_versions_read_with_defaults_for_what_they_lack(version: int | None) -> None:
    data = dict(VERSION_1) if version is None else {**VERSION_1, "manifest_version": version}
    manifest = RunManifest.from_json(data)
    assert manifest.tasks == (SelectedTask("a", "2024-09-15", 2),)
    assert manifest.suite_sha256 == "abc" and manifest.integrity is None
    assert manifest.was_interrupted  # never finished: killed
    assert manifest.isolation_mode == "none" and manifest.setting("timeout") == 60.0
    assert manifest.setting("agent") == "noop"  # a manifest field when settings lack it
    assert manifest.sessions == (Session("2026-01-01T00:00:00+00:00", argv=("run",)),)
    assert manifest.manifest_version == MANIFEST_VERSION


def test_round_trip_keeps_unknown_keys_and_refuses_a_future_version(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.write_manifest({**VERSION_1, "manifest_version": 2, "future_key": [1, 2],
                           "isolation": {"requested": "auto", "mode": "none", "reason": "x"}})
    manifest = folder.read_manifest()
    assert manifest is not None and manifest.extra == {"future_key": [1, 2]}
    written = json.loads(folder.manifest_path.read_text())
    assert written["future_key"] == [1, 2] and written["isolation"]["mode"] == "none"
    assert RunManifest.from_json(written) == manifest
    with pytest.raises(ValueError, match="manifest_version 99"):
        RunManifest.from_json({**VERSION_1, "manifest_version": 99})


def test_finish_sets_the_end_of_the_last_session() -> None:
    done = RunManifest.from_json(VERSION_1).finish(interrupted=False)
    assert done.finished_at and done.interrupted is False and not done.was_interrupted
    assert done.sessions[-1].finished_at == done.finished_at


OLD_RUN = Path(__file__).parent / "data" / "pre-trials-run"
"""A run folder written by spider2local at manifest version 2 (result schema 4)."""


def test_a_real_version_2_run_json_reads_typed_and_writes_back_the_same(tmp_path: Path) -> None:
    data = json.loads((OLD_RUN / "run.json").read_text())
    manifest = RunManifest.from_json(data)
    assert manifest.isolation == IsolationRecord(Isolation.AUTO, IsolationMode.NOT_NEEDED,
                                                 data["isolation"]["reason"])
    assert manifest.isolation_mode == "not-needed" == manifest.setting("isolation")
    assert isinstance(manifest.integrity, Fingerprints)
    assert sorted(manifest.integrity.tasks) == ["bakery001", "fleet001", "gym001",
                                                "library001"]
    gold = manifest.integrity.tasks["gym001"].db
    assert gold is not None and gold.size == 1323008
    written = manifest.to_json()
    assert written["isolation"] == data["isolation"] and written["integrity"] == data["integrity"]
    assert written["settings"] == data["settings"]  # an old run's settings are kept as read
    assert RunManifest.from_json(written) == manifest


def test_isolation_is_recorded_once_and_read_from_the_record() -> None:
    record = IsolationRecord(Isolation.AUTO, IsolationMode.NAMESPACE, "works")
    manifest = RunManifest(run_id="r", agent="noop", settings={"jobs": 1}, isolation=record)
    data = manifest.to_json()
    assert "isolation" not in data["settings"]
    assert data["isolation"] == {"requested": "auto", "mode": "namespace", "reason": "works"}
    again = RunManifest.from_json(data)
    assert again.isolation == record and again.setting("isolation") == "namespace"
    assert RunManifest.from_json({**data, "isolation": "none"}).isolation == IsolationRecord(
        mode=IsolationMode.NONE)  # a bare mode (early files)
    unrecorded = RunManifest.from_json({k: v for k, v in data.items() if k != "isolation"})
    assert unrecorded.isolation is None and unrecorded.isolation_mode == "none"


def test_reruns_and_merge_sources_are_typed_records() -> None:
    manifest = RunManifest(
        run_id="m", agent="noop", merged_at="2026-01-01T00:00:00+00:00",
        merged_from=(MergedSource("/runs/a", "a", ("t1", "t2#2")), MergedSource("/runs/b", "b")),
        reruns=(Rerun("2026-01-02T00:00:00+00:00", "1", ("t1",), ("failed",)),))
    data = json.loads(json.dumps(manifest.to_json()))
    assert data["merged_from"][0] == {"path": "/runs/a", "run_id": "a", "kept": ["t1", "t2#2"]}
    assert data["reruns"] == [{"at": "2026-01-02T00:00:00+00:00", "history": "1",
                               "tasks": ["t1"], "request": ["failed"]}]
    assert RunManifest.from_json(data) == manifest


def test_the_selection_is_a_typed_record_and_old_ones_read() -> None:
    data = json.loads((OLD_RUN / "run.json").read_text())
    assert RunManifest.from_json(data).selection == SelectionRequest()  # every key null
    chosen = SelectionRequest(("t1", "t3"), "smoke", "1/2", 5)
    written = json.loads(json.dumps(RunManifest(run_id="r", selection=chosen).to_json()))
    assert written["selection"] == {"ids": ["t1", "t3"], "subset": "smoke", "shard": "1/2",
                                    "limit": 5} == chosen.options()
    assert RunManifest.from_json({**VERSION_1, "selection": written["selection"]}).selection \
        == chosen
    assert RunManifest.from_json({**VERSION_1, "selection": "all"}).selection is None


@pytest.mark.parametrize(("edit", "phrase"), [
    ({"isolation": {"mode": "docker"}}, "isolation: mode: Input should be"),
    ({"isolation": 5}, "isolation: Input should be an object"),
    ({"reruns": [5]}, "Input should be an object"),
    ({"merged_from": [{"path": "/a"}]}, "run_id: Field required"),
    ({"selection": {"ids": "t1", "limit": None}}, "ids: Input should be"),
    ({"selection": {"ids": None, "limit": "5"}}, "limit: Input should be"),
])
def test_a_hand_edited_record_in_run_json_is_one_phrase(edit: dict[str, Any],
                                                        phrase: str) -> None:
    with pytest.raises(ValueError) as refused:
        RunManifest.from_json({**VERSION_1, **edit})
    assert phrase in str(refused.value) and "\n" not in str(refused.value)


def test_every_manifest_written_reads_back_and_a_null_agent_is_one_of_them(
        tmp_path: Path) -> None:
    """What the writer may write, the reader takes: a manifest with its defaults (no agent
    recorded, as a run that stopped before choosing one) was written as ``"agent": null``
    and then refused by its own reader ("'agent' is NoneType, not str"). A wrong type still
    is refused."""
    folder = RunFolder(tmp_path)
    folder.write_manifest(RunManifest(run_id="r"))
    assert json.loads(folder.manifest_path.read_text())["agent"] is None
    back = folder.read_manifest()
    assert back is not None and back.agent is None and back.run_id == "r"
    with pytest.raises(ValueError, match="'agent' is int"):
        RunManifest.from_json({**VERSION_1, "agent": 3})

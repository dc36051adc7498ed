"""The typed run manifest: every version written so far reads, and what it reads writes back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spider2local.run.folder import RunFolder
from spider2local.run.manifest import MANIFEST_VERSION, RunManifest, SelectedTask, Session

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

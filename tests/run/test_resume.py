"""Resuming a run: settings that must match the manifest, and the union of selected tasks."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from spider2local.agents.noop import NoopAgent
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import Dataset
from spider2local.exceptions import UserError
from spider2local.report.summary import load_report
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest, SelectedTask
from spider2local.run.plan import RunOutcome, RunPlan, execute_run
from spider2local.run.progress import Progress
from spider2local.run.resume import check_resumable, differences, merged_tasks, must_match
from spider2local.run.selection import select_tasks
from spider2local.run.settings import RunSettings
from spider2local.suite.model import Suite
from tests.helpers import by_task, manifest_json

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the run's bookkeeping (tests/conftest.py)."""

M = RunManifest.from_json

BASE: dict[str, Any] = {"agent": "claude", "model": "m1", "suite": {"sha256": "s"},
                        "prompts_sha256": "p", "skills_sha256": "k",
                        "settings": {"timeout": 60.0, "max_turns": 10, "jobs": 1}}


@pytest.mark.parametrize("change, name", [
    ({"agent": "noop"}, "agent"), ({"model": "m2"}, "model"),
    ({"suite": {"sha256": "t"}}, "suite file hash"), ({"prompts_sha256": "q"}, "prompts hash"),
    ({"skills_sha256": "j"}, "skills hash"),
    ({"settings": {**BASE["settings"], "timeout": 90.0}}, "timeout"),
    ({"settings": {**BASE["settings"], "max_turns": 11}}, "max_turns"),
    ({"settings": {**BASE["settings"], "isolation": "namespace"}}, "isolation"),
    ({"settings": {**BASE["settings"], "thinking_budget": 4096}}, "thinking_budget"),
    ({"settings": {**BASE["settings"], "templates": True}}, "templates"),
    # the verifier's fix rounds and the spending cap change what the agent does: remembered
    # when left out, and so compared when given (a resume with --verify-rounds 0 was accepted)
    ({"settings": {**BASE["settings"], "verify_rounds": 0}}, "verify_rounds"),
    ({"settings": {**BASE["settings"], "max_budget_usd": 0.5}}, "max_budget_usd"),
])
def test_each_setting_that_must_match_is_compared(tmp_path: Path, change: dict[str, Any],
                                                  name: str) -> None:
    current = {**BASE, **change}
    # noop reads no kit, so the kit's hashes no longer bear on the run: they differ too
    expected = [name, "prompts hash", "skills hash"] if change.get("agent") == "noop" else [name]
    assert [d.split(" (")[0].rsplit(" ", 1)[0]
            for d in differences(M(BASE), M(current))] == expected
    with pytest.raises(UserError, match=f"cannot be resumed with different settings: {name}"):
        check_resumable(M(BASE), M(current), RunFolder.at(tmp_path, "r"))
    assert name in [n for n, _ in must_match()]


def test_same_settings_or_a_new_run_are_fine(tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path, "r")
    check_resumable(None, M(BASE), folder)
    check_resumable(M(BASE), M({**BASE, "settings": {**BASE["settings"], "jobs": 4}}), folder)


def test_isolation_compared_is_the_mode_used_and_old_runs_had_none(tmp_path: Path) -> None:
    """A run made (or resumed) without isolation cannot be continued in a sandbox, nor the
    reverse; manifests from before isolation was recorded count as ``none``."""
    folder = RunFolder.at(tmp_path, "r")
    sandboxed = {**BASE, "settings": {**BASE["settings"], "isolation": "namespace"}}
    unisolated = {**BASE, "settings": {**BASE["settings"], "isolation": "none"}}
    check_resumable(M(BASE), M(unisolated), folder)
    check_resumable(M(sandboxed), M(sandboxed), folder)
    with pytest.raises(UserError, match="isolation none \\(run made with namespace\\)"):
        check_resumable(M(sandboxed), M(unisolated), folder)


def test_a_reference_run_made_before_isolation_was_recorded_still_resumes(
        tmp_path: Path) -> None:
    """Agents that run no untrusted code record "not-needed"; a manifest without the field
    ran without a sandbox too, so the two are the same experiment."""
    folder = RunFolder.at(tmp_path, "r")
    not_needed = {**BASE, "settings": {**BASE["settings"], "isolation": "not-needed"}}
    check_resumable(M(BASE), M(not_needed), folder)
    check_resumable(M(not_needed), M(BASE), folder)


def test_merged_tasks_keep_earlier_selections() -> None:
    previous = M({"tasks": [{"id": "b", "tables": 1}, {"id": "a", "tables": 2}]})
    merged = merged_tasks(previous, [SelectedTask("c", tables=3), SelectedTask("a", tables=5)])
    assert merged == (SelectedTask("a", tables=5), SelectedTask("b", tables=1),
                      SelectedTask("c", tables=3))
    assert merged_tasks(None, [SelectedTask("x")]) == (SelectedTask("x"),)


@pytest.fixture
def data(tiny_dataset: Callable[..., Path], tmp_path: Path) -> Dataset:
    return load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1", "t2")))


def execute(data: Dataset, folder: RunFolder, ids: list[str], sha: str = "sha",
            **kw: Any) -> RunOutcome:
    plan = RunPlan(folder, select_tasks(data, ids), RunSettings(**{"agent": "noop", **kw}),
                   NoopAgent,
                   data.suite.path, sha, data.root)
    return anyio.run(execute_run, plan, Progress(io.StringIO(), live=False))


@pytest.mark.process
def test_resume_with_other_settings_is_refused_before_anything_runs(data: Dataset,
                                                                    tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    execute(data, folder, ["t1"], timeout=30.0)
    before = folder.read_manifest()
    with pytest.raises(UserError) as info:
        execute(data, folder, ["t1", "t2"], timeout=45.0, max_turns=7)
    text = str(info.value)
    assert "timeout 45.0 (run made with 30.0); max_turns 7 (run made with 300)" in text
    assert "another --run-id" in text
    with pytest.raises(UserError, match="suite file hash other"):
        execute(data, folder, ["t2"], sha="other", timeout=30.0)
    assert folder.read_manifest() == before and sorted(by_task(folder.trial_results())) == ["t1"]


@pytest.mark.process
def test_resume_keeps_every_selected_task_in_the_manifest(data: Dataset,
                                                          tmp_path: Path) -> None:
    folder = RunFolder.at(tmp_path / "runs", "r")
    execute(data, folder, ["t1"])
    second = execute(data, folder, ["t2"])
    assert list(by_task(second.ran)) == ["t2"]
    manifest = manifest_json(folder)
    assert manifest is not None and [t["id"] for t in manifest["tasks"]] == ["t1", "t2"]
    assert [r.task_id for r in load_report(folder).rows] == ["t1", "t2"]


@pytest.mark.process
def test_a_run_made_with_another_kit_is_not_resumed_with_the_bundled_one(
        data: Dataset, tmp_path: Path) -> None:
    """``--prompts DIR`` / ``--skills DIR``: their hashes go into run.json in place of the
    bundled folders', so an A/B of two kits cannot be mixed in one run folder."""
    from spider2local.resources import prompts_dir, skills_dir
    from spider2local.run.manifest import tree_sha256

    kit = tmp_path / "kit"
    shutil.copytree(prompts_dir(), kit / "prompts")
    shutil.copytree(skills_dir(), kit / "skills")
    (kit / "prompts" / "agent.md").write_text("Another kit.\n")
    folder = RunFolder.at(tmp_path / "runs", "r")
    # recorded as claude's run (the noop agent's code runs): an agent that reads the kit
    claude = {"agent": "claude"}
    execute(data, folder, ["t1"], prompts_dir=kit / "prompts", skills_dir=kit / "skills",
            **claude)
    manifest = manifest_json(folder)
    assert manifest is not None
    assert manifest["prompts_sha256"] == tree_sha256(kit / "prompts") != tree_sha256(prompts_dir())
    assert manifest["skills_sha256"] == tree_sha256(skills_dir())  # same content, same hash
    assert manifest["settings"]["prompts_dir"] == str(kit / "prompts")
    with pytest.raises(UserError, match="prompts hash"):
        execute(data, folder, ["t1", "t2"], **claude)
    execute(data, folder, ["t2"], prompts_dir=kit / "prompts", skills_dir=kit / "skills",
            **claude)
    assert sorted(by_task(folder.trial_results())) == ["t1", "t2"]


@pytest.mark.process
def test_an_agent_that_reads_no_kit_resumes_whatever_the_kit(data: Dataset,
                                                            tmp_path: Path) -> None:
    """The noop and reference agents read neither prompts nor skills: a run of theirs made
    before a prompt was edited (or with another --prompts) still resumes and merges."""
    kit = tmp_path / "prompts"
    kit.mkdir()
    (kit / "agent.md").write_text("Another kit.\n")
    folder = RunFolder.at(tmp_path / "runs", "r")
    execute(data, folder, ["t1"], prompts_dir=kit)
    execute(data, folder, ["t2"])
    assert sorted(by_task(folder.trial_results())) == ["t1", "t2"]


def test_a_resume_without_options_takes_the_kit_the_run_was_made_with(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    """``run --run-id X`` alone: a run made with ``--prompts DIR --templates`` and a thinking
    budget resumes with them instead of being refused for a different kit."""
    from spider2local.resources import prompts_dir
    from spider2local.run.plan import plan_run

    data = load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1", "t2")))
    kit = tmp_path / "kit"
    shutil.copytree(prompts_dir(), kit)
    first = plan_run(data.suite, data, ids=["t1"], agent="noop", runs_dir=tmp_path / "runs",
                     run_id="k", prompts_dir=kit, templates=True, thinking_budget=2048,
                     verify_rounds=1)
    first.folder.create()
    first.folder.write_manifest({"agent": "noop", "tasks": [{"id": "t1"}],
                                 "settings": first.settings.to_json()})
    again = plan_run(data.suite, data, runs_dir=tmp_path / "runs", run_id="k")
    assert again.settings.prompts_dir == kit.resolve()
    assert (again.settings.templates, again.settings.thinking_budget,
            again.settings.verify_rounds) == (True, 2048, 1)


def test_remembered_options_come_from_the_manifest() -> None:
    from spider2local.run.resume import remembered

    manifest = {**BASE, "agent": "replay", "agent_options": {"replay_dir": "/r"},
                "tasks": [{"id": "b"}, {"id": "a"}],
                "selection": {"ids": None, "subset": "smoke", "shard": "1/2", "limit": None},
                "settings": {**BASE["settings"], "isolation": "not-needed", "keep_db": True}}
    got = remembered(M(manifest))
    # the union of what the run selected, whatever request chose it first
    assert (got["ids"], got["subset"], got["shard"]) == (["a", "b"], None, None)
    assert got["replay_dir"] == "/r" and got["agent"] == "replay" and got["keep_db"] is True
    assert got["isolation"] is None and got["timeout"] == 60.0 and got["jobs"] == 1
    empty = remembered(M({**manifest, "tasks": []}))  # an empty shard stays empty
    assert (empty["ids"], empty["subset"], empty["shard"]) == (None, "smoke", "1/2")
    sandboxed = {**manifest, "settings": {**BASE["settings"], "isolation": "namespace"}}
    assert remembered(M(sandboxed))["isolation"] == "namespace"
    assert remembered(None) == {}


def test_plan_takes_the_replay_dir_and_selection_the_run_recorded(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    import json

    from spider2local.run.plan import plan_run

    data = load_dataset(Suite(tmp_path / "tasks.toml", tiny_dataset("t1", "t2", "t3")))
    replay = tmp_path / "replay"
    replay.mkdir()
    first = plan_run(data.suite, data, agent="replay", replay_dir=replay, shard="2/2",
                     runs_dir=tmp_path / "runs", run_id="r", timeout=5.0)
    assert first.request is not None
    assert first.request.options() == {"ids": None, "subset": None, "shard": "2/2",
                                       "limit": None}
    first.folder.create()
    first.folder.write_manifest({"agent": "replay", "tasks": [{"id": "t2"}],
                                 "agent_options": {"replay_dir": str(replay)},
                                 "settings": first.settings.to_json()})
    again = plan_run(data.suite, data, runs_dir=tmp_path / "runs", run_id="r")
    assert [t.id for t in again.selection.tasks] == ["t2"]
    assert again.settings.agent == "replay" and again.settings.timeout == 5.0
    assert again.agent_options == {"replay_dir": replay.resolve()}
    assert json.dumps({k: str(v) for k, v in again.agent_options.items()})


def _file_hashes(folder: Path) -> dict[str, str]:
    import hashlib

    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


@pytest.mark.process
def test_resuming_a_finished_sample_run_over_changed_gold_is_refused_and_touches_nothing(
        tmp_path: Path) -> None:
    """The user's path end to end: a finished run of the sample suite, its gold edited, then
    ``run --run-id`` again: one line naming the gold file and the fix, exit 2, and the run
    folder byte for byte as it was (it said "0 task(s) to run" and rewrote run.json)."""
    import os
    import subprocess
    import sys

    import duckdb

    env = {**os.environ, "PYTHONWARNINGS": "ignore", "SPIDER2LOCAL_CACHE": str(tmp_path / "c")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "spider2local", "--dataset", "sample",
                               *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600, check=False)

    first = cli("run", "--agent", "noop", "--runs-dir", "runs", "--run-id", "r1", "bakery001")
    assert first.returncode == 0, first.stderr
    [gold] = (tmp_path / "c").glob("sample-*/evaluation_suite/gold/bakery001/*.duckdb")
    con = duckdb.connect(str(gold))  # the gold's bytes change (a table more)
    con.execute("CREATE TABLE extra AS SELECT 1 AS x")
    con.close()
    folder = tmp_path / "runs" / "r1"
    before = _file_hashes(folder)
    assert "run.json" in before and any(k.endswith("result.json") for k in before)
    resumed = cli("run", "--runs-dir", "runs", "--run-id", "r1")
    assert resumed.returncode == 2, (resumed.stdout, resumed.stderr)
    lines = resumed.stderr.strip().splitlines()
    assert len(lines) == 1, resumed.stderr
    assert "cannot be resumed: changed since it started: bakery001: gold file" in lines[0]
    assert str(gold) in lines[0] and "start a new run with another --run-id" in lines[0]
    assert "task(s) to run" not in resumed.stdout + resumed.stderr
    assert _file_hashes(folder) == before

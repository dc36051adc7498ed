"""``spider2local regrade`` as a user runs it, on the session's reference run of the sample (real
dbt; tests/conftest.py) and on the two real Spider2-DBT tasks (skipped when absent)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from spider2local.dataset.sample import build as sample_build
from tests.cli.test_run_command import SAMPLE_IDS, cli
from tests.helpers import ReferenceRun


def results_text(run_dir: Path) -> dict[str, str]:
    return {p.relative_to(run_dir).as_posix(): p.read_text()
            for p in sorted(run_dir.rglob("result.json"))}


@pytest.mark.slow
def test_regrade_the_reference_run_then_after_a_gold_fix(reference_run: ReferenceRun,
                                                         tmp_path: Path) -> None:
    """The run's whole databases are removed first: regrade needs only graded.duckdb."""
    assert reference_run.outcome.returncode == 0, reference_run.outcome.stderr
    run_dir = tmp_path / "runs" / "ref"
    shutil.copytree(reference_run.run_dir, run_dir)
    for tid in SAMPLE_IDS:
        (run_dir / tid / "result.duckdb").unlink()
        kept = run_dir / tid / "graded.duckdb"
        assert 0 < kept.stat().st_size < 1_000_000, tid  # the sample's: well under 1 MB
    before = results_text(run_dir)
    same = cli("regrade", "latest", "--runs-dir", "runs", cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert same.stdout == "regrade: 0 trials changed (4 trials regraded)\n"
    assert same.stderr == ""
    # Today's dataset corrects a gold value of fleet001: its trial flips, the others do not.
    fixed = tmp_path / "fixed"
    shutil.copytree(sample_build.ensure_built(), fixed)
    with duckdb.connect(str(fixed / "evaluation_suite" / "gold" / "fleet001" / "fleet.duckdb")
                        ) as con:
        con.execute("UPDATE vehicle_performance SET total_km = total_km + 100")
    flip = cli("regrade", str(run_dir), "--dataset", str(fixed), cwd=tmp_path)
    assert flip.returncode == 0, flip.stderr
    assert flip.stdout.splitlines() == [
        "regrade: 1 trial changed (of 4 regraded):",
        "  fleet001: passed -> failed (tables 1/1 -> 0/1; vehicle_performance fails now)",
        "regrade: nothing written (--write rewrites the changed trials' results)"]
    assert flip.stderr.startswith("note: changed since the run: fleet001: gold file ")
    assert results_text(run_dir) == before
    written = cli("regrade", str(run_dir), "--dataset", str(fixed), "--write", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert written.stdout.splitlines()[-1] == "regrade: 1 result.json rewritten"
    after = results_text(run_dir)
    assert [k for k in after if after[k] != before[k]] == ["fleet001/result.json"]
    assert json.loads(after["fleet001/result.json"])["status"] == "failed"
    manifest = json.loads((run_dir / "run.json").read_text())
    assert "accepted_changes_at" in manifest["integrity"]  # today's files are the run's now
    assert "passed 3/4" in cli("report", str(run_dir), cwd=tmp_path).stdout
    # Someone edits a kept file: refused by name, never scored, exit 1.
    gym = run_dir / "gym001" / "graded.duckdb"
    with duckdb.connect(str(gym)) as con:
        con.execute("DELETE FROM membership_status")
    tampered = cli("regrade", str(run_dir), "--dataset", str(fixed), cwd=tmp_path)
    assert tampered.returncode == 1 and "Traceback" not in tampered.stderr, tampered.stderr
    assert "gym001: refused: graded.duckdb does not match the sha256 its result.json " \
           "recorded" in tampered.stderr
    assert "changed since the run; not scored" in tampered.stderr
    assert tampered.stdout.startswith("regrade: 0 trials changed (3 trials regraded)")


@pytest.mark.slow  # two CLI runs of one task with the noop agent
def test_no_keep_graded_keeps_none_and_regrade_says_so(tmp_path: Path) -> None:
    proc = cli("run", "bakery001", "--agent", "noop", "--runs-dir", "runs", "--run-id", "off",
               "--no-keep-graded", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    task = tmp_path / "runs" / "off" / "bakery001"
    assert not (task / "graded.duckdb").exists()
    assert json.loads((task / "result.json").read_text())["graded_sha256"] is None
    assert json.loads((tmp_path / "runs" / "off" / "run.json").read_text())[
        "settings"]["keep_graded"] is False
    regrade = cli("regrade", "off", "--runs-dir", "runs", cwd=tmp_path)
    assert regrade.returncode == 1, regrade.stderr
    assert "bakery001: not regradable: no graded tables kept" in regrade.stderr
    assert "nothing regraded" in regrade.stderr
    missing = cli("regrade", "nope", "--runs-dir", "runs", cwd=tmp_path)
    assert missing.returncode == 2 and "no run 'nope'" in missing.stderr


@pytest.mark.slow  # the two real tasks with the noop agent (their start databases pass)
def test_real_tasks_keep_small_graded_files_that_regrade_the_same(shared_dataset: Path,
                                                                   tmp_path: Path) -> None:
    proc = cli("run", "--dataset", str(shared_dataset), "--agent", "noop", "--runs-dir",
               "runs", "--run-id", "real", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for tid, whole in (("mrr001", "mrr"), ("playbook001", "playbook")):
        kept = tmp_path / "runs" / "real" / tid / "graded.duckdb"
        start = shared_dataset / "examples" / tid / f"{whole}.duckdb"
        assert kept.stat().st_size < start.stat().st_size / 8, tid  # 60-110 KB of 1-1.8 MB
    regrade = cli("regrade", "real", "--runs-dir", "runs", "--dataset", str(shared_dataset),
                  cwd=tmp_path)
    assert regrade.returncode == 0, regrade.stderr
    assert regrade.stdout == "regrade: 0 trials changed (2 trials regraded)\n"

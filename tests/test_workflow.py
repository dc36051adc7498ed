"""``.github/workflows/spider2-dbt.yml``: actionlint accepts it, and its spider2local steps,
parsed out of the YAML and run locally in the workflow's order on the sample suite (plan, two
shards, merge, report), give what its later steps and jobs expect."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from spider2local.report.summary import load_report
from spider2local.run.folder import RunFolder

pytestmark = pytest.mark.in_process_readers
"""Runs here score in-process: their subject is the workflow's steps (tests/conftest.py)."""

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "spider2-dbt.yml"
LOCAL_ONLY_SKIPPED = {"install", "dataset-build", "userns"}
"""Steps the test does not run: installing (the test's own environment has spider2local),
building the real dataset from upstream's zips (the test runs the sample), and the sysctl
(root on a runner VM; the reference agent needs no sandbox)."""


def _actionlint() -> str:
    found = shutil.which("actionlint", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                             f"{os.environ.get('PATH', '')}")
    if found is None:
        pytest.skip("actionlint not installed (pip install -e '.[dev]' brings it)")
    return found


@pytest.mark.process
def test_the_workflow_passes_actionlint() -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    proc = subprocess.run([_actionlint(), str(WORKFLOW)], capture_output=True, text=True,
                          env=env, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr


EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def _resolve(text: str, values: dict[str, str]) -> str:
    """Replace each ``${{ expr }}`` by its local value; an expression the test does not know
    fails it, so a workflow that grows a new one must be taught here."""
    def one(match: re.Match[str]) -> str:
        expr = match[1]
        assert expr in values, f"the test has no local value for ${{{{ {expr} }}}}"
        return values[expr]

    return EXPRESSION.sub(one, text)


def _steps(workflow: dict[str, Any], job: str) -> list[dict[str, Any]]:
    return [s for s in workflow["jobs"][job]["steps"]
            if "run" in s and s.get("id") not in LOCAL_ONLY_SKIPPED]


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _run_step(step: dict[str, Any], cwd: Path, values: dict[str, str],
              env: dict[str, str]) -> None:
    """One ``run:`` step as GitHub runs it (bash -eo pipefail), with its ``env:`` resolved."""
    step_env = {k: _resolve(str(v), values) for k, v in (step.get("env") or {}).items()}
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c",
                           step["run"]], cwd=cwd, env={**env, **step_env},
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, f"step {step.get('id')}: {proc.stdout}\n{proc.stderr}"


def _verdicts(run_dir: Path) -> tuple[Any, dict[str, tuple[str, str, int, int]]]:
    report = load_report(RunFolder(run_dir))
    rows = {r.task_id: (str(r.status), str(r.verdict), r.tables_passed, r.tables_total)
            for r in report.rows}
    return report.rates, rows


def test_only_the_sysctl_needs_root_and_the_agent_is_sandboxed_as_the_runner_user() -> None:
    """GitHub's jobs run as the ``runner`` user: the one privileged step lifts AppArmor's
    user-namespace restriction, and nothing else may use sudo (the sandbox works for a
    non-root user from a ``pip install .``: tests/test_install.py). The shard's run asks
    for ``--isolation namespace``, so a sandbox that does not work stops it instead of
    running agents unsealed."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    privileged = {(job, step.get("id")) for job, spec in workflow["jobs"].items()
                  for step in spec["steps"] if re.search(r"\bsudo\b", step.get("run", ""))}
    assert privileged == {("shard", "userns")}
    userns = next(s for s in workflow["jobs"]["shard"]["steps"] if s.get("id") == "userns")
    assert userns["run"].count("sudo") == 1 and "apparmor_restrict_unprivileged_userns=0" \
        in userns["run"]
    run = next(s for s in workflow["jobs"]["shard"]["steps"] if s.get("id") == "run")
    assert "--isolation namespace" in run["run"]
    installs = [s["run"] for spec in workflow["jobs"].values() for s in spec["steps"]
                if s.get("id") == "install"]
    assert installs and all(i.strip() == "pip install ." for i in installs)  # a wheel's layout


@pytest.mark.slow
def test_the_workflows_commands_run_locally_in_order(tmp_path: Path) -> None:
    """With the noop agent, a choice of the workflow's own: the subject is its plan, shards,
    artifacts and report; the sample's reference build (4 s of CPU a task) adds nothing."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "DATASET": "sample",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("CLAUDE_CODE_OAUTH_TOKEN", None)
    values = {"inputs.shards": "2", "inputs.subset": "all", "inputs.agent": "noop",
              "inputs.model": "unused", "inputs.trials": "1", "github.run_id": "42",
              "github.run_attempt": "1",
              "secrets.ANTHROPIC_API_KEY": ""}

    # plan: the matrix and the run id, through $GITHUB_OUTPUT
    plan = tmp_path / "plan"
    plan.mkdir()
    out = plan / "github_output"
    for step in _steps(workflow, "plan"):
        _run_step(step, plan, values, {**env, "GITHUB_OUTPUT": str(out)})
    outputs = _outputs(out)
    matrix = json.loads(outputs["matrix"])
    assert [row["shard"] for row in matrix["include"]] == ["1/2", "2/2"]
    assert {row["trials"] for row in matrix["include"]} == {1}
    values["needs.plan.outputs.run-id"] = run_id = outputs["run-id"]
    assert run_id == "42-1"

    # shard: one job per matrix row, each in its own checkout; uploads runs/
    upload = next(s for s in workflow["jobs"]["shard"]["steps"]
                  if "upload-artifact" in s.get("uses", ""))
    download = next(s for s in workflow["jobs"]["report"]["steps"]
                    if "download-artifact" in s.get("uses", ""))
    shards = tmp_path / "report" / download["with"]["path"]
    for index, row in enumerate(matrix["include"]):
        job = tmp_path / f"shard-{index}"
        job.mkdir()
        values.update({"matrix.shard": row["shard"], "matrix.trials": str(row["trials"]),
                       "strategy.job-index": str(index)})
        for step in _steps(workflow, "shard"):
            _run_step(step, job, values, env)
        run_dir = job / upload["with"]["path"] / run_id
        assert sorted(p.parent.name for p in run_dir.glob("*/result.json")) == row["ids"]
        assert not (run_dir / ".lock").exists()  # the run ended: nothing looks in use
        name = _resolve(upload["with"]["name"], values)
        assert re.fullmatch(download["with"]["pattern"].replace("*", ".*"), name)
        shutil.copytree(job / upload["with"]["path"], shards / name)  # download-artifact

    # report: merge, then the markdown summary, JUnit and HTML
    report = tmp_path / "report"
    summary = report / "step_summary.md"
    for step in _steps(workflow, "report"):
        _run_step(step, report, values, {**env, "GITHUB_STEP_SUMMARY": str(summary)})
    merged = report / "runs" / run_id
    # the merged run is the unsharded run: same verdicts, same headline
    whole = subprocess.run([sys.executable, "-m", "spider2local", "--dataset", "sample", "run",
                            "--agent", "noop", "--runs-dir", "whole", "--run-id", run_id,
                            "--keep-db"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, check=False, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert _verdicts(merged) == _verdicts(tmp_path / "whole" / run_id)
    assert {row[0] for row in _verdicts(merged)[1].values()} == {"failed"}
    assert summary.is_file() and summary.read_text().strip()
    for artifact in ("report/junit.xml", "report/report.html"):
        assert (report / artifact).is_file(), artifact

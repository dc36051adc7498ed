"""Every file and folder name of a run folder, in one place.

Layout::

    <runs-dir>/<run-id>/run.json                  MANIFEST: versions, hashes, settings, times
    <runs-dir>/<run-id>/.lock                     LOCK: one invocation at a time; removed after
    <runs-dir>/<run-id>/<task>/result.json        RESULT: written atomically, last ("finished")
    <runs-dir>/<run-id>/<task>/error.txt          ERROR_TRACEBACK: an unexpected exception, whole
    <runs-dir>/<run-id>/<task>/transcript.jsonl   TRANSCRIPT: every agent message as it arrived
    <runs-dir>/<run-id>/<task>/api.jsonl          API_RECORD: every model API exchange (capped)
    <runs-dir>/<run-id>/<task>/api.replay.jsonl   API_REPLAY: every exchange in full, for a replay
    <runs-dir>/<run-id>/<task>/queries.jsonl      QUERIES: every query of the agent's DB tools
    <runs-dir>/<run-id>/<task>/workspace.json     WORKSPACE_RECORD: where the workspace was
    <runs-dir>/<run-id>/<task>/scan.json          SCAN: the project scan the agent was given
    <runs-dir>/<run-id>/<task>/reference_snapshot.json  START_SNAPSHOT: the start database
    <runs-dir>/<run-id>/<task>/dbt/               DBT_LOGS: dbt logs and run_results
    <runs-dir>/<run-id>/<task>/dbt/NNN-<command>.run_results.json  each agent dbt call's results
    <runs-dir>/<run-id>/<task>/dbt/dbt.log        DBT_LOG: dbt's own log (JSON events)
    <runs-dir>/<run-id>/<task>/dbt/dbt.txt        DBT_TEXT: the same log as plain text, no colours
    <runs-dir>/<run-id>/<task>/project/           PROJECT_FILES: the SQL, YML, docs left
    <runs-dir>/<run-id>/<task>/start_project/     START_PROJECT: the same files at the start
    <runs-dir>/<run-id>/<task>/result.duckdb      RESULT_DB: with --keep-db
    <runs-dir>/<run-id>/<task>/graded.duckdb      GRADED_DB: the graded tables as the agent left
                                                  them (unless --no-keep-graded; run/graded.py)
    <runs-dir>/<run-id>/report.html               REPORT_HTML: the HTML report, rebuilt by `report`
    <runs-dir>/<run-id>/interrupted.jsonl         CUT_ATTEMPTS: what each attempt cut by an
                                                  interrupt spent (run/cut.py)
    <runs-dir>/<run-id>/_trials/<k>/<task>/...    TRIALS: trial k >= 2 of the task, the same files
    <runs-dir>/<run-id>/_history/<n>/...          HISTORY: trials discarded by `run --rerun`,
                                                  each set in the layout above (never results)

A task's trial 1 is ``<task>/`` itself, so a run folder made before trials existed (one
``<task>/result.json`` per task) is a valid 1-trial run as it is: nothing is migrated. Trials
from 2 on live under ``_trials/<k>/``: a task id never starts with ``_``
(:data:`spider2local.safepath.PLAIN_NAME`), so neither reserved folder can be a task's, and
resetting trial 1 (deleting ``<task>/``) cannot touch another trial.

In the workspace, the dbt shim keeps each dbt call's run_results in the project's
``.spider2local/DBT_RUNS/NNN-<command>.json``; they are collected into ``<task>/dbt/``.

Workspaces live elsewhere (a temporary folder) and are named ``WORKSPACE_PREFIX<task>-...``;
nothing whose name lacks that prefix is ever deleted as a workspace.
"""

from __future__ import annotations

MANIFEST = "run.json"
LOCK = ".lock"
MERGING = ".merging"
"""In a ``merge --into`` folder while it is written (removed once run.json is): a folder that
still holds it, with nobody holding its lock, was left by a merge that was killed."""
RESULT = "result.json"
ERROR_TRACEBACK = "error.txt"
TRANSCRIPT = "transcript.jsonl"
API_RECORD = "api.jsonl"
API_REPLAY = "api.replay.jsonl"
QUERIES = "queries.jsonl"
WORKSPACE_RECORD = "workspace.json"
SCAN = "scan.json"
START_SNAPSHOT = "reference_snapshot.json"
DBT_LOGS = "dbt"
DBT_LOG = "dbt.log"
DBT_TEXT = "dbt.txt"
DBT_RUNS = "dbt-runs"
RUN_RESULTS_SUFFIX = ".run_results.json"
PROJECT_FILES = "project"
START_PROJECT = "start_project"
RESULT_DB = "result.duckdb"
GRADED_DB = "graded.duckdb"
SEQUENTIAL_RECORD = "sequential.json"
"""<run>/sequential.json: a ``--until-decided`` run's looks and decision
(:mod:`spider2local.sequential.record`)."""
INSPECT_LOGS = "inspect"
"""<run>/inspect/: where ``export --format inspect`` writes by default."""
REPORT_HTML = "report.html"
CUT_ATTEMPTS = "interrupted.jsonl"
AGENT_STDOUT = "agent.stdout"
AGENT_STDERR = "agent.stderr"
AGENT_EXIT = "agent.json"
AGENT_TRAJECTORY = "agent.trajectory.json"
"""A command agent's output, exit record and (mini-swe-agent) trajectory, in its task folder."""
TRIALS = "_trials"
HISTORY = "_history"
WORKSPACE_PREFIX = "spider2local-"

"""Upstream's dataset layout, named once: where Spider2-DBT's setup leaves each file.

``<root>/examples/<task>/`` holds each task's dbt project (its start database inside) and
``examples/spider2-dbt.jsonl`` the task list; ``<root>/evaluation_suite/gold/<task>/`` holds
each gold database and ``evaluation_suite/gold/spider2_eval.jsonl`` the evaluation records.
Loader, installer, sample builder, workspace (what is never copied), detection (names an agent
must not mention) and reports all read these names here: a second spelling would let one of
them drift from the others (the detection of a gold path, say).
"""

from __future__ import annotations

from pathlib import Path

EXAMPLES = "examples"
"""The folder of task projects (and of the task list)."""
GOLD_FOLDER = "evaluation_suite"
"""The folder of everything the scorer reads and the agent must never see."""
GOLD_DIR = Path(GOLD_FOLDER) / "gold"
"""The folder of gold databases, one sub-folder per task, and of the evaluation file."""
TASKS_FILE_NAME = "spider2-dbt.jsonl"
EVAL_FILE_NAME = "spider2_eval.jsonl"
TASKS_FILE = Path(EXAMPLES) / TASKS_FILE_NAME
"""The task list, relative to the dataset root."""
EVAL_FILE = GOLD_DIR / EVAL_FILE_NAME
"""The evaluation records, relative to the dataset root."""


def project_dir(root: Path, task_id: str) -> Path:
    """A task's project folder (``task_id`` checked by the caller: a plain name)."""
    return root / EXAMPLES / task_id


def gold_dir(root: Path, task_id: str) -> Path:
    """A task's gold folder (``task_id`` checked by the caller: a plain name)."""
    return root / GOLD_DIR / task_id


def gold_folder(root: Path) -> Path:
    """The dataset's evaluation folder: never copied into a workspace, never shown."""
    return root / GOLD_FOLDER

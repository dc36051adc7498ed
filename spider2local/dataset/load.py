"""Load a Spider2-DBT dataset in upstream's layout into typed task specs.

Layout (as upstream's setup script leaves it)::

    <root>/examples/spider2-dbt.jsonl               one task per line
    <root>/examples/<id>/                           the unfinished dbt project + start database
    <root>/evaluation_suite/gold/spider2_eval.jsonl  duckdb_match parameters per task
    <root>/evaluation_suite/gold/<id>/<gold file>    the gold database
    <root>/solutions/<id>/                          (ours, optional) a reference solution

The real dataset has defects (missing gold, misnamed gold files, packages that need the network),
so a problem with one task never aborts loading: the task is marked not runnable with the reason
(a :class:`~spider2local.dataset.problems.Problem`: its kind for code, its message for people),
and problems with the files as a whole become warnings. Only a missing root or task list raises.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spider2local.core import upstream
from spider2local.dataset.problems import Problem, ProblemKind
from spider2local.dataset.task import EVAL_FILE, TASKS_FILE, Dataset, Gold, TaskSpec
from spider2local.db.header import duckdb_file_problem
from spider2local.dbtproject import files as projectfiles
from spider2local.dbtproject import packages
from spider2local.evaluation.params import EvalConfigError, EvalParams, parse_eval
from spider2local.exceptions import DatasetError
from spider2local.safepath import NAME_FIX, UnsafePath, child, links_outside, name_problem
from spider2local.suite.model import SAMPLE, Suite


def resolve_root(suite: Suite) -> Path:
    """The dataset folder: the suite's path, or the sample suite built into the cache."""
    if suite.dataset == SAMPLE:
        from spider2local.dataset.sample import ensure_built

        return ensure_built()
    return Path(suite.dataset)


def load_dataset(suite: Suite) -> Dataset:
    """Read the dataset named by ``suite`` and check every task (see module docstring)."""
    root = resolve_root(suite)
    if not root.is_dir():
        raise DatasetError("dataset root not found", path=root,
                           fix="pass --dataset with the spider2-dbt folder of a Spider2 checkout")
    tasks_file = root / TASKS_FILE
    if not tasks_file.is_file():
        raise DatasetError(f"no {TASKS_FILE} here", path=root,
                           fix="point --dataset at the spider2-dbt folder (it holds examples/)")
    warnings: list[str] = []
    entries = list(_read_jsonl(tasks_file, warnings))
    evals = read_evals(root / EVAL_FILE, warnings)
    specs: list[TaskSpec] = []
    seen: set[str] = set()
    for line_no, entry in entries:
        spec = _task_from_entry(root, suite, tasks_file, line_no, entry, evals, seen)
        if spec is not None:
            specs.append(spec)
    task_ids = {s.id for s in specs}
    warnings += [f"{root / EVAL_FILE}: {tid} has an evaluation but is not in {TASKS_FILE}"
                 for tid in evals if tid not in task_ids]
    return Dataset(root, suite, tuple(specs), tuple(warnings))


def _task_from_entry(root: Path, suite: Suite, tasks_file: Path, line_no: int,
                     entry: dict[str, Any], evals: dict[str, Any],
                     seen: set[str]) -> TaskSpec | None:
    tid = entry.get("instance_id")
    if not isinstance(tid, str) or not tid:
        return None  # reported by _read_jsonl's caller below
    problems: list[Problem] = []
    if tid in seen:
        problems.append(Problem(ProblemKind.DUPLICATE,
                                f"duplicate id in {tasks_file.name} (line {line_no})"))
    seen.add(tid)
    instruction = entry.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        problems.append(Problem(ProblemKind.INSTRUCTION,
                                f"no instruction in {tasks_file.name} (line {line_no})"))
        instruction = ""
    project = upstream.project_dir(root, tid)  # the id is a plain name (checked by _read_jsonl)
    start_db = None
    if (outside := _outside(root / upstream.EXAMPLES, tid)) is not None:
        problems.append(Problem(ProblemKind.PROJECT, f"project folder {outside}"))
    elif not project.is_dir():
        problems.append(Problem(ProblemKind.PROJECT, f"project folder examples/{tid} missing"))
    elif links := links_outside(project):
        more = f" (+{len(links) - 1} more)" if len(links) > 1 else ""
        problems.append(Problem(ProblemKind.PROJECT,
                                f"symlink leads outside the task folder: examples/{tid}/"
                                f"{links[0]}{more} (replace it with the file it points at)"))
    else:
        start_db, start_problems = find_start_db(project)
        problems += start_problems
        problems += [Problem(ProblemKind.PACKAGE, p)
                     for p in (*projectfiles.package_file_problems(project),
                               *packages.missing_packages(project))]
    params, gold = _gold_for(root, tid, evals, problems)
    settings = suite.settings(tid)
    solution = settings.solution or (root / "solutions" / tid
                                     if _outside(root / "solutions", tid) is None else None)
    date, date_source = suite.run_date(tid)
    return TaskSpec(
        id=tid, instruction=instruction, project_dir=project, start_db=start_db, gold=gold,
        settings=settings, date=date, date_source=date_source,
        graded_tables=params.condition_tabs if params is not None else (),
        problems=tuple(problems),
        solution_dir=solution if solution is not None and solution.is_dir() else None,
    )


def gold_folder(root: Path, tid: str) -> Path:
    """Where upstream's setup puts task ``tid``'s gold database(s) (not checked to exist)."""
    return upstream.gold_dir(root, tid)


def _gold_for(root: Path, tid: str, evals: dict[str, Any],
              problems: list[Problem]) -> tuple[EvalParams | None, Gold | None]:
    """The parsed evaluation (kept for its table names even without gold) and the gold."""
    if tid not in evals:
        problems.append(Problem(ProblemKind.EVAL,
                                f"no evaluation config in {upstream.EVAL_FILE_NAME}"))
        return None, None
    try:
        params = parse_eval(evals[tid])
    except EvalConfigError as exc:
        problems.append(Problem(ProblemKind.EVAL, f"evaluation config: {exc.reason}"))
        return None, None
    gold_dir = gold_folder(root, tid)
    outside = _outside(gold_dir.parent, tid) or _outside(gold_dir, params.gold)
    if outside is not None:
        problems.append(Problem(ProblemKind.GOLD, f"gold file {outside}"))
        return params, None
    db = gold_dir / params.gold
    if not db.is_file():
        others = sorted(p.name for p in gold_dir.glob("*.duckdb")) if gold_dir.is_dir() else []
        found = f" (found {', '.join(others)} instead)" if others else ""
        problems.append(Problem(ProblemKind.GOLD,
                                f"gold file gold/{tid}/{params.gold} missing{found}"))
        return params, None
    problem = duckdb_file_problem(db)
    if problem:
        problems.append(Problem(ProblemKind.GOLD, f"gold database {problem}"))
        return params, None
    return params, Gold(db, params)


def _outside(parent: Path, name: str) -> str | None:
    """Why ``parent / name`` is refused (see :func:`spider2local.safepath.child`), else None:
    a per-task problem, so one task's symlink out of the dataset never stops the load."""
    try:
        child(parent, name)
    except UnsafePath as exc:
        return f"{name}: {exc.message}"
    return None


def find_start_db(project: Path) -> tuple[Path | None, list[Problem]]:
    """The DuckDB file the project's profile points at, checked to be a readable DuckDB file.

    Only a project without profiles.yml falls back to its lone ``*.duckdb``: when profiles.yml
    exists, dbt uses exactly what it says, so a broken one must be reported, not guessed around.
    """
    cfg, problem = projectfiles.project_config(project)
    if cfg is None:
        return None, [Problem(ProblemKind.PROJECT, problem or "dbt_project.yml unusable")]
    declared, problem = projectfiles.profile_target(project, cfg)
    if problem is not None:
        return None, [Problem(ProblemKind.PROFILE, problem)]
    candidates = [declared] if declared else sorted(project.glob("*.duckdb"))
    if not candidates:
        return None, [Problem(ProblemKind.START_DB, "start database missing (no profiles.yml "
                                                    "and no *.duckdb in the project)")]
    db = candidates[0]
    if not db.is_file():
        return None, [Problem(ProblemKind.START_DB,
                              f"start database {db.name} missing (profiles.yml points at it)")]
    problem = duckdb_file_problem(db)
    return (None, [Problem(ProblemKind.START_DB, f"start database {problem}")]) if problem \
        else (db, [])


def _read_jsonl(path: Path, warnings: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        # utf-8-sig: a byte-order mark (Windows editors write one) once made the first line
        # invalid JSON, and the first task vanished from `run` without a word.
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read: {exc}", path=path) from None
    for no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            warnings.append(f"{path}:{no}: not valid JSON ({exc.msg}); line skipped")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("instance_id"), str):
            warnings.append(f"{path}:{no}: no instance_id; line skipped")
            continue
        problem = name_problem(obj["instance_id"])
        if problem is not None:  # it would become a folder name: see spider2local.safepath
            warnings.append(f"{path}:{no}: instance_id {problem}; line skipped ({NAME_FIX})")
            continue
        yield no, obj


def read_evals(path: Path, warnings: list[str]) -> dict[str, Any]:
    """Map task id to its raw ``evaluation`` object (parsed per task by :func:`_gold_for`).
    The first record of an id wins, here and in the integrity guard that re-reads the file."""
    if not path.is_file():
        warnings.append(f"{path}: missing; no task can be scored")
        return {}
    evals: dict[str, Any] = {}
    for no, obj in _read_jsonl(path, warnings):
        tid = obj["instance_id"]
        if tid in evals:
            warnings.append(f"{path}:{no}: second evaluation for {tid}; the first one is used")
            continue
        evals[tid] = obj.get("evaluation")
    return evals


def dataset_fingerprint(root: Path) -> str | None:
    """One hash over the task list and the evaluation file: what makes two runs' verdicts
    comparable (``compare``, ``merge``). Paths differ between machines (CI shards, a laptop),
    these two files do not; the gold databases are fingerprinted per task by the integrity
    guard. ``None`` when a file cannot be read."""
    digest = hashlib.sha256()
    for name in (TASKS_FILE, EVAL_FILE):
        try:
            data = (root / name).read_bytes()
        except OSError:
            return None
        digest.update(str(name).encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()

"""Prompts and skills: filled from what the agent may know, never from the gold or the eval."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from spider2local.agents import prompts
from spider2local.dataset.load import load_dataset
from spider2local.dataset.task import TaskSpec
from spider2local.resources import prompts_dir, skills_dir
from spider2local.suite.model import Suite
from spider2local.workspace.model import Workspace
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace

SECRET_TABLE = "graded_secret_orders"


@pytest.mark.process
def test_system_prompt_holds_task_scan_and_database_but_nothing_graded(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", instruction="Build the orders model from raw orders.",
                        gold_tables={SECRET_TABLE: "SELECT 1 AS id"},
                        evaluation={"func": "duckdb_match", "parameters": {
                            "gold": "shop.duckdb", "condition_tabs": [SECRET_TABLE],
                            "condition_cols": [[0]], "ignore_orders": [True]}})
    task = load_dataset(Suite(path=Path("tasks.toml"), dataset=root)).tasks[0]
    assert task.gold is not None
    ws = prepare_workspace(task, artifacts=tmp_path / "artifacts", parent=tmp_path)
    try:
        text = prompts.system_prompt(task, ws)
        verifier = prompts.verifier_prompt(task, ws)
    finally:
        cleanup_workspace(ws)
    assert "- orders [missing]" in text  # the scan: the model to write
    assert "shop.duckdb" in text
    assert ws.problems == () and prompts.PACKAGES_OK in text
    # The verifier gets the same facts to compare against (task, date, start database).
    for prompt in (text, verifier):
        assert "Build the orders model from raw orders." in prompt
        assert task.date.isoformat() in prompt
        assert "main.raw_orders (table, 1 rows): id INTEGER" in prompt  # the database facts
        for secret in (SECRET_TABLE, str(task.gold.db), "evaluation_suite", "spider2_eval",
                       "condition_tabs"):
            assert secret not in prompt
        assert not re.search(r"\$[a-z_]+\b", prompt), "an unfilled placeholder"


@pytest.mark.process
def test_missing_packages_are_named_instead_of_claiming_all_is_installed(
        tiny_dataset: Callable[..., Path], tmp_path: Path) -> None:
    root = tiny_dataset("t1", packages_yml="packages:\n  - package: dbt-labs/dbt_utils\n")
    task = load_dataset(Suite(path=Path("tasks.toml"), dataset=root)).tasks[0]
    ws = prepare_workspace(task, artifacts=tmp_path / "artifacts", parent=tmp_path)
    try:
        text = prompts.system_prompt(task, ws)
    finally:
        cleanup_workspace(ws)
    assert ws.problems and all(f"  - {p}" in text for p in ws.problems)
    assert "dbt-labs/dbt_utils" in text
    assert prompts.PACKAGES_OK not in text


def test_setup_problems_sentence() -> None:
    assert prompts.render_setup_problems(()) == prompts.PACKAGES_OK
    text = prompts.render_setup_problems(("package x/y not in dbt_packages", "a.yml: bad"),
                                           shown=("a.yml: bad",))
    assert "  - package x/y not in dbt_packages" in text and "a.yml" not in text
    only_shown = prompts.render_setup_problems(("a.yml: bad",), shown=("a.yml: bad",))
    assert prompts.PACKAGES_OK not in only_shown and "problems" in only_shown


def test_verifier_and_follow_up_prompts() -> None:
    class Task:  # only the fields the verifier prompt may read
        instruction = "Build the revenue report."
        date = __import__("datetime").date(2024, 9, 15)

    ws = Workspace(root=Path("/nowhere"), project_dir=Path("/nowhere/p"),
                   database=Path("/nowhere/p/x.duckdb"), env={}, artifacts=Path("/nowhere/a"))
    verifier = prompts.verifier_prompt(Task(), ws)  # type: ignore[arg-type]
    assert "Build the revenue report." in verifier and "2024-09-15" in verifier
    assert "no snapshot available" in verifier
    assert "VERDICT: PASS" in verifier and "VERDICT: FAIL" in verifier
    assert "verifier" in prompts.verify_request()
    assert "- daily_revenue: 0 rows" in prompts.fix_request("- daily_revenue: 0 rows\n")


@pytest.mark.parametrize(("report", "verdict"), [
    ("- x: wrong\nVERDICT: FAIL", False),
    ("all good\n\nVERDICT: PASS\n", True),
    ("VERDICT: FAIL\nfixed later\nverdict: pass", True),
    ("no verdict here", None),
])
def test_parse_verdict(report: str, verdict: bool | None) -> None:
    assert prompts.parse_verdict(report) is verdict


def test_prompts_readme_documents_every_template() -> None:
    readme = (prompts_dir() / "README.md").read_text()
    for path in prompts_dir().glob("*.md"):
        if path.name != "README.md":
            assert f"`{path.name}`" in readme


def front_matter(path: Path) -> dict[str, str]:
    text = path.read_text()
    match = re.match(r"---\n(.*?)\n---\n", text, re.DOTALL)
    assert match, f"{path}: no YAML front matter"
    data = yaml.safe_load(match.group(1))
    assert isinstance(data, dict)
    return data


def test_skills_have_a_clear_trigger_and_concrete_content() -> None:
    skills = sorted(p for p in skills_dir().iterdir() if p.is_dir())
    assert len(skills) >= 5
    for folder in skills:
        meta = front_matter(folder / "SKILL.md")
        assert meta["name"] == folder.name
        description = meta["description"]
        assert 60 <= len(description) <= 1024
        assert re.search(r"\b(use|when)\b", description, re.IGNORECASE), \
            f"{folder.name}: the description must say when to use the skill"
        body = (folder / "SKILL.md").read_text()
        assert "```" in body, f"{folder.name}: needs at least one concrete example"
        assert re.search(r"^\s*1\. ", body, re.MULTILINE), f"{folder.name}: needs steps"
    readme = (skills_dir() / "README.md").read_text()
    for folder in skills:
        assert f"`{folder.name}`" in readme


def solution_identifiers() -> set[str]:
    """The bundled sample tasks' domains: their solutions' model names, source names and source
    tables (with the tables' singular: ``memberships`` -> ``membership``)."""
    import spider2local.dataset.sample

    found: set[str] = set()
    solutions = Path(spider2local.dataset.sample.__file__).parent / "solutions"
    for sql in solutions.rglob("*.sql"):
        found.add(sql.stem)
        for name, table in re.findall(r"source\('(\w+)',\s*'(\w+)'\)", sql.read_text()):
            found |= {name, table, table.removesuffix("s")}
    return found


def domain_words(text: str) -> set[str]:
    """Every word and every ``_``-separated part of one (``stg_memberships`` gives both)."""
    words = set(re.findall(r"\w+", text.lower()))
    return words | {part for word in words for part in word.split("_")}


def test_no_skill_or_prompt_example_mirrors_a_sample_solution() -> None:
    """Examples from a sample task's own domain would inflate sample evaluations."""
    identifiers = solution_identifiers()
    assert {"membership_status", "product_sales", "gym", "membership"} <= identifiers
    assert "membership" in domain_words("from {{ ref('stg_membership') }}")
    for path in [*skills_dir().rglob("*.md"), *prompts_dir().glob("*.md")]:
        shared = domain_words(path.read_text()) & identifiers
        assert not shared, f"{path}: mentions a sample task's domain: {sorted(shared)}"


def graded_tables() -> set[str]:
    """Every graded table of the bundled sample tasks (their task.toml) and of the real tasks
    at hand (../shared's spider2_eval.jsonl, when present)."""
    import json
    import tomllib

    import spider2local.dataset.sample
    from tests.conftest import SHARED_DATASET

    names: set[str] = set()
    tasks = Path(spider2local.dataset.sample.__file__).parent / "tasks"
    for spec in tasks.glob("*/task.toml"):
        names |= set(tomllib.loads(spec.read_text())["evaluation"]["condition_tabs"])
    eval_file = SHARED_DATASET / "evaluation_suite" / "gold" / "spider2_eval.jsonl"
    if eval_file.is_file():
        for line in eval_file.read_text().splitlines():
            if line.strip():
                names |= set(json.loads(line)["evaluation"]["parameters"]["condition_tabs"])
    return {n.lower() for n in names}


def test_no_prompt_or_skill_mentions_a_graded_table() -> None:
    """The kit must not steer the agent with evaluation data: no graded table name of the
    sample or the real tasks appears as a word in any prompt or skill."""
    graded = graded_tables()
    assert len(graded) >= 4
    for path in sorted([*skills_dir().rglob("*.md"), *prompts_dir().glob("*.md")]):
        words = set(re.findall(r"\w+", path.read_text().lower()))
        assert not words & graded, f"{path}: names a graded table: {sorted(words & graded)}"


def real_task(shared_dataset: Path, tid: str) -> TaskSpec:
    dataset = load_dataset(Suite(path=Path("tasks.toml"), dataset=shared_dataset))
    return next(t for t in dataset.tasks if t.id == tid)


def real_system_prompt(shared_dataset: Path, tid: str, tmp_path: Path) -> str:
    """The system prompt of a real task, from a workspace prepared as the run prepares it."""
    task = real_task(shared_dataset, tid)
    ws = prepare_workspace(task, artifacts=tmp_path / "artifacts", parent=tmp_path)
    try:
        return prompts.system_prompt(task, ws)
    finally:
        cleanup_workspace(ws)


@pytest.mark.process
def test_the_scan_in_the_prompt_tags_models_with_their_start_table_and_neighbours(
        shared_dataset: Path, tmp_path: Path) -> None:
    """On the real task: the unfinished model is listed to write, with its start table (the
    shape to match) and what it refs; a complete model keeps its start tag and its users."""
    text = real_system_prompt(shared_dataset, "mrr001", tmp_path)
    todo = text.split("Models declared in YML whose SQL is", 1)[1].split("Complete models", 1)[0]
    assert "- mrr [incomplete] models/mrr.sql" in todo
    assert re.search(r"start DB: exists in start DB as start\.main\.mrr \(table, \d+ rows, "
                     r"columns \w+ \w+", todo)
    assert re.search(r"refs: customer_(revenue_by_month|churn_month), customer_", todo)
    assert re.search(r"- customer_churn_month: exists in start DB .*referenced by: mrr", text)


@pytest.mark.process
def test_a_model_absent_from_the_start_database_says_so(shared_dataset: Path,
                                                        tmp_path: Path) -> None:
    text = real_system_prompt(shared_dataset, "playbook001", tmp_path)
    assert "- cpa_and_roas [missing]" in text
    assert "start DB: not in the database" in text
    assert "description: Aggregated ad spend" in text

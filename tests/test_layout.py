"""The package's shape: stage sub-packages in a strict layer order, agents reached through two
doors, each third-party library with one owner.

The layer order is import-linter's contract in pyproject.toml (every import counts, inside
functions too: an import placed in a function to dodge a cycle is still a cycle); the ownership
rules are read from the source with ``ast``, every import included.
"""

from __future__ import annotations

import ast
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import heavy_imports

PACKAGE = Path(__file__).resolve().parents[1] / "spider2local"
TOP_LEVEL_ALLOWED = {"__init__", "__main__", "exceptions", "resources", "safepath"}
"""Besides the entry points, three small helpers every stage shares: the errors, the
installed resource files, and the one rule for names from data that become paths."""


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (read once: several tests walk them all)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of one module, parsed once per test process (the checks only read it)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(module: str, path: Path, *, top_level_only: bool) -> Iterator[str]:
    """Every module ``module`` imports (``from pkg import sub`` counts as ``pkg.sub`` when that
    is a module of ours)."""
    tree = parsed(path)
    known = modules()
    nodes: list[ast.AST] = list(tree.body) if top_level_only else list(ast.walk(tree))
    if top_level_only:  # module level, but not behind `if TYPE_CHECKING:`
        nodes = [n for n in nodes if not (isinstance(n, ast.If) and "TYPE_CHECKING"
                                          in ast.unparse(n.test))]
        nodes = [sub for n in nodes for sub in ([n] if not isinstance(n, (ast.If, ast.Try))
                                                else ast.walk(n))]
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node, path.name == "__init__.py")
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            if len(subs) < len(node.names):  # names from the module itself, not submodules
                yield target
            yield from subs


def test_top_level_holds_only_entry_points_and_three_shared_helpers() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top <= TOP_LEVEL_ALLOWED, sorted(top - TOP_LEVEL_ALLOWED)


AGENTS_DOORS = {"spider2local.agents.registry", "spider2local.agents.contract"}
"""What the rest of spider2local may import of ``agents/``: the registry (names to classes)
and the contract (what an agent gets and returns)."""


def test_agents_are_reached_only_through_the_registry_and_the_contract() -> None:
    offenders = [f"{name} imports {target}"
                 for name, path in modules().items() if not name.startswith("spider2local.agents")
                 for target in imports(name, path, top_level_only=False)
                 if target.startswith("spider2local.agents") and target not in AGENTS_DOORS]
    assert offenders == []


def test_click_only_in_cli_the_sdk_only_in_agents_claude_mcp_only_in_the_tool_server() -> None:
    owners = {"click": "spider2local.cli", "claude_agent_sdk": "spider2local.agents.claude",
              "mcp": "spider2local.dbtools.server", "mcp_types": "spider2local.dbtools.server",
              "inspect_ai": "spider2local.export.inspectlog"}  # an optional extra
    offenders = [f"{name} imports {target}"
                 for name, path in modules().items()
                 for target in imports(name, path, top_level_only=False)
                 for library, owner in owners.items()
                 if target.split(".")[0] == library and not name.startswith(owner)]
    assert offenders == []


REPO = PACKAGE.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the package under ``root``, with the contract in its pyproject.toml
    (its graph holds every import, inside functions and behind ``TYPE_CHECKING`` too)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.process
def test_the_packages_keep_their_layer_order() -> None:
    done = lint_imports(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "stages in pipeline order KEPT" in done.stdout


@pytest.mark.process
def test_an_import_placed_in_a_function_to_reach_up_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE, tmp_path / "spider2local",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    layout = tmp_path / "spider2local" / "core" / "layout.py"
    layout.write_text(layout.read_text(encoding="utf-8")
                      + "\n\ndef _up() -> None:\n    from spider2local.run import runner  # noqa\n",
                      encoding="utf-8")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    assert "spider2local.core.layout -> spider2local.run.runner" in done.stdout, done.stdout


def test_the_checks_can_fail() -> None:
    rel = ast.parse("from . import results\n").body[0]
    assert isinstance(rel, ast.ImportFrom)
    assert _resolve("spider2local.run.runner", rel, False) == "spider2local.run"
    found = set(imports("spider2local.run.runner", PACKAGE / "run" / "runner.py",
                        top_level_only=True))
    assert "spider2local.core.results" in found


@pytest.mark.process
def test_commands_that_only_read_a_dataset_import_neither_pandas_nor_the_sdk() -> None:
    # Every CLI call and every query child pays its imports: the loader must not drag in the
    # scorer's pandas (0.3 s) nor the Claude SDK. `evaluation` loads its public names lazily.
    assert heavy_imports(["spider2local.cli.app", "spider2local.dataset.load",
                          "spider2local.cli.listing", "spider2local.dbtools.query",
                          "spider2local.dbtools.config"],
                         ["pandas", "claude_agent_sdk", "dbt", "inspect_ai"]) == []
    from spider2local import evaluation

    assert callable(evaluation.score_database) and "score_database" in evaluation.__all__


@pytest.mark.process
def test_the_run_command_imports_httpx_only_where_a_gateway_starts() -> None:
    # Every `spider2local run`, `score` and `report` call imports the command module; httpx
    # (~0.12 s of CPU a call, with its CLI's rich and pygments) is needed only by a gateway,
    # which imports it itself (spider2local.gateway.server).
    assert heavy_imports(["spider2local.cli.commands"], ["httpx", "claude_agent_sdk"]) == []
    assert heavy_imports(["spider2local.gateway.server"], ["httpx"]) == ["httpx"]


CONNECT_OWNER = "spider2local.db.connect"
OWN_FILES = {"spider2local.db.header": "an empty probe file it creates in its own temp folder"}
"""Modules that may call ``duckdb.connect`` besides the owner, each on a file of its own making
(``:memory:`` or no argument is allowed everywhere: no file at all)."""


def connect_calls(path: Path) -> Iterator[tuple[int, str]]:
    """Each ``duckdb.connect(...)`` (or ``connect`` imported from duckdb) and its first argument."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    direct = {alias.asname or alias.name for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module == "duckdb"
              for alias in node.names if alias.name == "connect"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Attribute) and func.attr == "connect"
                and isinstance(func.value, ast.Name) and func.value.id == "duckdb") \
                or (isinstance(func, ast.Name) and func.id in direct):
            first = ast.unparse(node.args[0]) if node.args else ""
            yield node.lineno, first


def test_only_the_owner_opens_duckdb_files() -> None:
    """One owner opens task files (spider2local/db/connect.py: our temp folder, external access
    off, configuration locked): any other ``duckdb.connect`` on a file would be a reader an
    agent's ``.tmp`` symlink opens up again."""
    offenders = [f"{name}:{line} duckdb.connect({first})"
                 for name, path in modules().items()
                 if name != CONNECT_OWNER and name not in OWN_FILES
                 for line, first in connect_calls(path) if first not in {"", "':memory:'"}]
    assert offenders == []
    sample = PACKAGE.parent / "tests" / "db" / "test_connect.py"
    assert list(connect_calls(sample)), "the check finds calls where there are some"


UPSTREAM_NAMES = ("evaluation_suite", "spider2_eval.jsonl", "spider2-dbt.jsonl")
UPSTREAM_OWNER = "spider2local.core.upstream"


def upstream_spellings(path: Path) -> list[str]:
    """String constants (docstrings aside) that spell upstream's layout."""
    tree = parsed(path)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    docstrings |= {id(node.value) for node in ast.walk(tree)  # attribute docstrings
                   if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [f"{path.name}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings
            and (node.value == "examples" or any(n in node.value for n in UPSTREAM_NAMES))]


def test_upstreams_layout_is_spelled_in_one_module() -> None:
    offenders = [hit for name, path in modules().items() if name != UPSTREAM_OWNER
                 for hit in upstream_spellings(path)]
    assert offenders == []
    assert upstream_spellings(modules()[UPSTREAM_OWNER]), "the check finds spellings"

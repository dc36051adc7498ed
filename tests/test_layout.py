"""The package's shape: stage sub-packages, a leaf agents/ package, no import cycles.

Read from the source with ``ast``, so every import counts: inside functions and behind
``TYPE_CHECKING`` too for the ownership rules; module-level ones only for cycles (a function-level
import runs after every module has loaded and cannot deadlock an import).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import heavy_imports

PACKAGE = Path(__file__).resolve().parents[1] / "spider2local"
TOP_LEVEL_ALLOWED = {"__init__", "__main__", "exceptions", "resources", "safepath"}
"""Besides the entry points, three small helpers every stage shares: the errors, the
installed resource files, and the one rule for names from data that become paths."""


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


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
    tree = ast.parse(path.read_text(encoding="utf-8"))
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


def test_agents_is_a_leaf_reached_only_through_its_registry() -> None:
    offenders = [f"{name} imports {target}"
                 for name, path in modules().items() if not name.startswith("spider2local.agents")
                 for target in imports(name, path, top_level_only=False)
                 if target.startswith("spider2local.agents")
                 and target != "spider2local.agents.registry"]
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


def find_cycles(graph: dict[str, set[str]]) -> list[str]:
    cycles: list[str] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return cycles


def test_no_import_cycles() -> None:
    known = modules()
    graph = {name: {t for t in imports(name, path, top_level_only=True)
                    if t in known and t != name}
             for name, path in known.items()}
    assert find_cycles(graph) == []


def test_the_checks_can_fail() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a -> b -> c -> a"]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    rel = ast.parse("from . import results\n").body[0]
    assert isinstance(rel, ast.ImportFrom)
    assert _resolve("spider2local.run.runner", rel, False) == "spider2local.run"
    found = set(imports("spider2local.run.runner", PACKAGE / "run" / "runner.py",
                        top_level_only=True))
    assert "spider2local.run.results" in found


def test_commands_that_only_read_a_dataset_import_neither_pandas_nor_the_sdk() -> None:
    # Every CLI call and every query child pays its imports: the loader must not drag in the
    # scorer's pandas (0.3 s) nor the Claude SDK. `evaluation` loads its public names lazily.
    assert heavy_imports(["spider2local.cli.app", "spider2local.dataset.load",
                          "spider2local.cli.listing", "spider2local.dbtools.query",
                          "spider2local.dbtools.config"],
                         ["pandas", "claude_agent_sdk", "dbt", "inspect_ai"]) == []
    from spider2local import evaluation

    assert callable(evaluation.score_database) and "score_database" in evaluation.__all__


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

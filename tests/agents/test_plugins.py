"""Agents as plugins: a separately installed package found through its entry point, and
``--agent package.module:Class``; broken plugins are one line naming them, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from spider2local.agents.registry import (
    ENTRY_POINT_GROUP,
    agent_class,
    agent_names,
    capabilities,
    contract_problem,
    make_agent,
)
from spider2local.exceptions import UserError

PLUGIN = '''
"""A third-party agent: writes the orders model and builds it (no spider2local internals
beyond the contract and Capabilities)."""
from spider2local.agents.registry import Capabilities
from spider2local.agents.contract import AgentContext, AgentOutcome


class DemoAgent:
    name = "demo"
    capabilities = Capabilities(credentials=("DEMO_PLUGIN_KEY",))

    async def run(self, ctx: AgentContext) -> AgentOutcome:
        ctx.transcript.append("demo", {"task": ctx.task.id})
        (ctx.workspace.project_dir / "plugin_was_here.txt").write_text(ctx.task.id)
        return AgentOutcome()


class NoRun:
    name = "norun"


class SyncRun:
    name = "syncrun"

    def run(self, ctx):
        return None
'''
BROKEN = "raise RuntimeError('the plugin is broken at import')\n"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin as an installed distribution in a folder of its own (a site folder): the
    package and the ``.dist-info`` an installer writes (METADATA, entry_points.txt, RECORD).
    Written directly instead of by pip: entry points are read from this metadata, and
    building a wheel needs a build backend this venv may not hold offline."""
    site = tmp_path_factory.mktemp("plugin-site")
    package = site / "s2l_demo_plugin"
    package.mkdir()
    (package / "__init__.py").write_text(PLUGIN)
    (package / "broken.py").write_text(BROKEN)
    info = site / "s2l_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: s2l-demo-plugin\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(f"""\
        [{ENTRY_POINT_GROUP}]
        demo-plugin = s2l_demo_plugin:DemoAgent
        norun-plugin = s2l_demo_plugin:NoRun
        broken-plugin = s2l_demo_plugin.broken:Agent
        noop = s2l_demo_plugin:DemoAgent
        """))
    (info / "RECORD").write_text("".join(f"{p.relative_to(site)},,\n"
                                         for p in sorted(site.rglob("*")) if p.is_file()))
    return site


@pytest.fixture
def on_path(installed: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(installed))
    return installed


def test_an_installed_plugin_is_found_through_its_entry_point(on_path: Path) -> None:
    assert {"demo-plugin", "norun-plugin", "broken-plugin"} <= set(agent_names())
    factory = agent_class("demo-plugin")
    assert factory.__name__ == "DemoAgent" and factory.__module__ == "s2l_demo_plugin"
    assert capabilities("demo-plugin").credentials == ("DEMO_PLUGIN_KEY",)
    assert make_agent("demo-plugin").name == "demo"


def test_a_plugin_cannot_take_a_built_in_name(on_path: Path) -> None:
    from spider2local.agents.noop import NoopAgent

    assert agent_class("noop") is NoopAgent


@pytest.mark.parametrize("name, message", [
    ("norun-plugin", "does not implement the agent contract: it has no run method"),
    ("broken-plugin", "failed while importing: RuntimeError: the plugin is broken at import"),
    ("s2l_demo_plugin:Missing", "module 's2l_demo_plugin' has no 'Missing'"),
    ("s2l_demo_plugin:SyncRun", "its run method is not async"),
    ("no_such_package.mod:Agent", "could not be imported: ModuleNotFoundError"),
    ("s2l_demo_plugin:", "is not package.module:Class"),
    ("nonesuch", "unknown agent 'nonesuch'"),
])
def test_a_broken_plugin_is_one_user_error_naming_it(on_path: Path, name: str,
                                                     message: str) -> None:
    with pytest.raises(UserError) as caught:
        agent_class(name)
    text = str(caught.value)
    assert message in text and repr(name) in text and "\n" not in text


def test_contract_problems_are_named() -> None:
    class NoName:
        async def run(self, ctx: object) -> None: ...

    class BadCaps:
        name = "x"
        capabilities = ("model",)

        async def run(self, ctx: object) -> None: ...

    assert contract_problem(NoName) == "it has no name (a class attribute: name = '...')"
    assert "not a spider2local Capabilities" in str(contract_problem(BadCaps))
    assert "is not a class" in str(contract_problem(42))


def cli(*args: str, cwd: Path, site: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spider2local", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(site), **(env or {})})


@pytest.mark.process
def test_a_plugin_agent_runs_a_task_through_the_cli(installed: Path, tmp_path: Path,
                                                    tiny_dataset: Callable[..., Path]) -> None:
    root = tiny_dataset("t1")
    args = ["--dataset", str(root), "run", "--runs-dir", "runs", "--keep"]
    refused = cli(*args, "--agent", "demo-plugin", "--run-id", "r0", cwd=tmp_path,
                  site=installed, env={"DEMO_PLUGIN_KEY": ""})
    assert refused.returncode == 2 and "DEMO_PLUGIN_KEY" in refused.stderr  # its capabilities
    done = cli(*args, "--agent", "demo-plugin", "--run-id", "r1", "--json", cwd=tmp_path,
               site=installed, env={"DEMO_PLUGIN_KEY": "k"})
    assert done.returncode == 0, done.stderr[-2000:]
    task = tmp_path / "runs" / "r1" / "t1"
    kinds = [json.loads(line)["kind"] for line in
             (task / "transcript.jsonl").read_text().splitlines()]
    assert "demo" in kinds
    result = json.loads((task / "result.json").read_text())
    assert result["status"] in ("failed", "passed") and result.get("error") is None
    manifest = json.loads((tmp_path / "runs" / "r1" / "run.json").read_text())
    assert manifest["agent"] == "demo-plugin"


@pytest.mark.parametrize("agent, message", [
    ("s2l_demo_plugin:Missing", "has no 'Missing'"),
    ("norun-plugin", "it has no run method"),
])
@pytest.mark.process
def test_a_broken_plugin_on_the_command_line_is_one_line_exit_2(
        installed: Path, tmp_path: Path, tiny_dataset: Callable[..., Path], agent: str,
        message: str) -> None:
    done = cli("--dataset", str(tiny_dataset("t1")), "run", "--agent", agent, "--runs-dir",
               "runs", cwd=tmp_path, site=installed)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and agent in lines[0], done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()

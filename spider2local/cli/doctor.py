"""``spider2local doctor``: is this machine ready to run the benchmark?

Each check is one line, ok or a one-line fix. Only what a run really needs is "required"; missing
credentials, for instance, only matter for the Claude agent, so they warn.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from spider2local.agents.registry import (
    agent_names,
    api_status,
    capabilities,
    is_agent_name,
    tool_version,
)
from spider2local.dataset.task import Dataset
from spider2local.exceptions import Spider2LocalError
from spider2local.safepath import is_within
from spider2local.sandbox.launcher import root_override_needed
from spider2local.sandbox.probe import probe
from spider2local.sandbox.readers import IN_PROCESS_ENV, reader_mode
from spider2local.suite.model import Suite


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True

    @property
    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.required else "warn")
        return f"{mark}  {self.name}: {self.detail}"


API_TIMEOUT = 30.0
"""Seconds ``--check-api`` waits for the API's answer (a healthy one takes about one)."""


def run_checks(suite: Suite, *, clock_selftest: bool = True, check_api: bool = False,
               api_timeout: float = API_TIMEOUT, agent: str | None = None) -> list[Check]:
    """Every check for a run of ``agent`` (default: the suite's): what that agent needs is
    required, what only other agents need is a warning marked optional (``doctor --agent
    reference`` passes without an API key: a user who only wants reference or noop runs
    got exit 1)."""
    agent = agent or suite.defaults.agent
    checks = [_python(), *_versions(), _libfaketime()]
    if clock_selftest and checks[-1].ok:
        checks += [*_clock_selftest(), _warm_dbt(suite)]
    checks.append(_pdeathsig())
    data = _load(suite)  # once: the isolation check builds a sandbox for its first task
    checks += [*_agent_checks(agent), *_command_agents(suite, agent),
               _isolation(suite, agent, data), _dataset(data)]
    readers = _readers()
    if readers is not None:
        checks.append(readers)
    if check_api:
        checks.append(api_check(suite, os.environ, api_timeout, agent))
    return checks


def _readers() -> Check | None:
    """Only when the test suite's reader mode is set: a real run must not keep it."""
    mode = reader_mode()
    if mode is None:
        return None
    in_process, said = mode
    fix = f"unset {IN_PROCESS_ENV} for a real run" if in_process else "unset it"
    return Check("readers", False, f"{said}; {fix}", required=in_process)


def api_check(suite: Suite, env: Mapping[str, str], timeout: float,
              agent: str | None = None) -> Check:
    """One tiny real request to the agent's API (default: the suite's) with the suite's model
    (the agent decides how: :func:`~spider2local.agents.registry.api_status`)."""
    agent, model = agent or suite.defaults.agent, suite.defaults.model
    status = api_status(agent, env, model, timeout)
    if status is None:
        return Check("api", True, f"--agent {agent} calls no API", required=False)
    return Check("api", status.ok, status.detail)


def _python() -> Check:
    ok = sys.version_info >= (3, 11)
    return Check("python", ok, sys.version.split()[0] + ("" if ok else " (install Python >= 3.11)"))


CHECKED = ("dbt-core", "dbt-duckdb", "duckdb", "pandas", "claude-agent-sdk")
"""The stack whose versions decide verdicts and clocks (docs/development.md, "Pinned stack")."""


def _pins() -> dict[str, SpecifierSet]:
    """The ranges spider2local was installed with, read from its own metadata: pyproject.toml
    stays the one place the pins are written."""
    try:
        requires = metadata.requires("spider2local") or []
    except metadata.PackageNotFoundError:
        return {}
    pins = (Requirement(line) for line in requires)
    return {canonicalize_name(r.name): r.specifier for r in pins if r.marker is None}


def _versions() -> list[Check]:
    pins = _pins()
    checks = []
    for dist in CHECKED:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            checks.append(Check(dist, False, "not installed (pip install -e '.[dev]')"))
            continue
        wanted = pins.get(canonicalize_name(dist), SpecifierSet())
        ok = wanted.contains(version, prereleases=True)
        hint = "" if ok else f" (need {wanted}: reinstall spider2local)"
        checks.append(Check(dist, ok, version + hint))
    return checks


def _libfaketime() -> Check:
    from spider2local.clock.faketime import find_library

    try:
        return Check("libfaketime", True, str(find_library()))
    except Spider2LocalError as exc:
        return Check("libfaketime", False, str(exc))


def _pdeathsig() -> Check:
    """Children that die with the runner after a kill -9 (proc/run.py); without it they live
    until the next command on the run reaps them, so it only warns."""
    from spider2local.proc.run import pdeathsig_wrapper

    wrapper = pdeathsig_wrapper()
    if wrapper:
        return Check("children die with the runner", True, " ".join(wrapper), required=False)
    return Check("children die with the runner", False,
                 "no `setpriv --pdeathsig` (util-linux >= 2.33, Linux): after a kill -9, dbt "
                 "and an unsandboxed Claude CLI live on until the next command on the run "
                 "(their API calls stop: the model gateway died with the runner)",
                 required=False)


def _warm_dbt(suite: Suite) -> Check:
    """Start a warm dbt server for real (imports, a forked child's clock reset and a DuckDB
    query under the fake date): whether ``--warm-dbt on`` will speed dbt up here."""
    from spider2local.clock.warm import probe

    ok, detail = probe()
    if not suite.defaults.get("warm_dbt"):
        detail += " (the suite turns it off: warm_dbt = false)"
    return Check("warm dbt", ok, detail if ok else f"{detail}; dbt runs cold (slower)",
                 required=False)


def _clock_selftest() -> list[Check]:
    from spider2local.clock.selftest import clock_selftest

    return [Check(f"clock: {name}", ok, detail) for name, ok, detail in clock_selftest()]


def _agent_checks(chosen: str) -> list[Check]:
    """Each agent's external tool and credentials, as its class declares them: required for the
    chosen agent, a warning marked optional for the others (they may never be used here)."""
    checks = []
    names = [*agent_names(), *([chosen] if chosen not in agent_names() else [])]
    for name in names:
        required = name == chosen
        optional = "" if required else f" (optional: needed only for --agent {name})"
        try:
            caps = capabilities(name)  # a plugin that does not load is a line, not a crash
        except Spider2LocalError as exc:
            checks.append(Check(f"agent {name}", False, str(exc), required=required))
            continue
        try:
            version = tool_version(name)
            if version is not None:
                checks.append(Check(f"{name} cli", True, version, required=required))
        except Spider2LocalError as exc:
            checks.append(Check(f"{name} cli", False, f"{exc}{optional}", required=required))
        if caps.credentials:
            found = caps.credential_in(os.environ)
            detail = f"{found} is set" if found else \
                f"none (set {' or '.join(caps.credentials)} for --agent {name}){optional}"
            checks.append(Check("credentials", found is not None, detail, required=required))
    return checks


def _command_agents(suite: Suite, chosen: str) -> list[Check]:
    """Each command agent the suite defines: its executable is found on the PATH the agent
    gets, in a folder the sandbox shows (the system, the Python environment or its own
    ``read_only``). Required for the suite's agent, a warning for the others."""
    import shutil

    from spider2local.agents.registry import make_agent
    from spider2local.sandbox.launcher import SYSTEM_DIRS
    from spider2local.sandbox.spec import runtime_paths

    checks = []
    for name, spec in suite.agents.items():
        required = name == chosen
        try:
            agent: Any = make_agent("command", **spec.options())
        except Spider2LocalError as exc:
            checks.append(Check(f"agent {name}", False, str(exc), required=required))
            continue
        program = agent.executable()
        found = shutil.which(program) if program else None
        if found is None:
            checks.append(Check(f"agent {name}", False,
                                f"{program or spec.command!r} not found on PATH (install it, "
                                "or fix [agents." + name + "] command)", required=required))
            continue
        real = Path(os.path.realpath(found))
        shown = [Path(d) for d in SYSTEM_DIRS] + runtime_paths() + list(agent.read_only)
        visible = any(is_within(real, Path(os.path.realpath(d))) for d in shown)
        detail = str(found) + ("" if visible else
                               f" (not visible in the sandbox: add {real.parent} to "
                               f"[agents.{name}] read_only)")
        checks.append(Check(f"agent {name}", visible, detail, required=required))
    return checks


def _isolation(suite: Suite, agent: str, data: Dataset | Spider2LocalError) -> Check:
    """Which isolation a run of the suite's agent gets here, and why: the same resolution as
    ``run``, so the line cannot disagree with what a run does. A failure is required only when
    the suite asks for ``namespace`` (``auto`` falls back to none, with a warning)."""
    from spider2local.sandbox.isolation import IsolationMode, choose_isolation
    from spider2local.sandbox.probe import check_agent_sandbox
    from spider2local.suite.options import Isolation
    from spider2local.workspace.environment import START_DIR

    requested = suite.defaults.isolation
    found = probe()
    try:
        choice = choose_isolation(requested, sandboxed=True, agent=agent)
    except Spider2LocalError:
        return Check("isolation", False, f"namespace requested but unavailable: "
                                         f"{found.reason} (fix: {found.fix})")  # run refuses
    detail = f"{choice.mode.value}: {choice.reason} (requested {requested.value})"
    if is_agent_name(agent) and not _sandboxed(agent):
        detail += f"; --agent {agent} runs no untrusted code and needs none"
    if not found.ok and requested is not Isolation.NONE:
        detail += f"; to isolate: {found.fix}"
    if choice.mode is IsolationMode.NAMESPACE and _sandboxed(agent):
        built = check_agent_sandbox(_run_hides(suite, data), START_DIR)
        if not built.ok:  # every trial of a run would be infrastructure: never "ok"
            return Check("isolation", False, f"namespace: {built.reason} (fix: {built.fix})")
        detail += "; an agent's sandbox was built and reached its gateway, hiding what it must"
    return Check("isolation", found.ok or requested is Isolation.NONE, detail,
                 required=requested is Isolation.NAMESPACE)


def _run_hides(suite: Suite, data: Dataset | Spider2LocalError) -> tuple[Path, ...]:
    """What a run of ``suite`` hides from its first runnable task's agent (the same
    :meth:`~spider2local.integrity.guard.Watch.off_limits`), or nothing when the dataset
    cannot be loaded (its own check line says why)."""
    from spider2local.integrity.guard import Fingerprints, Watch

    if isinstance(data, Spider2LocalError):
        return ()
    task = next((t for t in data.tasks if t.runnable), None)
    if task is None:
        return ()
    watch = Watch(Fingerprints({}), suite_file=suite.path)
    return watch.off_limits(task)


def _sandboxed(agent: str) -> bool:
    try:
        return capabilities(agent).sandboxed
    except Spider2LocalError:
        return True  # reported by its own check line


def _load(suite: Suite) -> Dataset | Spider2LocalError:
    """The suite's dataset, or why it cannot be loaded (for the dataset line to say)."""
    from spider2local.dataset.load import load_dataset

    try:
        return load_dataset(suite)
    except Spider2LocalError as exc:
        return exc


def _dataset(data: Dataset | Spider2LocalError) -> Check:
    if isinstance(data, Spider2LocalError):
        return Check("dataset", False, str(data))
    runnable = sum(t.runnable for t in data.tasks)
    files = [p for t in data.tasks for p in (t.start_db, t.gold.db if t.gold else None) if p]
    unreachable = root_override_needed(files) if probe().ok else None
    if unreachable is not None:  # every trial's scorer would fail: infrastructure, each one
        return Check("dataset", False, f"the reader sandboxes cannot open it: {unreachable}")
    return Check("dataset", True, f"{data.root}: {len(data.tasks)} tasks, {runnable} runnable")


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.required and not c.ok for c in checks) else 0

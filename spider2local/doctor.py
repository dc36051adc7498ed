"""``spider2local doctor``: is this machine ready to run the benchmark?

Each check is one line, ok or a one-line fix. Only what a run really needs is "required"; missing
credentials, for instance, only matter for the Claude agent, so they warn.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib import metadata

from spider2local.exceptions import Spider2LocalError
from spider2local.suite import Suite


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


def run_checks(suite: Suite, *, clock_selftest: bool = True) -> list[Check]:
    checks = [_python(), *_versions(), _libfaketime()]
    if clock_selftest and checks[-1].ok:
        checks += _clock_selftest()
    needs_claude = suite.defaults.agent == "claude"
    checks += [_claude_cli(needs_claude), _credentials(needs_claude), _dataset(suite)]
    return checks


def _python() -> Check:
    ok = sys.version_info >= (3, 11)
    return Check("python", ok, sys.version.split()[0] + ("" if ok else " (install Python >= 3.11)"))


def _versions() -> list[Check]:
    wanted = {"dbt-core": ("1.11", "1.12"), "dbt-duckdb": ("1.11", "1.12"),
              "duckdb": ("1.1", "2"), "pandas": ("2.2", "3"), "claude-agent-sdk": None}
    checks = []
    for dist, bounds in wanted.items():
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            checks.append(Check(dist, False, "not installed (pip install -e '.[dev]')"))
            continue
        ok = bounds is None or _between(version, *bounds)
        hint = "" if ok else f" (need >={bounds[0]},<{bounds[1]}: reinstall spider2local)" \
            if bounds else ""
        checks.append(Check(dist, ok, version + hint))
    return checks


def _between(version: str, low: str, high: str) -> bool:
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".")[:2] if p.isdigit())
    return key(low) <= key(version) < key(high)


def _libfaketime() -> Check:
    from spider2local.clock import find_library

    try:
        return Check("libfaketime", True, str(find_library()))
    except Spider2LocalError as exc:
        return Check("libfaketime", False, str(exc))


def _clock_selftest() -> list[Check]:
    from spider2local.clock import clock_selftest

    return [Check(f"clock: {name}", ok, detail) for name, ok, detail in clock_selftest()]


def _claude_cli(required: bool) -> Check:
    """Required only when the suite's default agent is Claude; the other agents run offline."""
    from spider2local.agents.claude import cli_version

    try:
        return Check("claude cli", True, cli_version(), required=required)
    except Spider2LocalError as exc:
        return Check("claude cli", False, str(exc), required=required)


def _credentials(required: bool) -> Check:
    found = [v for v in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN") if os.environ.get(v)]
    if found:
        return Check("credentials", True, f"{found[0]} is set", required=required)
    return Check("credentials", False,
                 "none (set ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN for --agent claude)",
                 required=required)


def _dataset(suite: Suite) -> Check:
    from spider2local.dataset import load_dataset

    try:
        data = load_dataset(suite)
    except Spider2LocalError as exc:
        return Check("dataset", False, str(exc))
    runnable = sum(t.runnable for t in data.tasks)
    return Check("dataset", True, f"{data.root}: {len(data.tasks)} tasks, {runnable} runnable")


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.required and not c.ok for c in checks) else 0

"""The test tiers, chosen by what a test touches, and kept honest by an audit hook.

- **pure** (no mark): no process is started. Plain ``pytest`` runs only these: the quick loop.
- **process** (``@pytest.mark.process``): the test, or a function-scoped fixture of it, starts a
  process (dbt, the CLI, a reader or sandbox child, a shell).
- **slow** (``@pytest.mark.slow``): end to end (real dbt runs, the real Claude CLI, a whole
  ``spider2local run``).

``pytest --full`` (the README's test command and ``.ci/run``) runs every tier; ``-m`` chooses
for itself. A tier kept by hand drifts: a pure test that starts a process makes the quick loop
slow without anyone noticing. So every test of the pure tier runs under a
:func:`sys.addaudithook` hook that sees every process start (``subprocess.Popen``, ``os.fork``,
``os.posix_spawn``, ``os.exec*``, ``os.system``), and such a test fails, naming what it started
and the mark it needs. A process started by a fixture counts for the test that set it up, and
the message names the fixture: a module- or session-scoped one (a real run of the sample) sets
up once for many tests, so its tests are marked by its name at collection
(:data:`PROCESS_FIXTURES`) rather than one by one.

``SPIDER2LOCAL_TIER_SURVEY=<file>`` records such tests (node ids, one per line) instead of
failing them: how the marks were first placed.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Generator
from typing import Any, ClassVar

import pytest

from spider2local.sandbox.dbreads import forget_snapshots

MARKS = ("process", "slow")
"""The marks that leave the quick tier."""

SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn",
                          "os.exec", "os.spawn", "os.system", "pty.spawn"})
"""Audit events (CPython's table) that start a process."""

PROCESS_FIXTURES = frozenset({"reference_run", "terminal"})
"""Fixtures whose tests touch processes whatever their own body does."""

SURVEY = os.environ.get("SPIDER2LOCAL_TIER_SURVEY")


class _Watch:
    """What the current test started, while it is being watched (pure tier only)."""

    watching: ClassVar[bool] = False
    earlier: ClassVar[frozenset[int]] = frozenset()
    """Threads (other than the main one) alive before the test began: a thread an earlier test
    left running that starts a process is not this test's doing."""
    fixtures: ClassVar[list[str]] = []
    """The fixtures being set up, innermost last."""
    seen: ClassVar[list[str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in SPAWN_EVENTS and _Watch.watching \
            and threading.get_ident() not in _Watch.earlier:
        where = f"fixture {_Watch.fixtures[-1]!r}: " if _Watch.fixtures else ""
        _Watch.seen.append(f"{where}{event} {repr(args)[:160]}")


def _tiered(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(mark) is not None for mark in MARKS)


def pytest_configure(config: pytest.Config) -> None:
    sys.addaudithook(_audit)  # cannot be removed; it only records while _Watch.watching


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", default=False,
                     help="every tier (pure, process, slow): what CI and the README's test "
                          "command run. Without it (and without -m) plain `pytest` runs the "
                          "pure tier.")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests of :data:`PROCESS_FIXTURES`; then plain ``pytest`` keeps the pure tier
    only, unless ``--full`` is given or ``-m`` chooses for itself."""
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
    if config.getoption("--full") or config.option.markexpr:
        return
    dropped = [item for item in items if _tiered(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not _tiered(item)]


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any],
                         request: pytest.FixtureRequest) -> Generator[None, Any, Any]:
    _Watch.fixtures.append(fixturedef.argname)
    try:
        return (yield)
    finally:
        _Watch.fixtures.pop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _Watch.seen = []
    _Watch.watching = not _tiered(item)
    main = threading.main_thread().ident
    _Watch.earlier = frozenset(t.ident for t in threading.enumerate()
                               if t.ident is not None and t.ident != main)
    # a snapshot cached by an earlier test would hide this test's reader child: the tier of a
    # test must not depend on the order the tests ran in
    forget_snapshots()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item,
                            nextitem: pytest.Item | None) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        _Watch.watching = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.when != "call" or not _Watch.seen or _tiered(item):
        return report
    first = _Watch.seen[0]
    if SURVEY:
        with open(SURVEY, "a", encoding="utf-8") as fh:
            fh.write(f"{item.nodeid}\t{first}\n")
        return report
    if report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} is in the pure tier but started {len(_Watch.seen)} process(es), "
            f"first: {first}. Mark it @pytest.mark.process (or slow if it is end to end): "
            "the quick loop runs pure tests only (tests/tiers.py; a fixture that starts "
            "processes for many tests goes in its PROCESS_FIXTURES)")
    return report

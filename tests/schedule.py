"""How the whole suite is shared among xdist's workers: one file per worker at a time, the
costliest files first.

Why files (``--dist loadfile``, pyproject's addopts) and not single tests (``--dist load``):
the end-to-end modules build something once for all their tests (a wheel in a fresh venv,
mini-swe-agent's venv, a reference run to export, regrade or replay). Under ``load`` every
worker that got one of a module's tests built it again: measured on 2 cores with 3 workers,
the three tests of ``test_install.py`` each spent 53-56 s in setup, ``test_mini_swe_agent.py``
35-43 s three times, ``export/test_inspect.py`` 30-36 s three times (about 290 s of the
suite's 3,800 worker-seconds spent building the same thing twice more). The grouping meant
to prevent it (``xdist_group`` with ``--dist loadgroup``) silently stopped working with pytest
9.2 (tests/system_wide.py says why); files are still grouped.

Why the order: xdist hands out files in the order it is given them (``--no-loadscope-reorder``;
its own reorder puts the files with the most tests first, which are the quick property-test
files). A file of two end-to-end tests handed out last would run alone while the other
workers idle. Longest first is the classic greedy schedule (LPT); the length of a file is
estimated from its tiers (tests/tiers.py): what a test touches is what it costs. The estimate
need not be exact, only put the few long files before the many short ones.

The quick tier alone (plain ``pytest``) has no shared fixture worth a worker and many files of
one long property test; there single tests balance better: 31 s against 35 s on 2 cores,
measured back to back. So files are the unit only when a slower tier runs.
"""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadScheduling

COST = {"slow": 10.0, "process": 2.0}
"""Rough seconds a test of each tier takes on 2 busy cores (the slow ones 5-110 s, the process
ones 1-10 s); a pure test counts :data:`PURE`."""
PURE = 0.05


def cost(item: pytest.Item) -> float:
    """The estimated cost of one test, by the costliest tier it is marked with."""
    for mark, seconds in COST.items():
        if item.get_closest_marker(mark) is not None:
            return seconds
    return PURE


@pytest.hookimpl(trylast=True)  # after tests/tiers.py has marked and deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Orders the files by their estimated cost, longest first; a file's own tests keep their
    order (module fixtures and the tests written to follow each other rely on it)."""
    totals: dict[str, float] = {}
    for item in items:
        totals[_file(item)] = totals.get(_file(item), 0.0) + cost(item)
    first_seen = {name: index for index, name in enumerate(totals)}
    items.sort(key=lambda item: (-totals[_file(item)], first_seen[_file(item)]))


def _file(item: pytest.Item) -> str:
    """The scope ``--dist loadfile`` groups by: the node id's file part."""
    return item.nodeid.split("::", 1)[0]


# optional: a hook of xdist's, unknown (and refused at collection) when xdist is not loaded,
# as under ``-p no:xdist``
@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScheduling | None:
    """Single tests for the quick tier alone; otherwise xdist's own choice (pyproject's
    ``--dist loadfile``, or whatever ``--dist`` the command line gives)."""
    everything = config.getoption("--full") or config.option.markexpr
    if config.option.dist == "loadfile" and not everything:
        return LoadScheduling(config, log)
    return None

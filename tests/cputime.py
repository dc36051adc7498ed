"""``--cpu-durations=N``: the N test phases that cost the most CPU, beside pytest's own
``--durations`` (wall time).

On a machine whose cores are all busy, as this suite keeps 2 cores busy, the suite's time is its
CPU: a test's wall time there counts the time it waited for a core and the time it slept
(a deadline, a held agent), so the slowest tests by the clock are not the ones whose work the
suite waits for. CPU is the process's own and that of the processes it started and waited for
(``RUSAGE_CHILDREN``: dbt, the CLI, reader children, the Claude CLI); a process left to
another parent (a daemon, a killed runner's orphans) is not counted. Measured per phase in the
worker that ran it and sent to the controller in the report's ``user_properties``, so it
works the same with and without xdist.
"""

from __future__ import annotations

import resource
from collections.abc import Generator

import pytest

PROPERTY = "cpu_seconds"
_START = pytest.StashKey[float]()


def cpu_seconds() -> float:
    """User and system CPU of this process and of its waited-for children, so far."""
    me, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                        resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="show the N test phases that used the most CPU (with the processes "
                          "they started and waited for); 0 for all")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_START] = cpu_seconds()
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_START] = cpu_seconds()
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_START] = cpu_seconds()
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
        call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    start = item.stash.get(_START, None)
    if start is not None:
        report.user_properties.append((PROPERTY, round(cpu_seconds() - start, 3)))
    return report


class _Collector:
    """On the controller (or the only process): every phase's CPU, from its report."""

    def __init__(self) -> None:
        self.phases: list[tuple[float, str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == PROPERTY and isinstance(value, int | float):
                self.phases.append((float(value), report.when or "", report.nodeid))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        wanted = terminalreporter.config.getoption("--cpu-durations")
        ranked = sorted(self.phases, reverse=True)
        shown = ranked if not wanted else ranked[:wanted]
        total = sum(cpu for cpu, _, _ in self.phases)
        terminalreporter.write_sep("=", f"most CPU: {len(shown)} of {len(ranked)} phases "
                                        f"({total:.0f} CPU-seconds in all)")
        for cpu, when, nodeid in shown:
            terminalreporter.write_line(f"{cpu:8.2f}s {when:<8} {nodeid}")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--cpu-durations") is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Collector(), "cputime-collector")

"""The test helpers that share one session's expensive work between its processes: they decide
what every slow test sees, so they are tested like product code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from spider2local.dataset.sample import default_cache_dir
from tests.helpers import (
    HOST_LOCATIONS,
    OUTCOME_FILE,
    XDG_BASES,
    SessionHome,
    run_once,
    session_folder,
)

REPO = Path(__file__).resolve().parents[1]


def counting_command(counter: Path, pause: float = 0.0) -> list[str]:
    """A real process that leaves one line in ``counter`` per run, then prints its cwd."""
    return [sys.executable, "-c",
            "import os, pathlib, sys, time\n"
            f"with open({str(counter)!r}, 'a') as fh: fh.write(str(os.getpid()) + '\\n')\n"
            f"time.sleep({pause})\n"
            "print(pathlib.Path.cwd().name); print('to stderr', file=sys.stderr); sys.exit(3)"]


def test_session_folder_is_shared_by_xdist_workers_only(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    worker = tmp_path / "pytest-7" / "popen-gw1"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert session_folder(worker) == tmp_path / "pytest-7"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    # Alone, the parent would be every past session's folder: the base temp is the session's.
    assert session_folder(tmp_path / "pytest-7") == tmp_path / "pytest-7"


@pytest.mark.process
def test_the_session_has_its_own_home_and_cache_and_its_programs_see_them(
        session_home: SessionHome, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Nothing a developer's machine built is read, nothing is written into their home: the
    home and spider2local's cache are this session's (one for all its xdist workers), the
    sample is built there, and a program a test starts finds both."""
    session = session_folder(tmp_path_factory.getbasetemp())
    assert (session_home.home, session_home.cache) == (session / "home", session / "cache")
    assert Path.home() == session_home.home != Path(HOST_LOCATIONS["HOME"] or "/")
    assert default_cache_dir() == session_home.cache
    assert not [name for name in XDG_BASES if name in os.environ]  # none overrides the home
    assert session_home.sample.parent == session_home.cache
    assert (session_home.sample / ".spider2local-sample").is_file()  # the finished build
    code = ("import pathlib; from spider2local.dataset.sample import ensure_built; "
            "print(ensure_built()); print(pathlib.Path.home())")
    seen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60).stdout.split()
    assert seen == [str(session_home.sample), str(session_home.home)]


@pytest.mark.process
def test_concurrent_processes_run_the_command_once_and_read_one_outcome(tmp_path: Path) -> None:
    counter = tmp_path / "ran.txt"
    folder = tmp_path / "shared" / "work"
    asker = ("import json, sys; from dataclasses import asdict; from pathlib import Path; "
             "from tests.helpers import run_once; "
             f"print(json.dumps(asdict(run_once(Path({str(folder)!r}), "
             f"{counting_command(counter, pause=1.0)!r}, timeout=60))))")
    askers = [subprocess.Popen([sys.executable, "-c", asker], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [p.communicate(timeout=120) for p in askers]
    assert all(p.returncode == 0 for p in askers), [err for _, err in outputs]
    seen = [json.loads(out) for out, _ in outputs]
    assert len(counter.read_text().splitlines()) == 1  # one run for three processes
    assert seen[0] == seen[1] == seen[2]
    assert (seen[0]["returncode"], seen[0]["stdout"], seen[0]["stderr"]) == (
        3, "work\n", "to stderr\n")  # its cwd was the folder; its failure is the outcome
    assert seen[0]["seconds"] >= 1.0


@pytest.mark.process
def test_a_recorded_outcome_is_reused_and_a_half_built_folder_is_rebuilt(tmp_path: Path) -> None:
    counter = tmp_path / "ran.txt"
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "left-by-a-killed-worker").write_text("half")
    first = run_once(folder, counting_command(counter), timeout=60)
    assert not (folder / "left-by-a-killed-worker").exists()  # no outcome: built from scratch
    assert run_once(folder, counting_command(counter), timeout=60) == first
    assert len(counter.read_text().splitlines()) == 1
    assert sorted(p.name for p in folder.iterdir()) == [OUTCOME_FILE]  # no temp file left


@pytest.mark.process
def test_a_timeout_is_recorded_once_not_waited_for_by_every_test(tmp_path: Path) -> None:
    counter = tmp_path / "ran.txt"
    folder = tmp_path / "work"
    hung = run_once(folder, counting_command(counter, pause=30), timeout=0.5)
    assert hung.returncode == -1 and "timed out after 0.5s" in hung.stderr
    assert hung.seconds < 10
    assert run_once(folder, counting_command(counter), timeout=60) == hung
    assert len(counter.read_text().splitlines()) == 1


def test_the_hypothesis_profile_follows_the_environment() -> None:
    # The quick loop draws few examples, CI (CI set, or HYPOTHESIS_PROFILE=ci) the full plans.
    from hypothesis import settings

    from tests.helpers import FULL_PROPERTIES, HYPOTHESIS_PROFILE

    assert settings.default.max_examples == (100 if FULL_PROPERTIES else 25)
    assert (HYPOTHESIS_PROFILE == "ci") == FULL_PROPERTIES


def _collected(*args: str) -> int:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                           "-p", "no:cacheprovider", *args, "tests/agents/test_command.py"],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=300, check=False)
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", done.stdout)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    return int(found.group(1))


@pytest.mark.process
def test_plain_pytest_is_the_pure_tier_and_full_runs_every_test() -> None:
    quick, full = _collected(), _collected("--full")
    marked = _collected("-m", "slow or process")
    assert 0 < quick < full and marked == full - quick


TIERED = """
import subprocess, sys

import pytest


def test_pure_that_computes():
    assert sum(range(10)) == 45


def test_pure_that_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.fixture
def child():
    return subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True).stdout


def test_pure_whose_fixture_starts_a_process(child):
    assert child.strip() == b"7"


@pytest.mark.process
def test_marked_that_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@pytest.mark.process
def test_a_pure_test_that_starts_a_process_fails_naming_the_mark(tmp_path: Path) -> None:
    """The tiers are kept by the audit hook, not by hand: a test of the quick tier that starts
    a process (itself or through a fixture) fails, naming what it started and the mark; the
    same in a marked test passes; plain pytest does not even collect the marked one."""
    (tmp_path / "test_tiered.py").write_text(TIERED)
    root = Path(__file__).resolve().parents[1]

    def pytest_in(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tests.tiers", "-p", "no:cacheprovider",
             "-p", "no:randomly", "-n", "2", "-rf", "--rootdir", str(tmp_path), *args,
             str(tmp_path / "test_tiered.py")],
            cwd=root, capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "PYTHONPATH": str(root)})

    full = pytest_in("--full")
    assert "2 failed, 2 passed" in full.stdout, full.stdout[-3000:]
    failed = [line for line in full.stdout.splitlines() if line.startswith("FAILED")]
    assert sorted(line.split("::")[1].split()[0] for line in failed) == [
        "test_pure_that_starts_a_process", "test_pure_whose_fixture_starts_a_process"]
    assert "is in the pure tier but started 1 process(es), first: subprocess.Popen" \
        in full.stdout and "Mark it @pytest.mark.process" in full.stdout
    assert "first: fixture 'child': subprocess.Popen" in full.stdout
    quick = pytest_in()
    assert "2 failed, 1 passed" in quick.stdout, quick.stdout[-3000:]  # the marked one: not run


SYSTEM_WIDE_TESTS = """
import os, time
import pytest

def _span(name):
    start = time.time()
    time.sleep(1.0)
    with open(os.environ["SPANS"], "a") as fh:
        fh.write(f"{name} {start} {time.time()}\\n")

@pytest.mark.system_wide("writes")
def test_writer_a():
    _span("writes")

@pytest.mark.system_wide("writes")
def test_writer_b():
    _span("writes")

@pytest.mark.system_wide("searches")
def test_search_a():
    _span("searches")

@pytest.mark.system_wide("searches")
def test_search_b():
    _span("searches")
"""


@pytest.mark.process
def test_system_wide_writers_never_run_beside_another_marked_test(tmp_path: Path) -> None:
    """Four marked tests on four xdist workers: a writer's span overlaps no other marked test's
    (xdist's own grouping does not hold with pytest 9.2, so the lock is what keeps them apart);
    a mark with a mode other than the two is refused."""
    (tmp_path / "test_marked.py").write_text(SYSTEM_WIDE_TESTS)
    root = Path(__file__).resolve().parents[1]
    spans = tmp_path / "spans.txt"

    def pytest_in(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tests.system_wide", "-p", "no:cacheprovider",
             "-p", "no:randomly", "-n", "4", "-rf", "--rootdir", str(tmp_path), str(path)],
            cwd=root, capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "PYTHONPATH": str(root), "SPANS": str(spans),
                 "SPIDER2LOCAL_TESTS_SYSTEM_WIDE_LOCK": str(tmp_path / "lock")})

    done = pytest_in(tmp_path / "test_marked.py")
    assert "4 passed" in done.stdout, done.stdout[-3000:]
    found = [(kind, float(a), float(b)) for kind, a, b in
             (line.split() for line in spans.read_text().splitlines())]
    assert len(found) == 4
    for i, (kind, start, end) in enumerate(found):
        for j, (other, start2, end2) in enumerate(found):
            if i != j and "writes" in (kind, other):
                assert end <= start2 or end2 <= start, found  # disjoint
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n@pytest.mark.system_wide('reads')\ndef test_x():\n    pass\n")
    bad = pytest_in(tmp_path / "test_bad.py")
    assert "1 error" in bad.stdout and "takes 'writes' or 'searches', not 'reads'" \
        in bad.stdout, bad.stdout[-3000:]


SCHEDULED = {
    "test_quick.py": "def test_q1():\n    pass\n\ndef test_q2():\n    pass\n",
    "test_long.py": (
        "import os\nimport pytest\n\n"
        "@pytest.fixture(scope='module')\n"
        "def built():\n"
        "    with open(os.environ['BUILDS'], 'a') as fh:\n"
        "        fh.write(f'{os.getpid()}\\n')\n\n"
        + "".join(f"@pytest.mark.slow\ndef test_l{i}(built):\n    pass\n\n" for i in (3, 1, 2))),
    "test_middle.py": "import pytest\n\n@pytest.mark.process\ndef test_m():\n    pass\n",
}


@pytest.mark.process
def test_the_costliest_files_come_first_and_a_module_fixture_is_built_once(
        tmp_path: Path) -> None:
    """The order xdist hands files out in: by their tiers' cost, a file's own tests in their
    order; and under the suite's ``--dist`` a module fixture is built by one worker, however
    many workers there are (tests/schedule.py)."""
    for name, text in SCHEDULED.items():
        (tmp_path / name).write_text(text)
    builds = tmp_path / "builds.txt"
    addopts = next(line for line in (REPO / "pyproject.toml").read_text().splitlines()
                   if line.startswith("addopts"))
    dist = re.findall(r"--dist \S+|--no-loadscope-reorder", addopts)
    assert dist, addopts

    def pytest_in(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tests.tiers", "-p", "tests.schedule",
             "-p", "no:cacheprovider", "--full", "--rootdir", str(tmp_path), *args,
             *(str(tmp_path / name) for name in SCHEDULED)],
            cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "PYTHONPATH": str(REPO), "BUILDS": str(builds)})

    listed = pytest_in("--collect-only", "-q", "-p", "no:xdist")
    order = [line.split("::")[1] for line in listed.stdout.splitlines() if "::" in line]
    assert order == ["test_l3", "test_l1", "test_l2", "test_m", "test_q1", "test_q2"], \
        listed.stdout[-3000:]
    done = pytest_in("-n", "3", *" ".join(dist).split())
    assert "6 passed" in done.stdout, done.stdout[-3000:]
    assert len(builds.read_text().splitlines()) == 1  # not once per worker that got a test


CPU_TESTS = """
import subprocess, sys, time


def test_busy_child():
    subprocess.run([sys.executable, "-c",
                    "import time\\nend = time.process_time() + 0.6\\n"
                    "while time.process_time() < end: pass"], check=True)


def test_sleeps():
    time.sleep(0.6)
"""


@pytest.mark.process
@pytest.mark.parametrize("workers", ["0", "2"])
def test_cpu_durations_rank_by_cpu_not_by_the_clock(tmp_path: Path, workers: str) -> None:
    """A test whose child computes 0.6 s comes first, one that sleeps as long uses next to no
    CPU: the measure that decides the suite's time on busy cores (tests/cputime.py), the same
    from xdist's workers and without them."""
    (tmp_path / "test_cpu.py").write_text(CPU_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.cputime", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-n", workers, "--rootdir", str(tmp_path), "--cpu-durations=0",
         str(tmp_path / "test_cpu.py")],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "2 passed" in done.stdout, done.stdout[-3000:]
    lines = done.stdout.split("most CPU: ", 1)[1].splitlines()
    assert lines[0].startswith("6 of 6 phases"), lines  # setup, call, teardown of each
    calls = {line.split()[-1].split("::")[-1]: float(line.split()[0].rstrip("s"))
             for line in lines[1:] if " call " in line}
    assert calls["test_busy_child"] >= 0.5 and calls["test_sleeps"] < 0.2, calls
    first = lines[1]
    assert "test_busy_child" in first and " call " in first, lines

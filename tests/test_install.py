"""spider2local as its users run it (issue 27): installed from a wheel into a fresh venv, run
by root and by an unprivileged user, with the sandboxed Claude agent (the real CLI, a fake
Messages API on 127.0.0.1) and a command agent, and ``doctor`` as that user.

Every other test runs as root from an editable install, which is exactly where every
sandboxed agent worked while a wheel or a normal user broke them all. CI runs as root: the
unprivileged runs drop privileges here (``setpriv`` to a uid and gid that own nothing on the
machine), with an interpreter that user can run, a fresh HOME and an empty cache.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spider2local.dataset.sample import build as sample_build
from spider2local.sandbox.probe import probe
from spider2local.testing import FakeAnthropic, reply, tool
from tests.helpers import host_env
from tests.sandbox.test_probe import BROKEN_MOUNT

CHECKOUT = Path(__file__).resolve().parents[1]
SOLUTION = (Path(sample_build.__file__).resolve().parent / "solutions" / "gym001" / "models"
            / "membership_status.sql")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux's"),
    pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox here: {probe().reason}"),
]


@dataclass(frozen=True)
class User:
    """Who runs the CLI: ``prefix`` drops privileges to it (empty: this process's user)."""

    uid: int
    gid: int
    prefix: tuple[str, ...] = ()

    def chown(self, path: Path) -> None:
        if self.prefix:
            os.chown(path, self.uid, self.gid)


def _free_id(taken: Any) -> int:
    """An id in no passwd/group entry and owning nothing we made: nobody's files are its."""
    for candidate in range(47_000, 48_000):
        try:
            taken(candidate)
        except KeyError:
            return candidate
    raise AssertionError("no free id between 47000 and 48000")


def _unprivileged() -> User | str:
    """A user that owns nothing on the machine, or why there is none to switch to."""
    if os.geteuid() != 0:
        return User(os.getuid(), os.getgid())  # we already are one
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return "setpriv (util-linux) is not installed: cannot drop privileges"
    uid, gid = _free_id(pwd.getpwuid), _free_id(grp.getgrgid)
    return User(uid, gid, (setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"))


def _interpreter(user: User) -> Path | str:
    """A Python >= 3.11 that ``user`` can run (this test's own base interpreter may live in a
    home folder closed to others, as pyenv's does under /root), or why there is none."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix) / "bin"
    candidates = [base / version, base / "python3",
                  Path("/usr/bin/python3"), Path("/usr/local/bin/python3")]
    for python in dict.fromkeys(candidates):
        if not python.exists():
            continue
        # through a shell: setpriv exec'ing a path the user cannot reach ran another Python
        # (measured: /root/.pyenv/... printed the system's 3.11.2)
        check = subprocess.run([*user.prefix, "/bin/sh", "-c", 'exec "$0" -c "$1"', str(python),
                                "import sys, venv, ensurepip; assert sys.version_info >= (3, 11)"],
                               capture_output=True, timeout=60, check=False, cwd="/")
        if check.returncode == 0:
            return python
    tried = ", ".join(map(str, candidates))
    return f"no Python >= 3.11 with venv that uid {user.uid} can run ({tried})"


@dataclass
class Install:
    """The module's venv; not frozen: ``installed`` follows what pip last put there."""

    venv: Path
    wheel: Path
    user: User | str
    installed: tuple[str, ...] | None = None
    """The target the venv holds now (``None``: unknown, after a pip that failed): a test asks
    for the wheel, and pip runs only when another test left something else there (2-3 s of
    CPU a time)."""

    @property
    def cli(self) -> Path:
        return self.venv / "bin" / "spider2local"

    def reinstall(self, *target: str) -> None:
        """Make ``target`` the installed spider2local (the dependencies stay)."""
        if self.installed == target:
            return
        self.installed = None  # unknown until pip has succeeded
        _pip(self.venv, "install", "--no-deps", "--force-reinstall", *target)
        self.installed = target


def _pip(venv: Path, *args: str) -> None:
    """pip with the developer's own configuration (the session's fresh HOME has none: where
    the machine's package index is set up, it is set up there)."""
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "-q", *args],
                          capture_output=True, text=True, timeout=900, check=False, cwd="/",
                          env=host_env())
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def install() -> Iterator[Install]:
    """A wheel built from this checkout, installed with its dependencies into a fresh venv
    that the unprivileged user can read (created world-readable outside every home)."""
    user = _unprivileged()
    python = _interpreter(user) if isinstance(user, User) else Path(sys.executable)
    if isinstance(python, str):
        user, python = python, Path(sys.executable)  # root's tests still run; the user's skip
    base = Path(tempfile.mkdtemp(prefix="spider2local-install-"))
    base.chmod(0o755)
    try:
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                                "-w", str(base / "wheels"), str(CHECKOUT)],
                               capture_output=True, text=True, timeout=600, check=False,
                               env=host_env())
        assert built.returncode == 0, built.stderr[-3000:]
        wheel = next((base / "wheels").glob("spider2local-*.whl"))
        venv = base / "venv"
        made = subprocess.run([str(python), "-m", "venv", str(venv)], capture_output=True,
                              text=True, timeout=300, check=False)
        assert made.returncode == 0, made.stderr
        _pip(venv, "install", str(wheel))
        yield Install(venv, wheel, user, (str(wheel),))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _scripted_work() -> str:
    """What both agents do: write gym001's model (its reference solution) and run dbt."""
    return (f"cat > models/membership_status.sql <<'SQL_EOF'\n{SOLUTION.read_text()}\n"
            f"SQL_EOF\ndbt run")


@dataclass(frozen=True)
class Outcome:
    proc: subprocess.CompletedProcess[str]
    results: Mapping[str, Mapping[str, Any]]


def _run_cli(install: Install, user: User | None, args: list[str], *,
             extra_path: Path | None = None, fake: FakeAnthropic | None = None) -> Outcome:
    """``spider2local ARGS`` from the installed venv, as ``user`` (None: this process's), in a
    fresh folder with a fresh HOME and cache, the environment a user's shell would have."""
    work = Path(tempfile.mkdtemp(prefix="spider2local-user-"))
    work.chmod(0o755)
    try:
        home = work / "home"
        home.mkdir()
        if user is not None:
            user.chown(work)
            user.chown(home)
        path = f"{install.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
        env = {"PATH": f"{extra_path}:{path}" if extra_path else path, "HOME": str(home),
               "LANG": "C.UTF-8", "PYTHONWARNINGS": "ignore",
               **(fake.env() if fake is not None else {})}
        prefix = user.prefix if user is not None else ()
        proc = subprocess.run([*prefix, str(install.cli), "--dataset", "sample", *args],
                              cwd=work, env=env, capture_output=True, text=True, timeout=600,
                              check=False, stdin=subprocess.DEVNULL)
        results = {p.parent.name: json.loads(p.read_text())
                   for p in work.glob("runs/t/*/result.json")}
        return Outcome(proc, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run_agents(install: Install, user: User | None,
                extra_path: Path | None = None) -> dict[str, Outcome]:
    """gym001 by the sandboxed Claude agent and by a command agent, each doing the same work."""
    work = _scripted_work()
    runs = {}
    with FakeAnthropic([reply(tool("Bash", command=work)), reply("Done.")]) as fake:
        runs["claude"] = _run_cli(install, user, [
            "run", "gym001", "--agent", "claude", "--verify-rounds", "0", "--retries", "0",
            "--isolation", "namespace", "--runs-dir", "runs", "--run-id", "t"],
            extra_path=extra_path, fake=fake)
    runs["command"] = _run_cli(install, user, [
        "run", "gym001", "--agent", "command", "--agent-command", f"{work}; echo done",
        "--retries", "0", "--isolation", "namespace", "--runs-dir", "runs", "--run-id", "t"],
        extra_path=extra_path)
    return runs


def _assert_passed(runs: Mapping[str, Outcome]) -> None:
    for agent, outcome in runs.items():
        assert outcome.proc.returncode == 0, (agent, outcome.proc.stderr[-3000:])
        result = outcome.results["gym001"]
        assert result["isolation"] == "namespace", (agent, result)
        assert result["status"] == "passed", (agent, result["error"], outcome.proc.stderr[-2000:])


def _user(install: Install) -> User:
    if isinstance(install.user, str):
        pytest.skip(install.user)
    return install.user


def test_a_wheel_run_by_root_sandboxes_both_agents(install: Install) -> None:
    """Before: the Claude agent's trial was infrastructure after its retries, the command
    agent's "failed" as the agent's own ("exited with status 32"): the plan mounted /dev/null
    over the bundled tasks.toml, inside the hidden package."""
    install.reinstall(str(install.wheel))
    _assert_passed(_run_agents(install, None))


def test_an_unprivileged_user_runs_both_agents_and_doctor_from_a_wheel(install: Install) -> None:
    """Before: every sandbox failed for a normal user ("mount point not mounted or bad option"
    on the start copy's read-only tmpfs; then the CLI refused bypassPermissions as the root of
    its namespace) while doctor said the sandbox worked."""
    user = _user(install)
    install.reinstall(str(install.wheel))
    _assert_passed(_run_agents(install, user))
    doctor = _run_cli(install, user, ["doctor", "--no-clock-test"])
    line = next(x for x in doctor.proc.stdout.splitlines() if "isolation:" in x)
    assert line.startswith("ok"), doctor.proc.stdout
    assert "an agent's sandbox was built and reached its gateway" in line


@pytest.fixture
def shims() -> Iterator[Path]:
    """A folder the unprivileged user can reach (pytest's tmp_path sits in a 0700 folder)."""
    folder = Path(tempfile.mkdtemp(prefix="spider2local-shims-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_broken_mount_is_infrastructure_for_both_agents_and_doctor_fails(
        install: Install, shims: Path) -> None:
    """A mount of the agent's sandbox that fails (here a real mount sent to a missing point)
    is the machine's fault: both trials are infrastructure with mount's own line, never a
    verdict, and doctor says FAIL with the same line."""
    user = _user(install)
    install.reinstall(str(install.wheel))
    real = shutil.which("mount")
    assert real is not None
    (shims / "mount").write_text(BROKEN_MOUNT.format(mount=shlex.quote(real)))
    (shims / "mount").chmod(0o755)
    expected = "/.start/missing: mount point does not exist."
    for agent, outcome in _run_agents(install, user, extra_path=shims).items():
        result = outcome.results["gym001"]
        assert result["status"] == "error", (agent, result)
        error = result["error"]
        assert error["kind"] == "infrastructure", (agent, error)
        assert error["message"].startswith("sandbox could not be built: mount: "), error
        assert error["message"].endswith(expected), error
    doctor = _run_cli(install, user, ["doctor", "--no-clock-test"], extra_path=shims)
    assert doctor.proc.returncode == 1
    line = next(x for x in doctor.proc.stdout.splitlines() if "isolation:" in x)
    assert line.startswith("FAIL  isolation: namespace: sandbox could not be built: mount: ")
    assert expected in line


def test_an_unprivileged_user_runs_the_sandboxed_agent_from_an_editable_install(
        install: Install) -> None:
    """The source checkout's layout (resources beside the package) as a normal user."""
    user = _user(install)
    if subprocess.run([*user.prefix, "test", "-r", str(CHECKOUT / "pyproject.toml")],
                      check=False).returncode != 0:
        pytest.skip(f"the checkout {CHECKOUT} is not readable by uid {user.uid}")
    install.reinstall("-e", str(CHECKOUT))
    try:
        _assert_passed(_run_agents(install, user))
    finally:
        install.reinstall(str(install.wheel))

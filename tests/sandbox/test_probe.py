"""The sandbox probe degrades visibly: a machine it cannot sandbox on is a reason and a fix."""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from spider2local.sandbox import launcher
from spider2local.sandbox.probe import Probe, check_agent_sandbox, probe, run_probe


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_a_tmpdir_too_long_for_a_unix_socket_is_a_reason_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    long = tmp_path / ("d" * 60) / ("e" * 60)
    long.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    found = run_probe()
    assert not found.ok
    assert "Unix socket" in found.reason and "shorter" in found.fix


BROKEN_MOUNT = """#!/bin/sh
# util-linux mount, except that a mount onto a workspace's start copy (.start) is sent to a
# point that does not exist: a real mount failing with its real message
n=$#; i=0
for a in "$@"; do
    i=$((i + 1))
    case "$i:$a" in "$n:"*/.start) a="$a/missing" ;; esac
    set -- "$@" "$a"
done
shift "$n"
exec {mount} "$@"
"""


def broken_mount(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put a ``mount`` first on PATH that fails on the start copy's mount point, and forget
    the tools this process found before (they are looked up once per process)."""
    real = shutil.which("mount")
    assert real is not None
    folder.mkdir()
    (folder / "mount").write_text(BROKEN_MOUNT.format(mount=real))
    (folder / "mount").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.setattr(launcher, "_found_tools",
                        functools.cache(launcher._found_tools.__wrapped__))
    monkeypatch.setattr(launcher, "bind_function",
                        functools.cache(launcher.bind_function.__wrapped__))


@pytest.mark.process
@pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox here: {probe().reason}")
def test_the_agent_sandbox_check_builds_the_real_thing_and_names_a_failed_mount(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """doctor's check builds what an agent gets: it passes here, and with one mount of the
    agent's plan broken it fails with that mount's own message, while the capability probe
    (a bare sandbox, which has no start copy) still passes: the probe alone said "ok" where
    every agent's sandbox failed (issue 27)."""
    secret = tmp_path / "dataset"
    secret.mkdir()
    assert check_agent_sandbox([secret], ".start") == Probe(True)
    broken_mount(tmp_path / "bin", monkeypatch)
    assert run_probe().ok
    found = check_agent_sandbox([secret], ".start")
    assert not found.ok
    assert found.reason.startswith("sandbox could not be built: mount: "), found.reason
    assert found.reason.endswith("/.start/missing: mount point does not exist."), found.reason
    assert "--isolation none" in found.fix

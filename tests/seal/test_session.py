"""The seal, as an agent gets it: one call gives the gateway, the database tools, the sandbox
(or the visible fallback), the sweep and the launcher's verdict, for any program."""

from __future__ import annotations

import datetime as dt
import os
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from spider2local.core.transcript import Transcript
from spider2local.dataset.load import load_dataset
from spider2local.gateway.server import ApiCall, Upstream
from spider2local.proc.procfs import carrying_env
from spider2local.proc.run import run_process
from spider2local.sandbox.isolation import IsolationMode
from spider2local.sandbox.launcher import DeathWrapper, Launcher
from spider2local.sandbox.probe import probe
from spider2local.seal.processes import MARKER_ENV
from spider2local.seal.session import is_sealed, open_seal
from spider2local.suite.model import Suite
from spider2local.workspace.model import Workspace
from spider2local.workspace.prepare import cleanup_workspace, prepare_workspace
from tests.sandbox.test_probe import broken_mount

NAMESPACES = pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox: {probe().reason}")


class _Meter:
    def begin(self, call: ApiCall) -> None:
        pass

    def event(self, call: ApiCall, data: Mapping[str, Any]) -> None:
        pass

    def end(self, call: ApiCall, status: int) -> None:
        pass


DATE = dt.date(2024, 9, 15)


def _workspace(tmp_path: Path, tiny_dataset: Callable[..., Path]) -> tuple[Workspace, Path]:
    root = tiny_dataset("t1", gold_tables={"orders": "SELECT 1 AS id"})
    dataset = load_dataset(Suite(path=Path("tasks.toml"), dataset=root))
    ws = prepare_workspace(dataset.tasks[0], artifacts=tmp_path / "art", parent=tmp_path)
    return ws, root


def _open(ws: Workspace, root: Path, isolation: IsolationMode, transcript: Transcript,
          **extra: Any) -> Any:
    return open_seal(ws, isolation=isolation, off_limits=[root], transcript=transcript,
                     upstreams=[Upstream(base_url="http://127.0.0.1:9")],
                     meter=_Meter(), record=ws.artifacts / "api.jsonl", task_budget_usd=None,
                     run_budget=None, date=DATE, **extra)


def test_only_the_namespace_mode_is_sealed() -> None:
    assert is_sealed(IsolationMode.NAMESPACE)
    assert not is_sealed(IsolationMode.NONE) and not is_sealed(IsolationMode.NOT_NEEDED)


@pytest.mark.process
@NAMESPACES
def test_a_sealed_program_sees_its_workspace_and_tools_nothing_off_limits_and_is_swept(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    ws, root = _workspace(tmp_path, tiny_dataset)
    transcript = Transcript(tmp_path / "transcript.jsonl")
    gold = root / "evaluation_suite" / "gold" / "t1" / "shop.duckdb"
    script = textwrap.dedent(f"""\
        test -e {gold} && echo GOLD-SEEN || echo gold-absent
        test -e {ws.start_copy} && echo START-COPY-SEEN || echo start-copy-absent
        test -S "$TOOLS" && echo tools-socket
        touch {ws.project_dir}/written-inside && echo wrote
        """)

    async def main() -> str:
        async with _open(ws, root, IsolationMode.NAMESPACE, transcript,
                         serve_tools=True) as seal:
            assert seal.sealed and seal.socket is not None and seal.tools is not None
            assert seal.base_urls[0].startswith("http://") and len(seal.base_urls) == 1
            program = seal.program(Path("/bin/sh"))
            assert isinstance(program.launcher, Launcher)
            env = {**ws.env, MARKER_ENV: seal.marker, "TOOLS": str(seal.tools)}
            done = await run_process([*program.argv, "-c", script], cwd=ws.project_dir,
                                     env=env, timeout=120)
            assert seal.finish(program) is None  # built: no failure
            assert not program.launcher.folder.exists()  # removed
            return done.stdout

    try:
        out = anyio.run(main)
        assert "gold-absent" in out and "start-copy-absent" in out, out
        assert "tools-socket" in out and "wrote" in out, out
        assert (ws.project_dir / "written-inside").exists()
    finally:
        cleanup_workspace(ws)


@pytest.mark.process
def test_unsealed_the_program_dies_with_the_runner_or_runs_as_itself(
        tmp_path: Path, tiny_dataset: Callable[..., Path]) -> None:
    ws, root = _workspace(tmp_path, tiny_dataset)
    transcript = Transcript(tmp_path / "transcript.jsonl")

    async def main() -> None:
        async with _open(ws, root, IsolationMode.NONE, transcript) as seal:
            assert not seal.sealed and seal.socket is None and seal.tools is None
            assert seal.base_urls[0].startswith("http://127.0.0.1:")
            wrapped = seal.program(Path("/bin/sh"))
            assert wrapped.launcher is None or isinstance(wrapped.launcher, DeathWrapper)
            bare = seal.program(Path("/bin/sh"), die_with_runner=False)
            assert bare.argv == ["/bin/sh"] and bare.failure() is None
            # a process of the session left behind (in a session of its own, out of the
            # process group its starter kills) is swept when the seal closes
            env = {**os.environ, MARKER_ENV: seal.marker}
            # the starter waits for the child's own pid file, written after its setsid(): a
            # starter that returned at once had its group killed by run_process while the
            # forked child was still in it (measured in CI under load: nothing left to find);
            # the child keeps none of the starter's pipes (run_process waited 30 s for them)
            left = tmp_path / "left.pid"
            await run_process(["sh", "-c", 'setsid -f sh -c \'echo $$ > "$0"; exec sleep 300\' '
                               '"$0" </dev/null >/dev/null 2>&1; '
                               'while [ ! -s "$0" ]; do sleep 0.01; done', str(left)],
                              env=env, timeout=30)
            found: list[int] = []
            for _ in range(600):  # the detached child may not be listed at once (30 s at most)
                found = carrying_env(MARKER_ENV, seal.marker)
                if found:
                    break
                await anyio.sleep(0.05)
            pids.extend(found)
            assert pids and all(_alive(pid) for pid in pids)  # running until the seal closes
        assert wrapped.launcher is None or not wrapped.launcher.folder.exists()

    pids: list[int] = []
    try:
        anyio.run(main)
        assert pids and not _alive(pids[0])
    finally:
        cleanup_workspace(ws)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.process
@NAMESPACES
def test_a_sandbox_that_cannot_be_built_is_recorded_and_returned_by_finish(
        tmp_path: Path, tiny_dataset: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    ws, root = _workspace(tmp_path, tiny_dataset)
    transcript = Transcript(tmp_path / "transcript.jsonl")
    broken_mount(tmp_path / "bin", monkeypatch)

    async def main() -> str | None:
        async with _open(ws, root, IsolationMode.NAMESPACE, transcript) as seal:
            program = seal.program(Path("/bin/sh"))
            await run_process([*program.argv, "-c", "echo ran"], cwd=ws.project_dir,
                              env={**ws.env, MARKER_ENV: seal.marker}, timeout=120)
            return seal.finish(program)
        return None

    try:
        failure = anyio.run(main)
        assert failure is not None and failure.startswith("sandbox could not be built: ")
        assert ".start" in failure, failure
        assert '"sandbox": "sandbox could not be built' in (tmp_path / "transcript.jsonl") \
            .read_text()
    finally:
        cleanup_workspace(ws)

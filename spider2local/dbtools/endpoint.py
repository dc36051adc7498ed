"""The database tools for a command agent: the runner serves them on a Unix socket for the
lifetime of the agent's session, and the agent's MCP client reaches them through a bridge.

Why a socket and not ``spider2local mcp-server`` started by the agent's client: inside the
sandbox the spider2local package is hidden (it holds the scorer), so the server cannot run
there; and a server the agent starts is the agent's to change. Here the server runs in the
runner, with the :class:`~spider2local.dbtools.query.QueryService` the runner built before the
agent started (the one the Claude session's in-process tools use: same policy, ``start``
catalog, limits, fake date and query log, ``queries.jsonl`` in the task folder), and serves
each connection as its own MCP session (:func:`spider2local.dbtools.server.serve_stream`): the
agent and a sub-agent each get theirs. The agent's MCP config (:func:`write_client_config`)
runs :mod:`.bridge`, a standard-library pipe from its stdio to the socket.

The socket lies in a runner-private folder (mode 0700) in the temporary folder, as the model
gateway's does, and the sandbox binds the socket alone into its root: its path is no longer
than the gateway's, whose fit in a Unix socket address the sandbox probe checks
(:func:`spider2local.sandbox.probe.run_probe`). Everything arriving on it is the agent's, so
it is bounded (:class:`EndpointLimits`): a connection beyond ``connections`` is closed at once,
tool calls run at most ``calls`` at a time across all connections, and each connection is
bounded as :class:`StreamLimits` says; no connection's failure reaches the run.

``mcp`` is imported on the first connection, in a worker thread (it costs 1-4 s): a command
agent that never uses the tools never pays it, and the event loop is not held while it loads.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from spider2local.dbtools.query import QueryService
from spider2local.proc.serving import serving
from spider2local.proc.tempdirs import make_owned_dir

log = logging.getLogger(__name__)

SOCKET_NAME = "mcp.sock"
"""No longer than the gateway's ``api.sock``, in a folder named no longer than its (``mcp``
against ``gateway``): where the probe found the gateway's socket path to fit, this fits."""
SOCKET_KIND = "mcp"
BRIDGE_NAME = "mcp-bridge.py"
CONFIG_NAME = "mcp.json"
SERVER_NAME = "spider2"
"""The name in the MCP config (:data:`spider2local.dbtools.server.SERVER_NAME`; Claude Code
then calls the tools ``mcp__spider2__query``..., as the Claude session names them)."""
ACCEPT_RETRY = 0.1
"""Seconds before accepting again after ``accept`` failed (out of file descriptors)."""


@dataclass(frozen=True)
class StreamLimits:
    """What one connection may cost the runner."""

    max_line: int = 4 << 20
    """Bytes of one JSON-RPC message (a query's SQL is far smaller); a longer one is answered
    with an error when its id can be read, and skipped without being held."""
    in_flight: int = 8
    """Requests of one connection read and not yet answered: a flood waits in the client's
    socket, not in the runner's memory."""
    send_timeout: float = 60.0
    """Seconds an answer may wait for the client to read it; then the connection ends."""
    chunk: int = 64 * 1024


@dataclass(frozen=True)
class EndpointLimits:
    connections: int = 8
    """Connections served at once (an agent, its sub-agents, a retry or two)."""
    calls: int = 4
    """Tool calls running at once across all connections (each query is a child process)."""
    stream: StreamLimits = field(default_factory=StreamLimits)


@dataclass
class ToolSocket:
    """A serving socket: where it is, and what it saw (for the transcript)."""

    path: Path
    served: int = 0
    refused: int = 0
    """Connections closed at once because ``connections`` were already open."""
    failed: int = 0
    """Connections that ended in an unexpected error (logged with their traceback)."""
    active: int = 0

    def summary(self) -> dict[str, int]:
        return {"connections": self.served, "refused": self.refused, "failed": self.failed}


@contextlib.asynccontextmanager
async def open_tool_socket(service: QueryService, limits: EndpointLimits = EndpointLimits()
                           ) -> AsyncIterator[ToolSocket]:
    """Serve ``service``'s tools on a fresh Unix socket while the block runs; on leaving it,
    every connection is closed (their tool calls cancelled, query children killed) and the
    socket's folder removed. Raises OSError when the socket cannot be made (the temporary
    folder's path too long for a socket address, a full disk)."""
    folder = make_owned_dir(SOCKET_KIND)  # a kill -9's leftover is recovered by name
    try:
        path = folder / SOCKET_NAME
        listener = await anyio.create_unix_listener(path, mode=0o600)
        state = ToolSocket(path)
        calls = anyio.CapacityLimiter(limits.calls)
        async with serving(listener, lambda tg: tg.start_soon(
                _accept, listener, tg, state, service, limits, calls)):
            yield state
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _accept(listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup,
                  state: ToolSocket, service: QueryService, limits: EndpointLimits,
                  calls: anyio.CapacityLimiter) -> None:
    """Accept until the listener closes. An accept that fails (EMFILE) is retried after a
    pause instead of ending the loop (anyio's ``serve`` would raise into the run)."""
    while True:
        try:
            stream = await listener.accept()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return
        except OSError as exc:
            log.warning("database tools: accept failed: %s", exc)
            await anyio.sleep(ACCEPT_RETRY)
            continue
        tg.start_soon(_connection, stream, state, service, limits, calls)


async def _connection(stream: anyio.abc.ByteStream, state: ToolSocket, service: QueryService,
                      limits: EndpointLimits, calls: anyio.CapacityLimiter) -> None:
    async with stream:
        if state.active >= limits.connections:
            state.refused += 1
            return
        state.active += 1
        state.served += 1
        try:
            # mcp is heavy: loaded off the event loop, once, by the first connection
            await anyio.to_thread.run_sync(importlib.import_module, "spider2local.dbtools.server")
            from spider2local.dbtools.server import serve_stream

            await serve_stream(service, stream, limits.stream, calls)
        except Exception:  # the agent's bytes must never end the run
            state.failed += 1
            log.warning("database tools: a connection failed", exc_info=True)
        finally:
            state.active -= 1


def bridge_source() -> str:
    return (Path(__file__).parent / "bridge.py").read_text(encoding="utf-8")


def write_client_config(folder: Path, socket: Path) -> Path:
    """The agent's MCP client config (``mcpServers``, the shape Claude Code's ``--mcp-config``
    and most clients read) starting :mod:`.bridge` to ``socket``, beside the bridge's copy in
    ``folder``; returns the config's path. The interpreter is the runtime's, which every
    sandbox binds read-only; ``-I -S``: nothing of the agent's folders or site-packages is
    imported by it."""
    bridge = folder / BRIDGE_NAME
    bridge.write_text(bridge_source(), encoding="utf-8")
    config = folder / CONFIG_NAME
    config.write_text(json.dumps({"mcpServers": {SERVER_NAME: {
        "command": sys.executable, "args": ["-I", "-S", str(bridge), str(socket)]}}},
        indent=2) + "\n", encoding="utf-8")
    return config

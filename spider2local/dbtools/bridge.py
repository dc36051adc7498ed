"""The MCP bridge: what a command agent's MCP client starts as the ``spider2`` stdio server.

It is not a server: it pipes the client's stdin to the runner's tool socket
(:mod:`spider2local.dbtools.endpoint`) and the socket's bytes back to stdout, so every tool
call is answered in the runner by the one implementation of the tools. Run as ``python -I -S
<this file> SOCKET`` (written beside the agent's MCP config; inside the sandbox the
spider2local package is hidden, so this file imports nothing of ours and only the standard
library). It exits when either side closes: the client's stdin (its half of the socket is
shut, the runner ends the session, the socket closes) or the socket (the runner ended the
session: the agent finished or was stopped).

The agent can run, change or replace this file: it only ever reaches the socket, which speaks
MCP and nothing else; the runner treats whatever arrives there as untrusted.
"""

import contextlib
import os
import socket
import sys
import threading

CHUNK = 65536


def upstream(sock: socket.socket) -> None:
    """stdin to the socket, until stdin ends; then the socket's sending half is shut."""
    try:
        while True:
            data = os.read(0, CHUNK)
            if not data:
                break
            sock.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -I -S bridge.py SOCKET", file=sys.stderr)
        return 2
    path = sys.argv[1]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        print(f"spider2local mcp bridge: the database tools are not reachable at {path}: "
              f"{exc.strerror or exc} (they are served while the runner runs this task's "
              "agent)", file=sys.stderr)
        return 1
    threading.Thread(target=upstream, args=(sock,), daemon=True).start()
    try:
        while True:
            data = sock.recv(CHUNK)
            if not data:
                break
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
    except OSError:  # the client closed its stdout, or the runner went away
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The relay: the one way out of a sealed sandbox's network namespace.

Run INSIDE the sandbox (after ``pivot_root``, as ``python -I -S -c <this file's text> SOCKET
PORT``; the spider2local package itself is hidden there, so this file imports nothing of ours
and only the standard library), it

1. brings the namespace's loopback interface up (a fresh network namespace has only ``lo``,
   and it is down; ``SIOCSIFFLAGS`` needs CAP_NET_ADMIN over the namespace, which the
   launcher's first user namespace has: no ``ip`` tool needed);
2. listens on ``127.0.0.1:PORT`` (the agent's API base URL points there);
3. forks: the parent exits 0 once the port listens, so the launcher starts the program only
   when its API is reachable, and exits non-zero (with a message) when it cannot be;
4. pumps the bytes of each TCP connection to a new connection to the gateway's Unix socket
   (bound into the sandbox) and back. It does not parse HTTP: the gateway, in the runner,
   decides everything. When the runner dies its socket's server goes with it: connecting
   then fails (ECONNREFUSED) and open connections end (EOF), so nothing more is served.

The agent can kill or trace this process (same user, same PID namespace); it then only loses
its own way to the API. It reaches nothing the socket does not already offer.
"""

import contextlib
import fcntl
import os
import socket
import struct
import sys
import threading

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
CHUNK = 65536


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, request)[:18])[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def serve(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:  # the runner is gone: refuse, so the client fails at once
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main() -> int:
    path, port = sys.argv[1], int(sys.argv[2])
    try:
        loopback_up()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(64)
    except OSError as exc:
        print(f"spider2local relay: cannot listen on 127.0.0.1:{port}: {exc}", file=sys.stderr)
        return 1
    if os.fork():
        return 0
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(client, path), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())

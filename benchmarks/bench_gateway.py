"""What do the model gateway and the network seal cost? Three figures, side by side:

1. per API call (a streamed Messages reply from a minimal loopback API, read whole by a
   keep-alive client as the CLI does): direct, through the gateway on TCP (isolation none),
   and through the relay and the gateway's Unix socket (the sealed path; the relay's code runs
   on the host here, on a free port). Calls alternate between the paths so load drifts into all
   equally; medians are compared. Target: the gateway adds < 5 ms per call on loopback.
2. the sandbox's start, around ``/bin/sh -c 'exit 0'``: without and with the network seal
   (its own network namespace, loopback up, the relay started);
3. one whole Claude session (real SDK and CLI, one scripted reply): isolation none (gateway on
   TCP) vs namespace (sealed), as in bench_sandbox.py.

    .venv/bin/python benchmarks/bench_gateway.py [--calls 200] [--reps 5]
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx

from spider2local.gateway.anthropic import ApiUsage
from spider2local.gateway.server import Served, Upstream, open_gateway
from spider2local.sandbox import relay
from spider2local.sandbox.launcher import Launcher, SandboxSpec
from spider2local.sandbox.network import NetworkSeal
from spider2local.sandbox.probe import probe
from spider2local.testing.script import Reply
from spider2local.testing.sse import message_json, stream_events

TARGET_MS = 5.0
BODY = (b'{"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true, '
        b'"messages": [{"role": "user", "content": "hi"}]}')


class GatewayThread:
    """A gateway (both listeners) served from its own event loop in a thread."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.tcp: Served | None = None
        self.unix: Served | None = None
        self.thread = threading.Thread(target=lambda: anyio.run(self._main), daemon=True)

    async def _main(self) -> None:
        api = [Upstream(self.upstream, headers={"x-api-key": "bench"})]
        async with open_gateway(api, ApiUsage(), sealed=False) as tcp, \
                open_gateway(api, ApiUsage(), sealed=True) as unix:
            self.tcp, self.unix = tcp, unix
            self.ready.set()
            await anyio.to_thread.run_sync(self.stop.wait)

    def __enter__(self) -> GatewayThread:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)


def start_relay(path: Path) -> int:
    """The relay's own pumping code (:func:`relay.serve`) on a free port, in threads of this
    process (the launcher runs it as a forked process inside the sandbox)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=relay.serve, args=(client, str(path)), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return int(listener.getsockname()[1])


class Upstream_:
    """A minimal Messages API: one streamed reply, written in one piece with Nagle off. (The
    test fake writes headers and body apart, and the client's delayed ACK then costs ~40 ms
    per direct call: a baseline that would flatter the gateway.)"""

    def __init__(self) -> None:
        answer = b"".join(stream_events(message_json(Reply(("ok",), input_tokens=5,
                                                           output_tokens=2),
                                                     "claude-sonnet-4-5", None)))
        head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: %d\r\n\r\n" % len(answer))

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.wfile.write(head + answer)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Upstream_:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()


def per_call(calls: int) -> dict[str, list[float]]:
    with Upstream_() as fake, GatewayThread(fake.base_url) as gw:
        assert gw.tcp is not None and gw.unix is not None and gw.unix.socket is not None
        port = start_relay(gw.unix.socket)
        paths = {"direct": f"{fake.base_url}/v1/messages",
                 "gateway (tcp)": f"{gw.tcp.base_urls[0]}/v1/messages",
                 "relay + socket": f"http://127.0.0.1:{port}/u0/v1/messages"}
        times: dict[str, list[float]] = {name: [] for name in paths}
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]  # as the CLI's runtime does
        clients = {name: httpx.Client(timeout=10, transport=httpx.HTTPTransport(
            socket_options=nodelay)) for name in paths}
        try:
            for name, url in paths.items():  # warm each connection
                clients[name].post(url, content=BODY).raise_for_status()
            order = list(paths.items())
            for _ in range(calls):
                random.shuffle(order)  # no path always follows another (a warm event loop)
                for name, url in order:
                    started = time.perf_counter()
                    response = clients[name].post(url, content=BODY)
                    response.read()
                    times[name].append(time.perf_counter() - started)
                    if b"message_stop" not in response.content:
                        raise SystemExit(f"{name}: incomplete answer {response.content[:200]!r}")
        finally:
            for client in clients.values():
                client.close()
    return times


def launcher_start(reps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"plain": [], "network sealed": []}
    with tempfile.TemporaryDirectory(prefix="bench-gw-") as folder, \
            socket.socket(socket.AF_UNIX) as listener:
        sock = Path(folder) / "api.sock"
        listener.bind(str(sock))
        listener.listen(1)
        specs: dict[str, Callable[[], SandboxSpec]] = {
            "plain": lambda: SandboxSpec(program=Path("/bin/sh")),
            "network sealed": lambda: SandboxSpec(program=Path("/bin/sh"),
                                                  network=NetworkSeal(sock))}
        for _ in range(reps):
            for name, spec in specs.items():
                launcher = Launcher(spec())
                try:
                    started = time.perf_counter()
                    subprocess.run([str(launcher.path), "-c", "exit 0"], check=True, cwd="/")
                    times[name].append(time.perf_counter() - started)
                finally:
                    launcher.remove()
    return times


def sessions(reps: int) -> dict[str, list[float]]:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_sandbox import one_session

    from spider2local.sandbox.isolation import IsolationMode

    times: dict[str, list[float]] = {"none (gateway tcp)": [], "namespace (sealed)": []}
    with tempfile.TemporaryDirectory(prefix="bench-gw-") as tmp:
        one_session(IsolationMode.NONE, Path(tmp))  # warm the caches
        for _ in range(reps):
            times["none (gateway tcp)"].append(one_session(IsolationMode.NONE, Path(tmp)))
            times["namespace (sealed)"].append(one_session(IsolationMode.NAMESPACE, Path(tmp)))
    return times


def show(title: str, times: dict[str, list[float]], unit: float, label: str) -> list[float]:
    print(title)
    medians = []
    for name, values in times.items():
        median = statistics.median(values) * unit
        medians.append(median)
        print(f"  {name:>20}: median {median:8.2f} {label}  (p90 "
              f"{sorted(values)[int(len(values) * 0.9) - 1] * unit:.2f}, n={len(values)})")
    return medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    direct, tcp, relayed = show("per API call (streamed reply, keep-alive):",
                                per_call(args.calls), 1000, "ms")
    added = max(tcp - direct, relayed - direct)
    print(f"  gateway adds {tcp - direct:+.2f} ms (tcp), {relayed - direct:+.2f} ms "
          f"(relay + socket) per call; target < {TARGET_MS} ms: "
          f"{'ok' if added < TARGET_MS else 'MISSED'}")
    if not probe().ok:
        print(f"no namespace sandbox here ({probe().reason}): no sandbox figures")
        return 0 if added < TARGET_MS else 1
    plain, sealed = show("sandbox start (/bin/sh -c 'exit 0'):", launcher_start(args.reps * 2),
                         1000, "ms")
    print(f"  the network seal adds {sealed - plain:+.1f} ms per sandbox")
    none, boxed = show("one Claude session (1 scripted reply):", sessions(args.reps), 1, "s")
    print(f"  sandbox overhead per session with the network seal: {boxed - none:+.3f} s "
          f"(ratio {boxed / none:.2f})")
    return 0 if added < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())

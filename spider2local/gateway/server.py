"""The model gateway: the only way an agent's processes reach a model API.

Runs in the runner's event loop, one per agent session. The agent's process gets base URLs
that point at it (through the sandbox's relay and a Unix socket when the network is sealed;
at a loopback TCP port when it is not), one per upstream the agent declared. For each request
the gateway:

- forwards it only to the declared upstream of its route, only below the allowed paths,
  with the real credential added here (the agent's environment carries a placeholder) and the
  agent's own credential headers dropped;
- streams the answer back as it arrives and shows every event to the agent's :class:`Meter`
  (for a Messages API: ``message_start``/``message_delta`` usage, the model, the text): what
  the model's server said, not what the agent's process prints, so nothing the agent writes
  into its own output can change the usage, the cost or what the verifier answered;
- charges the session's and the run's :class:`~.budget.Budget` (the run's through the trial's
  :class:`~.budget.Share`) and refuses every request once one is spent (an API error the
  client does not retry);
- records the exchange: capped for people to read (:mod:`.record`), and in full with a
  fingerprint of the request for a replay (:mod:`.replay`);
- or, replaying a recorded trial (a :class:`~.replay.Tape` with a playback), answers each
  request from the recording without calling any API: no credential is added, nothing is
  charged, and a request that differs from the recorded one is refused (the replay stops).

When the runner dies, the socket's server dies with it: nothing more is served.

For an agent of any vendor: declare the upstreams it needs (``[Upstream(base_url, headers=
{credential}, paths=...)]``), give its process the ``base_urls`` :func:`open_gateway` returns
(and, sealed, :class:`~spider2local.sandbox.network.NetworkSeal` of ``socket`` in its sandbox
spec), and a :class:`Meter` that reads its API's usage (:class:`CallCounter` when none can).

HTTP/1.1 is spoken with h11 (sans-IO; what httpx itself is built on) on anyio streams, and
upstream through httpx: a hand-written parser would be the riskiest part of a component that
reads untrusted bytes.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import re
import shutil
import socket
import ssl
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
import h11
import httpx

from spider2local.gateway.budget import Cap
from spider2local.gateway.record import ExchangeLog
from spider2local.gateway.replay import (
    RESPONSE_CAP,
    Divergence,
    Fingerprint,
    Recorded,
    Tape,
    route_of,
)
from spider2local.proc.serving import serving
from spider2local.proc.tempdirs import make_owned_dir
from spider2local.sandbox.network import relay_base_url

log = logging.getLogger(__name__)

SOCKET_NAME = "api.sock"
MAX_REQUEST = 64 * 1024 * 1024
"""Bytes of one request body (a conversation with tool results; images are far smaller)."""
MAX_JSON_RESPONSE = 32 * 1024 * 1024
"""Bytes of a non-streamed response kept for the meter."""
UPSTREAM_TIMEOUT = httpx.Timeout(connect=30.0, read=600.0, write=60.0, pool=30.0)
"""The read timeout matches the Claude CLI's own default (``API_TIMEOUT_MS``, 10 minutes)."""
_HOP = frozenset({"host", "connection", "keep-alive", "proxy-connection", "transfer-encoding",
                  "te", "trailer", "upgrade", "content-length", "accept-encoding",
                  "proxy-authorization"})
_SEGMENT = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9_.~-]*")
REFUSED_STATUS = 400
"""A refusal is an ``invalid_request_error``: clients do not retry a 4xx other than 408/429."""


@dataclass(frozen=True)
class Upstream:
    """One API an agent may reach: its base URL, what the gateway adds to each request."""

    base_url: str
    """``https://api.anthropic.com``, or a user's proxy (a path prefix is kept)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Set on every request (the credential): replaces the client's header of that name."""
    drop: tuple[str, ...] = ()
    """Client headers removed (the placeholder credential the agent's process sends)."""
    paths: tuple[str, ...] = ("/v1/",)
    """Allowed path prefixes below the base URL."""


@dataclass(frozen=True)
class ApiCall:
    """One request as the gateway forwards it."""

    id: int
    upstream: int
    method: str
    path: str
    """Below the upstream's base URL, without the query."""
    query: str
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None


class Meter(Protocol):
    """What the agent's vendor code reads from the traffic (see ``agents/<vendor>``)."""

    def begin(self, call: ApiCall) -> None: ...

    def event(self, call: ApiCall, data: Mapping[str, Any]) -> None:
        """One SSE event's JSON data, or a whole non-streamed JSON response."""

    def end(self, call: ApiCall, status: int) -> None: ...

    def cost(self) -> float | None:
        """What the session spent so far (None: not computable)."""


class CallCounter:
    """A :class:`Meter` for an API whose answers spider2local cannot read (Anthropic's and
    OpenAI's can: ``agents/claude/pricing.ApiUsage``, ``agents/openai_usage.OpenAiUsage``): it
    counts the calls and their statuses, and knows no cost, so a
    budget with a cap refuses after the first call (it cannot be enforced) instead of
    letting spend go unseen."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def begin(self, call: ApiCall) -> None:
        pass

    def event(self, call: ApiCall, data: Mapping[str, Any]) -> None:
        pass

    def end(self, call: ApiCall, status: int) -> None:
        self.calls.append((call.path, status))

    def cost(self) -> float | None:
        return None if self.calls else 0.0


class _Sse:
    """Incremental SSE: ``feed`` bytes, get each event's ``data`` as parsed JSON."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[Mapping[str, Any]]:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        found: list[Mapping[str, Any]] = []
        while b"\n\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            data = b"\n".join(line[5:].lstrip(b" ") for line in raw.split(b"\n")
                              if line.startswith(b"data:"))
            with contextlib.suppress(ValueError):
                parsed = json.loads(data)
                if isinstance(parsed, dict):
                    found.append(parsed)
        return found


class _Bytes(httpx.AsyncByteStream):
    """A recorded body served as the upstream's stream (one chunk per 64 KiB)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.data), 64 * 1024):
            yield self.data[start:start + 64 * 1024]


def recorded_response(recorded: Recorded) -> httpx.Response:
    """The recorded answer as an upstream response for the gateway to relay. Here, not in
    :mod:`.replay`, so that the replay's records (imported by every ``run``) need no httpx: a
    run that starts no gateway (the reference, noop and replay-free runs, every other command)
    does not pay its import (~0.12 s of CPU each CLI call)."""
    assert recorded.response is not None
    headers = [("content-type", recorded.content_type)] if recorded.content_type else []
    return httpx.Response(recorded.status, headers=headers, stream=_Bytes(recorded.response))


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every upstream connection, built once per process: loading the CA
    bundle took 130-250 ms per gateway under load (measured), a third of a command agent's
    whole overhead, for the same certificates each time (an ``SSLContext`` is made to be
    shared). Proxies from the environment get it too (httpx builds their transports from the
    client's ``verify``)."""
    return httpx.create_ssl_context()


class Gateway:
    """Serves the HTTP connections of one agent session (see the module doc)."""

    def __init__(self, upstreams: Sequence[Upstream], meter: Meter, *,
                 budgets: Sequence[Cap] = (), record: ExchangeLog | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 tape: Tape | None = None) -> None:
        self.upstreams = tuple(upstreams)
        self.meter = meter
        self.budgets = tuple(budgets)
        self.record = record
        self.recorder = tape.recorder() if tape is not None else None
        self.playback = tape.playback if tape is not None else None
        """Set: every request is answered from a recorded trial (see the module doc)."""
        self.refused: str | None = None
        """Why requests were refused (a budget spent), once one was."""
        self.served = 0
        self._charged = 0.0
        self._ids = itertools.count(1)
        # Nagle off upstream too: the request's head and body go out as two writes (measured:
        # several ms per call otherwise). Proxies from the environment still apply (httpx
        # mounts its own transports for them).
        self._client = httpx.AsyncClient(
            timeout=UPSTREAM_TIMEOUT, trust_env=transport is None, follow_redirects=False,
            verify=tls_context(),
            transport=transport or httpx.AsyncHTTPTransport(verify=tls_context(), socket_options=[
                (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]))

    async def aclose(self) -> None:
        await self._client.aclose()

    # --- routing ---------------------------------------------------------------------------

    def route(self, target: bytes) -> tuple[int, str, str] | None:
        """``/u<n>/<path>?<query>`` -> (n, path, query), or None when not allowed."""
        text = target.decode("ascii", "replace")
        path, _, query = text.partition("?")
        parts = path.split("/")
        if len(parts) < 3 or parts[0] or not re.fullmatch(r"u\d{1,3}", parts[1]):
            return None
        index = int(parts[1][1:])
        rest = parts[2:]
        if index >= len(self.upstreams) or not all(_SEGMENT.fullmatch(p) for p in rest):
            return None
        sub = "/" + "/".join(rest)
        if not any(sub.startswith(p) or sub + "/" == p for p in self.upstreams[index].paths):
            return None
        return index, sub, query

    def _refusal(self) -> str | None:
        if self.playback is not None:  # nothing is spent; a recorded refusal is replayed
            return None
        if self.refused is None:
            self.refused = next((r for r in (b.refusal() for b in self.budgets) if r), None)
        return self.refused

    def _charge(self) -> None:
        if self.playback is not None:
            return
        cost = self.meter.cost()
        for budget in self.budgets:
            budget.charge(None if cost is None else cost - self._charged)
        if cost is not None:
            self._charged = cost

    # --- serving ---------------------------------------------------------------------------

    async def serve(self, stream: anyio.abc.ByteStream) -> None:
        """One client connection: requests one after the other (keep-alive)."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
        try:
            async with stream:
                while True:
                    request, body = await self._read_request(conn, stream)
                    if request is None:
                        return
                    await self._answer(conn, stream, request, body)
                    if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                        return
                    conn.start_next_cycle()
        except (h11.ProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError,
                anyio.EndOfStream, OSError) as exc:
            log.debug("gateway connection ended: %s", exc)
        except Exception:  # never let one connection stop the listener
            log.exception("gateway connection failed")

    async def _next(self, conn: h11.Connection, stream: anyio.abc.ByteStream) -> Any:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                data = b""
            conn.receive_data(data)

    async def _read_request(self, conn: h11.Connection, stream: anyio.abc.ByteStream
                            ) -> tuple[h11.Request | None, bytes]:
        event = await self._next(conn, stream)
        if not isinstance(event, h11.Request):
            return None, b""
        chunks: list[bytes] = []
        size = 0
        while True:
            part = await self._next(conn, stream)
            if isinstance(part, h11.Data):
                size += len(part.data)
                if size > MAX_REQUEST:
                    await self._error(conn, stream, 413, "request_too_large",
                                      f"request body over {MAX_REQUEST} bytes")
                    return None, b""
                chunks.append(bytes(part.data))
            elif isinstance(part, h11.EndOfMessage):
                return event, b"".join(chunks)
            else:
                return None, b""

    async def _error(self, conn: h11.Connection, stream: anyio.abc.ByteStream, status: int,
                     kind: str, message: str, fingerprint: Fingerprint | None = None) -> None:
        payload = json.dumps({"type": "error", "error": {
            "type": kind, "message": f"spider2local gateway: {message}"}}).encode()
        if fingerprint is not None and self.recorder is not None:
            self.recorder.exchange(fingerprint, status, "application/json", payload)
        await stream.send(conn.send(h11.Response(status_code=status, headers=[
            ("content-type", "application/json"), ("content-length", str(len(payload)))])))
        await stream.send(conn.send(h11.Data(data=payload)))
        await stream.send(conn.send(h11.EndOfMessage()))

    async def _answer(self, conn: h11.Connection, stream: anyio.abc.ByteStream,
                      request: h11.Request, body: bytes) -> None:
        started = time.time()
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("ascii", "replace")
        entry: dict[str, Any] = {"t": round(started, 3), "method": method, "target": target}
        routed = self.route(request.target)
        if routed is None or method not in ("GET", "POST"):
            await self._error(conn, stream, 403, "permission_error",
                              f"{method} {target[:200]} is not an API this agent may reach")
            self._log(entry | {"status": 403, "refused": "route"}, body, b"")
            return
        index, path, query = routed
        fingerprint = self._fingerprint(route_of(index, method, path), body)
        refusal = self._refusal()
        if refusal is not None:
            await self._error(conn, stream, REFUSED_STATUS, "invalid_request_error", refusal,
                              fingerprint)
            self._log(entry | {"status": REFUSED_STATUS, "refused": refusal}, body, b"")
            return
        replayed = self.playback.answer(fingerprint) \
            if self.playback is not None and fingerprint is not None else None
        if isinstance(replayed, Divergence):
            await self._error(conn, stream, REFUSED_STATUS, "invalid_request_error",
                              f"replay {replayed.message()}")
            self._log(entry | {"status": REFUSED_STATUS, "replay": replayed.message()},
                      body, b"")
            return
        call = ApiCall(next(self._ids), index, method, path, query, body)
        entry["id"] = call.id
        upstream = self.upstreams[index]
        headers = self._headers(request.headers, upstream)
        url = upstream.base_url.rstrip("/") + path + (f"?{query}" if query else "")
        kept = bytearray()
        full: bytearray | None = bytearray() if self.recorder is not None else None
        status = 502
        self.meter.begin(call)
        try:
            try:
                response = recorded_response(replayed) if replayed is not None else \
                    await self._client.send(self._client.build_request(
                        method, url, headers=headers, content=body), stream=True)
            except httpx.HTTPError as exc:
                await self._error(conn, stream, 502, "api_error",
                                  f"upstream {upstream.base_url} unreachable: "
                                  f"{type(exc).__name__}: {exc}", fingerprint)
                entry["upstream_error"] = f"{type(exc).__name__}: {exc}"
                return
            status = response.status_code
            if replayed is not None:
                entry["replayed"] = replayed.n
            try:
                await self._relay(conn, stream, call, response, kept, full)
            finally:
                await response.aclose()
                if self.recorder is not None and fingerprint is not None:
                    self.recorder.exchange(
                        fingerprint, status, response.headers.get("content-type", ""),
                        bytes(full) if full is not None and len(full) <= RESPONSE_CAP
                        else None)
        finally:
            self.meter.end(call, status)
            self._charge()
            self.served += 1
            self._log(entry | {"status": status, "upstream": upstream.base_url,
                               "seconds": round(time.time() - started, 3)}, body, bytes(kept))

    @staticmethod
    def _headers(raw: Sequence[tuple[bytes, bytes]], upstream: Upstream) -> list[tuple[str, str]]:
        drop = _HOP | {h.lower() for h in upstream.drop} | {h.lower() for h in upstream.headers}
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw
                   if k.decode("latin-1").lower() not in drop]
        headers += list(upstream.headers.items())
        headers.append(("accept-encoding", "identity"))  # the meter reads the bytes as sent
        return headers

    def _fingerprint(self, route: str, body: bytes) -> Fingerprint | None:
        """The request's fingerprint, taken in arrival order (each one's base is an earlier
        request): recorded with the answer, and compared with the recording in a replay."""
        if self.recorder is not None:
            return self.recorder.fingerprint(route, body)
        return None

    async def _relay(self, conn: h11.Connection, stream: anyio.abc.ByteStream, call: ApiCall,
                     response: httpx.Response, kept: bytearray,
                     full: bytearray | None = None) -> None:
        """``full``: every byte of the answer (up to one past :data:`~.replay.RESPONSE_CAP`),
        for the replay recording."""
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _HOP]
        await stream.send(conn.send(h11.Response(status_code=response.status_code,
                                                 headers=headers)))
        streaming = response.headers.get("content-type", "").startswith("text/event-stream")
        sse = _Sse() if streaming else None
        whole = bytearray()
        cap = self.record.body_cap if self.record is not None else 0
        async for chunk in response.aiter_raw():
            if len(kept) < cap:
                kept += chunk[: cap - len(kept)]
            if full is not None and len(full) <= RESPONSE_CAP:
                full += chunk[: RESPONSE_CAP + 1 - len(full)]
            if sse is not None:
                for data in sse.feed(chunk):
                    self.meter.event(call, data)
            elif len(whole) <= MAX_JSON_RESPONSE:
                whole += chunk
            await stream.send(conn.send(h11.Data(data=chunk)))
        await stream.send(conn.send(h11.EndOfMessage()))
        if sse is None and whole:
            with contextlib.suppress(ValueError):
                parsed = json.loads(bytes(whole))
                if isinstance(parsed, dict):
                    self.meter.event(call, parsed)

    def _log(self, entry: dict[str, Any], request: bytes, response: bytes) -> None:
        if self.record is not None:
            self.record.write(entry | {"request": self.record.body(request),
                                       "response": self.record.body(response)})


@dataclass(frozen=True)
class Served:
    """A running gateway: what the agent's process is given."""

    gateway: Gateway
    base_urls: tuple[str, ...]
    """One per upstream, in the order declared: the agent's process uses these instead."""
    socket: Path | None
    """The Unix socket to bind into a sealed sandbox (None when served over TCP)."""


@contextlib.asynccontextmanager
async def open_gateway(upstreams: Sequence[Upstream], meter: Meter, *, sealed: bool,
                       budgets: Sequence[Cap] = (), record: Path | None = None,
                       transport: httpx.AsyncBaseTransport | None = None,
                       tape: Tape | None = None) -> AsyncIterator[Served]:
    """Serve ``upstreams`` for one session while the block runs.

    ``sealed``: on a Unix socket in a fresh runner-private folder (mode 0700), reached from a
    sandbox through its relay (:mod:`spider2local.sandbox.network`); else on a loopback TCP
    port of the runner (no sandbox: the agent could reach the network anyway, but usage,
    cost and budgets still come from here).
    ``tape``: where the session is recorded in full, and the recorded session it replays.
    """
    gateway = Gateway(upstreams, meter, budgets=budgets,
                      record=ExchangeLog(record) if record is not None else None,
                      transport=transport, tape=tape)
    folder: Path | None = None
    listener: anyio.abc.Listener[Any]
    try:
        if sealed:
            folder = make_owned_dir("gateway")  # a kill -9's leftover is recovered by name
            path: Path | None = folder / SOCKET_NAME
            assert path is not None
            listener = await anyio.create_unix_listener(path, mode=0o600)
            base = relay_base_url()
        else:
            path = None
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            base = f"http://127.0.0.1:{port}"
        async with serving(listener, lambda tg: tg.start_soon(listener.serve, gateway.serve)):
            yield Served(gateway, tuple(f"{base}/u{i}" for i in range(len(upstreams))), path)
    finally:
        with anyio.CancelScope(shield=True):
            await gateway.aclose()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

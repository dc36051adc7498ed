"""The gateway against a tiny fake upstream (httpx's MockTransport, the transport seam) and a
real HTTP client over its real listener: routing, credentials, streaming, metering, budgets,
records, and that nothing is served once it is closed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from spider2local.gateway.budget import Budget
from spider2local.gateway.replay import Fingerprinter, Recorded, Volatile
from spider2local.gateway.server import (
    ApiCall,
    Upstream,
    open_gateway,
    recorded_response,
    tls_context,
)

SSE = (b'event: message_start\ndata: {"type": "message_start", "message": {"usage": '
       b'{"input_tokens": 7}}}\n\nevent: message_delta\ndata: {"type": "message_delta", '
       b'"usage": {"output_tokens": 3}}\n\n')


class Meter:
    """One dollar per call answered; keeps every event it was shown."""

    def __init__(self) -> None:
        self.events: list[Mapping[str, Any]] = []
        self.ended: list[int] = []

    def begin(self, call: ApiCall) -> None:
        pass

    def event(self, call: ApiCall, data: Mapping[str, Any]) -> None:
        self.events.append(data)

    def end(self, call: ApiCall, status: int) -> None:
        self.ended.append(status)

    def cost(self) -> float | None:
        return float(len(self.ended))


class Upstream_:
    def __init__(self) -> None:
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if request.url.path.endswith("/json"):
            body = json.dumps({"type": "message", "usage": {"input_tokens": 1}}).encode()
            return httpx.Response(200, stream=httpx.ByteStream(body),
                                  headers={"content-type": "application/json"})
        return httpx.Response(200, stream=httpx.ByteStream(SSE),
                              headers={"content-type": "text/event-stream"})


API = Upstream("https://api.example.test/prefix", headers={"x-api-key": "REAL-KEY"},
               drop=("x-api-key", "authorization"), paths=("/v1/",))


def run(fn: Any) -> Any:
    return anyio.run(fn)


def test_forwards_streams_meters_and_records_with_the_real_credential(tmp_path: Path) -> None:
    upstream, meter = Upstream_(), Meter()

    async def go() -> tuple[httpx.Response, httpx.Response]:
        async with open_gateway([API], meter, sealed=False, record=tmp_path / "api.jsonl",
                                transport=httpx.MockTransport(upstream)) as served:
            async with httpx.AsyncClient() as client:
                streamed = await client.post(
                    f"{served.base_urls[0]}/v1/messages?beta=true", content=b'{"a": 1}',
                    headers={"x-api-key": "placeholder", "authorization": "Bearer fake",
                             "anthropic-version": "2023-06-01"})
                whole = await client.post(f"{served.base_urls[0]}/v1/json", content=b"{}")
            return streamed, whole

    streamed, whole = run(go)
    assert streamed.status_code == 200 and streamed.content == SSE
    assert whole.json()["type"] == "message"
    sent = upstream.seen[0]
    assert str(sent.url) == "https://api.example.test/prefix/v1/messages?beta=true"
    assert sent.headers["x-api-key"] == "REAL-KEY" and "authorization" not in sent.headers
    assert sent.headers["anthropic-version"] == "2023-06-01" and sent.content == b'{"a": 1}'
    assert [e["type"] for e in meter.events] == ["message_start", "message_delta", "message"]
    record = [json.loads(line) for line in (tmp_path / "api.jsonl").read_text().splitlines()]
    assert [(e["status"], e["target"]) for e in record] == [
        (200, "/u0/v1/messages?beta=true"), (200, "/u0/v1/json")]
    assert record[0]["request"]["text"] == '{"a": 1}'
    assert "message_delta" in record[0]["response"]["text"]
    assert "REAL-KEY" not in (tmp_path / "api.jsonl").read_text()


@pytest.mark.parametrize("target", [
    "/v1/messages", "/u1/v1/messages", "/u0/v2/messages", "/u0/v1/../admin",
    "/u0/v1/%2e%2e/admin", "/u0/", "/u00000/v1/x", "//evil.test/u0/v1/messages"])
def test_only_the_declared_upstream_below_its_paths_is_reachable(target: str) -> None:
    upstream, meter = Upstream_(), Meter()

    async def go() -> int:
        async with open_gateway([API], meter, sealed=False,
                                transport=httpx.MockTransport(upstream)) as served:
            base = served.base_urls[0].rsplit("/", 1)[0]
            async with httpx.AsyncClient() as client:
                request = client.build_request("POST", base + "/x", content=b"{}")
                request.url = request.url.copy_with(raw_path=target.encode())
                return (await client.send(request)).status_code

    assert run(go) == 403
    assert upstream.seen == []


def test_an_absolute_target_is_not_a_route() -> None:
    from spider2local.gateway.server import Gateway

    gateway = Gateway([API], Meter())
    assert gateway.route(b"http://evil.test/u0/v1/messages") is None
    assert gateway.route(b"/u0/v1/messages?beta=true") == (0, "/v1/messages", "beta=true")
    anyio.run(gateway.aclose)


def test_the_block_s_own_exception_comes_out_unwrapped() -> None:
    async def go() -> None:
        async with open_gateway([API], Meter(), sealed=False):
            raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        run(go)


def test_two_upstreams_each_get_their_own_base_url() -> None:
    upstream, meter = Upstream_(), Meter()
    other = Upstream("https://other.example.test", paths=("/v1/",))

    async def go() -> tuple[str, ...]:
        async with open_gateway([API, other], meter, sealed=False,
                                transport=httpx.MockTransport(upstream)) as served:
            async with httpx.AsyncClient() as client:
                for base in served.base_urls:
                    await client.post(f"{base}/v1/json", content=b"{}")
            return served.base_urls

    bases = run(go)
    assert len(set(bases)) == 2
    assert [str(r.url) for r in upstream.seen] == ["https://api.example.test/prefix/v1/json",
                                                   "https://other.example.test/v1/json"]


def test_a_spent_budget_refuses_and_a_run_budget_is_shared(tmp_path: Path) -> None:
    upstream = Upstream_()
    run_budget = Budget(3.0, "run")

    async def session(cap: float | None, calls: int) -> list[int]:
        async with open_gateway([API], Meter(), sealed=False,
                                budgets=[Budget(cap, "task"), run_budget],
                                transport=httpx.MockTransport(upstream)) as served, \
                httpx.AsyncClient() as client:
            return [(await client.post(f"{served.base_urls[0]}/v1/json",
                                       content=b"{}")).status_code for _ in range(calls)]

    first = run(lambda: session(2.0, 3))
    assert first == [200, 200, 400]  # the task's cap: two calls of $1
    second = run(lambda: session(None, 3))
    assert second == [200, 400, 400]  # the run's cap: $3 in all
    assert len(upstream.seen) == 3 and run_budget.spent_usd == 3.0
    assert Budget(1.0).refusal() is None
    unknown = Budget(1.0)
    unknown.charge(None)
    assert unknown.refusal() is not None and "cannot be enforced" in unknown.refusal()  # type: ignore[operator]


def test_an_unreachable_upstream_is_a_502_the_client_may_retry() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def go() -> httpx.Response:
        async with open_gateway([API], Meter(), sealed=False,
                                transport=httpx.MockTransport(down)) as served, \
                httpx.AsyncClient() as client:
            return await client.post(f"{served.base_urls[0]}/v1/json", content=b"{}")

    response = run(go)
    assert response.status_code == 502 and "unreachable" in response.text


def test_the_unix_socket_serves_while_open_and_refuses_after(tmp_path: Path) -> None:
    upstream = Upstream_()

    async def go() -> tuple[int, Path]:
        async with open_gateway([API], Meter(), sealed=True,
                                transport=httpx.MockTransport(upstream)) as served:
            assert served.socket is not None
            assert served.base_urls[0].startswith("http://127.0.0.1:")
            transport = httpx.AsyncHTTPTransport(uds=str(served.socket))
            async with httpx.AsyncClient(transport=transport) as client:
                status = (await client.post("http://relay/u0/v1/json", content=b"{}")
                          ).status_code
            return status, served.socket

    status, socket = run(go)
    assert status == 200
    assert not socket.exists() and not socket.parent.exists()


def test_the_record_is_capped(tmp_path: Path) -> None:
    from spider2local.gateway.record import ExchangeLog

    log = ExchangeLog(tmp_path / "api.jsonl", body_cap=10, file_cap=300)
    for i in range(10):
        log.write({"id": i, "request": log.body(b"x" * 50), "response": log.body(b"y" * 5)})
    lines = [json.loads(line) for line in (tmp_path / "api.jsonl").read_text().splitlines()]
    assert lines[0]["request"] == {"size": 50, "text": "x" * 10, "truncated": True}
    notes = [line for line in lines if "note" in line]
    assert len(notes) == 1 and "capped" in notes[0]["note"]
    after = lines[lines.index(notes[0]) + 1:]
    assert after and all("request" not in e and e["request_size"] == 50 for e in after)
    assert len(lines) == 11  # every exchange keeps its metadata line


def test_a_call_counter_cannot_enforce_a_cap_and_says_so() -> None:
    from spider2local.gateway.server import CallCounter

    upstream = Upstream_()

    async def go() -> list[int]:
        async with open_gateway([API], CallCounter(), sealed=False, budgets=[Budget(5.0)],
                                transport=httpx.MockTransport(upstream)) as served, \
                httpx.AsyncClient() as client:
            answers = [await client.post(f"{served.base_urls[0]}/v1/json", content=b"{}")
                       for _ in range(2)]
        return [a.status_code for a in answers] + [int("cannot be enforced" in answers[1].text)]

    assert run(go) == [200, 400, 1]
    unlimited = Budget(None)
    unlimited.charge(None)
    assert unlimited.refusal() is None


def test_the_tls_settings_are_built_once_per_process() -> None:
    # Loading the CA bundle took 130-250 ms per gateway under load; a decorator moved off it
    # by an edit once left every gateway building its own (and cached the recorded bodies).
    assert tls_context() is tls_context()


def test_a_recorded_answer_is_relayed_in_64_kib_chunks_and_nothing_is_kept() -> None:
    body = bytes(range(256)) * 600  # 150 KiB: three chunks
    request = Fingerprinter(Volatile.of(Path("/ws"))).take("u0 POST /v1/messages", b"{}")
    recorded = Recorded(1, request, 200, "application/json", body)

    async def chunks(response: httpx.Response) -> list[bytes]:
        return [chunk async for chunk in response.aiter_raw()]

    first, second = recorded_response(recorded), recorded_response(recorded)
    assert first.stream is not second.stream  # a new stream per answer, never one cached
    assert first.status_code == 200 and first.headers["content-type"] == "application/json"
    parts = anyio.run(chunks, first)
    assert [len(p) for p in parts] == [65536, 65536, len(body) - 131072]
    assert b"".join(parts) == body

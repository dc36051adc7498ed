"""Replay at the gateway: the full recording, the request fingerprints and their normalisation,
and a recorded session served back through the real gateway without any upstream.

The end-to-end replays (the real Claude CLI, a command agent, ``run --replay``) are in
tests/run/test_replay_run.py."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from spider2local.gateway.replay import (
    Fingerprinter,
    Playback,
    Recorder,
    ReplayError,
    Tape,
    Volatile,
    difference,
    read_recording,
)
from spider2local.gateway.server import Upstream, open_gateway
from tests.gateway.test_server import SSE, Meter, Upstream_

WS = Path("/tmp/spider2local-t1-0a1b2c3d4e5f")
API = Upstream("https://api.example.test", headers={"x-api-key": "REAL-KEY"},
               drop=("x-api-key",), paths=("/v1/",))


def conversation(result: str, *, ws: Path = WS, tool_id: str = "toolu_01ABCdefGHIjkl",
                 system: str = "You work in {ws}.") -> bytes:
    """A Messages request whose last message answers a ``query`` tool call with ``result``
    (and a clock time and duration that differ with the session)."""
    tick = sum(map(ord, str(ws))) % 10
    return json.dumps({
        "model": "claude-x", "system": system.format(ws=ws), "stream": True,
        "metadata": {"user_id": "user_ab_account__session_12345678-1234-1234-1234-1234567890ab"},
        "messages": [
            {"role": "user", "content": "Build it."},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": tool_id, "name": "mcp__spider2__query",
                 "input": {"sql": "SELECT 1"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tool_id,
                 "content": f"\x1b[0m12:00:0{tick}  Done in 0.{tick}2s ({ws}/x): {result}"}]},
        ]}).encode()


def first(ws: Path = WS) -> bytes:
    return json.dumps({"model": "claude-x", "system": f"You work in {ws}.", "stream": True,
                       "messages": [{"role": "user", "content": "Build it."}]}).encode()


def test_volatile_fields_are_normalised_and_real_changes_are_not() -> None:
    """Ids, the session's own path, clock times, durations and colours differ between two
    sessions of the same trajectory; a tool's result is what the agent saw."""
    other = Path("/tmp/spider2local-t1-ffffffffffff")
    a = Fingerprinter(Volatile.of(WS))
    b = Fingerprinter(Volatile.of(other))
    assert difference(a.take("u0 POST /v1/messages", first()),
                      b.take("u0 POST /v1/messages", first(other))) is None
    same = difference(a.take("u0 POST /v1/messages", conversation("1 row")),
                      b.take("u0 POST /v1/messages", conversation(
                          "1 row", ws=other, tool_id="toolu_99ZZZzzzYYYyyy")))
    assert same is None
    a, b = Fingerprinter(Volatile.of(WS)), Fingerprinter(Volatile.of(other))
    a.take("u0 POST /v1/messages", first())
    b.take("u0 POST /v1/messages", first(other))
    changed = difference(a.take("u0 POST /v1/messages", conversation("1 row")),
                         b.take("u0 POST /v1/messages", conversation("2 rows", ws=other)))
    assert changed is not None
    assert changed.startswith("the result of tool mcp__spider2__query differs")
    assert "-" in changed and "1 row" in changed and "2 rows" in changed


def test_each_request_stores_only_what_is_new_since_its_conversation_s_last_request() -> None:
    prints = Fingerprinter(Volatile.of(WS))
    one = prints.take("u0 POST /v1/messages", first())
    two = prints.take("u0 POST /v1/messages", conversation("x"))
    side = prints.take("u0 POST /v1/messages", json.dumps(
        {"model": "haiku", "messages": [{"role": "user", "content": "title?"}]}).encode())
    three = prints.take("u0 POST /v1/messages", conversation("x"))
    assert (one.base, one.keep, len(one.new)) == (None, 0, 1)
    assert (two.base, two.keep, len(two.new)) == (1, 1, 2)
    assert side.base is None and (three.base, three.keep, three.new) == (2, 3, ())
    assert [f.n for f in (one, two, side, three)] == [1, 2, 3, 4]
    changed = difference(two, dataclass_rest(two, "other system prompt"))
    assert changed is not None and changed.startswith("the request's settings")


def dataclass_rest(found: Any, text: str) -> Any:
    import dataclasses

    from spider2local.gateway.replay import Part
    return dataclasses.replace(found, rest=Part("0" * 32, text))


def record(path: Path, bodies: Sequence[bytes], answers: Sequence[bytes]) -> None:
    recorder = Recorder(path, Volatile.of(WS))
    for body, answer in zip(bodies, answers, strict=True):
        recorder.exchange(recorder.fingerprint("u0 POST /v1/messages", body), 200,
                          "text/event-stream", answer)


def test_a_recording_is_read_back_whole_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "api.replay.jsonl"
    record(path, [b"not json at all"], [SSE])  # an earlier attempt: not the one replayed
    record(path, [first(), conversation("1")], [SSE, SSE + b"more"])
    found, ends = read_recording(path)
    assert ends is None and [e.n for e in found] == [1, 2]
    assert [e.response for e in found] == [SSE, SSE + b"more"]
    lines = path.read_text().splitlines()
    entry = json.loads(lines[-1])
    entry["response"] = base64.b64encode(SSE + b"mORe").decode()  # same size, other bytes
    path.write_text("\n".join([*lines[:-1], json.dumps(entry)]) + "\n")
    with pytest.raises(ReplayError, match="size or digest differs"):
        read_recording(path)
    path.write_text("\n".join([*lines[:-1], lines[-1][:50]]) + "\n")
    with pytest.raises(ReplayError, match="not a JSON line"):
        read_recording(path)
    with pytest.raises(ReplayError, match="no recording of this trial"):
        read_recording(tmp_path / "absent.jsonl")
    (tmp_path / "link.jsonl").symlink_to(path)  # a run folder from elsewhere, pointing out
    with pytest.raises(ReplayError, match="a link, not a recording"):
        read_recording(tmp_path / "link.jsonl")


def test_a_recording_past_its_cap_says_where_it_stops(tmp_path: Path) -> None:
    path = tmp_path / "api.replay.jsonl"
    recorder = Recorder(path, Volatile.of(WS), file_cap=3000)
    for n in range(5):
        recorder.exchange(recorder.fingerprint("u0 POST /v1/messages", first()), 200,
                          "text/event-stream", bytes(800) + bytes([n]))
    found, ends = read_recording(path)
    assert 0 < len(found) < 5 and ends == "the recording was capped at 3000 bytes"
    playback = Playback(found, ends=ends)
    prints = Fingerprinter(Volatile.of(WS))
    for _ in found:
        assert not isinstance(playback.answer(prints.take("u0 POST /v1/messages", first())),
                              type(None))
    over = playback.answer(prints.take("u0 POST /v1/messages", first()))
    assert playback.stopped is not None and "capped at 3000 bytes" in playback.stopped.detail
    assert over == playback.stopped


async def serve(tape: Tape, bodies: Sequence[bytes],
                upstream: Upstream_ | None = None) -> list[httpx.Response]:
    meter = Meter()
    transport = httpx.MockTransport(upstream) if upstream is not None else \
        httpx.MockTransport(lambda request: pytest.fail("replay called the upstream"))
    answers = []
    async with open_gateway([API], meter, sealed=False, transport=transport,
                            tape=tape) as served, httpx.AsyncClient() as client:
        for body in bodies:
            answers.append(await client.post(f"{served.base_urls[0]}/v1/messages",
                                             content=body))
    return answers


def test_the_gateway_records_in_full_and_replays_without_the_upstream(tmp_path: Path) -> None:
    recorded_at = tmp_path / "rec" / "api.replay.jsonl"
    live = anyio.run(serve, Tape(recorded_at, Volatile.of(WS)),
                     [first(), conversation("1")], Upstream_())
    assert [r.content for r in live] == [SSE, SSE]
    other = Path("/tmp/spider2local-t1-999999999999")
    again = tmp_path / "rep" / "api.replay.jsonl"
    playback = Playback.load(recorded_at)
    replayed = anyio.run(serve, Tape(again, Volatile.of(other), playback),
                         [first(other), conversation("1", ws=other)])
    assert [(r.status_code, r.content) for r in replayed] == [(200, SSE), (200, SSE)]
    assert playback.summary()["served"] == 2 and playback.diverged is None
    assert [e.response for e in read_recording(again)[0]] == [SSE, SSE]  # recorded again


def test_a_request_that_differs_stops_the_replay_unless_lenient(tmp_path: Path) -> None:
    recorded_at = tmp_path / "rec" / "api.replay.jsonl"
    anyio.run(serve, Tape(recorded_at, Volatile.of(WS)),
              [first(), conversation("1"), conversation("1")], Upstream_())
    bodies = [first(), conversation("2"), conversation("2")]
    strict = Playback.load(recorded_at)
    answers = anyio.run(serve, Tape(tmp_path / "s.jsonl", Volatile.of(WS), strict), bodies)
    assert [r.status_code for r in answers] == [200, 400, 400]
    assert "diverged at exchange 2: the result of tool mcp__spider2__query differs" in \
        answers[1].json()["error"]["message"]
    assert strict.summary()["served"] == 1 and strict.unverified_from is None
    lenient = Playback.load(recorded_at, lenient=True)
    answers = anyio.run(serve, Tape(tmp_path / "l.jsonl", Volatile.of(WS), lenient),
                        [*bodies, first()])
    assert [r.status_code for r in answers] == [200, 200, 200, 400]  # 4: none was recorded
    summary = lenient.summary()
    assert summary["unverified_from"] == 2 and summary["served"] == 3
    assert summary["stopped"] == "diverged at exchange 4: the recorded trial made 3 request(s)"


def test_a_replay_asked_to_stop_after_exchange_n_refuses_the_next_without_a_divergence(
        tmp_path: Path) -> None:
    recorded_at = tmp_path / "rec" / "api.replay.jsonl"
    anyio.run(serve, Tape(recorded_at, Volatile.of(WS)), [first(), conversation("1")],
              Upstream_())
    playback = Playback.load(recorded_at, until=1)
    answers = anyio.run(serve, Tape(tmp_path / "u.jsonl", Volatile.of(WS), playback),
                        [first(), conversation("1")])
    assert [r.status_code for r in answers] == [200, 400]
    assert "replay stopped before exchange 2, as asked" in answers[1].json()["error"]["message"]
    assert playback.diverged is None and playback.summary()["served"] == 1
    assert playback.stopped is not None and playback.stopped.message() == \
        "replay stopped before exchange 2, as asked"

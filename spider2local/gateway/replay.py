"""Replay at the gateway: every exchange recorded in full, and served back without any API.

``api.jsonl`` (:mod:`.record`) keeps capped bodies for people to read; this module keeps what a
replay needs, for any agent behind the gateway (the Claude CLI, mini-swe-agent, any
OpenAI-compatible client), in one file per trial (``api.replay.jsonl``, written by the runner's
gateway, never reachable from the agent's sandbox):

- every response in full: the bytes as the upstream streamed them, with their size and SHA-256
  (checked when the file is read back: a damaged recording is refused, never served);
- for every request a :class:`Fingerprint` of what the agent sent: the messages new since the
  previous request of the same conversation (the earlier request whose messages share the
  longest prefix with this one: the main agent and its verifier subagent interleave), each
  normalised (:class:`Volatile`: ids, timestamps, durations, temporary paths and the
  session's own workspace path), and a digest of the rest of the request (model, system
  prompt, tools). Only the new messages are kept, since every request repeats the whole
  conversation (a long session sends hundreds of MB in total).

:class:`Playback` answers a fresh session's requests from one recorded session, in order. A
request whose fingerprint differs from the recorded one stops the replay there
(``diverged at exchange N``, with a short diff naming the tool whose result changed) and
every later request is refused, unless the replay is lenient: then the recorded answers are
served anyway and every exchange from the first difference on is marked unverified.

Why a recording of its own and not ``api.jsonl`` made bigger: that file's caps protect a run
folder from a long session's repeated conversations; this one stores each message once.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import difflib
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spider2local.exceptions import Spider2LocalError

log = logging.getLogger(__name__)

FORMAT = 1
"""Version of the recording's lines (the first line of each session says it)."""
RESPONSE_CAP = 32 * 1024 * 1024
"""Bytes of one response recorded; a bigger one is marked not replayable (its exchange, and so
the rest of the session, cannot be replayed)."""
FILE_CAP = 512 * 1024 * 1024
"""Bytes of one trial's recording; past it the later exchanges are not recorded (a replay of
that trial stops where the recording stops, and says so)."""
TEXT_CAP = 16 * 1024
"""Characters kept of one normalised message or request rest for the diff (its digest covers
all of it)."""
DIFF_LINES = 12
"""Lines of a divergence's diff kept in the result."""


class ReplayError(Spider2LocalError):
    """A recording that cannot be replayed: missing, damaged or of an unknown format."""


# --- normalisation ------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}\b")
_API_ID = re.compile(r"\b(?:toolu|call|msg|req|chatcmpl|resp|srvtoolu|fc)_[A-Za-z0-9_-]{6,}")
_HEX_ID = re.compile(r"\b[0-9a-f]{32,64}\b")
_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
                        r"(?:Z|[+-]\d{2}:?\d{2})?")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b")
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:s|ms|secs?|seconds?)\b")
_TMP = re.compile(r"(?:/var)?/tmp/[A-Za-z0-9._-]+")
_ID_KEYS = frozenset({"id", "tool_use_id", "tool_call_id", "call_id"})
"""Keys whose values are ids a client or server makes up per session."""


@dataclass(frozen=True)
class Volatile:
    """What differs between two sessions of the same trajectory and so is normalised away
    before requests are compared: the session's own paths (its workspace, exactly, before
    the general rule for temporary paths), today's real date, and by pattern terminal
    colours, ids, UUIDs, timestamps, clock times, durations and temporary paths."""

    paths: tuple[str, ...] = ()
    """The session's own folders (the workspace root and its real path)."""

    @classmethod
    def of(cls, *folders: Path) -> Volatile:
        found: list[str] = []
        for folder in folders:
            for text in (str(folder), str(folder.resolve())):
                if text not in found and len(text) > 1:
                    found.append(text)
        return cls(tuple(sorted(found, key=len, reverse=True)))

    def text(self, value: str) -> str:
        value = _ANSI.sub("", value)  # colours: dbt's log lines start with one
        for path in self.paths:
            value = value.replace(path, "<SESSION>")
        today = dt.date.today()
        for day in {today, dt.datetime.now(dt.UTC).date()}:
            value = value.replace(day.isoformat(), "<TODAY>")
        value = _UUID.sub("<UUID>", value)
        value = _API_ID.sub("<ID>", value)
        value = _HEX_ID.sub("<HEX>", value)
        value = _TIMESTAMP.sub("<TIMESTAMP>", value)
        value = _CLOCK.sub("<CLOCK>", value)
        value = _DURATION.sub("<DURATION>", value)
        return _TMP.sub("<TMP>", value)

    def value(self, data: Any) -> Any:
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, list):
            return [self.value(v) for v in data]
        if isinstance(data, dict):
            return {k: ("<ID>" if k in _ID_KEYS and isinstance(v, str) else self.value(v))
                    for k, v in data.items()}
        return data


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, indent=1, default=str)


def tool_names(messages: Sequence[Any]) -> dict[str, str]:
    """``call id -> tool name`` of every tool call in a conversation: Anthropic's
    ``tool_use`` blocks and OpenAI's ``tool_calls`` (chat) or ``function_call`` items
    (responses): how a changed tool result is named in a divergence."""
    names: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, dict):
            continue
        if message.get("type") == "function_call":
            names[str(message.get("call_id"))] = str(message.get("name"))
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") in ("tool_use", "server_tool_use"):
                names[str(block.get("id"))] = str(block.get("name"))
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                names[str(call.get("id"))] = str((call.get("function") or {}).get("name"))
    return names


def _tool_of(message: Any, names: Mapping[str, str]) -> str | None:
    """The tool whose result ``message`` carries (its first), or None."""
    if not isinstance(message, dict):
        return None
    if message.get("role") == "tool" and "tool_call_id" in message:
        return names.get(str(message["tool_call_id"]), "a tool")
    if message.get("type") == "function_call_output":
        return names.get(str(message.get("call_id")), "a tool")
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            return names.get(str(block.get("tool_use_id")), "a tool")
    return None


@dataclass(frozen=True)
class Part:
    """One normalised piece of a request: a message (or the request's rest)."""

    sha: str
    text: str
    """Normalised, cut at :data:`TEXT_CAP` (for the diff)."""
    tool: str | None = None
    """The tool whose result this message carries."""

    def to_json(self) -> dict[str, Any]:
        return {"sha": self.sha, "text": self.text, **({"tool": self.tool} if self.tool else {})}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Part:
        return cls(str(data["sha"]), str(data.get("text", "")), data.get("tool"))


@dataclass(frozen=True)
class Fingerprint:
    """What the agent sent in one request, as compared by a replay (see the module doc)."""

    route: str
    """``u<upstream> METHOD path``."""
    base: int | None
    """The earlier exchange (1-based) whose messages this request continues; None: none."""
    keep: int
    """How many of that exchange's messages this request repeats."""
    new: tuple[Part, ...]
    rest: Part
    """Everything but the messages (model, system prompt, tools, limits), normalised."""
    digests: tuple[str, ...] = field(default=(), compare=False)
    """Every message's digest (kept in memory to find the next request's base; not saved)."""
    n: int = field(default=0, compare=False)
    """The request's place in its session (1-based, in arrival order): its exchange number."""

    def to_json(self, *, rest_text: bool) -> dict[str, Any]:
        rest = self.rest.to_json() if rest_text else {"sha": self.rest.sha}
        return {"route": self.route, "base": self.base, "keep": self.keep,
                "new": [p.to_json() for p in self.new], "rest": rest}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fingerprint:
        return cls(str(data["route"]), data.get("base"), int(data.get("keep", 0)),
                   tuple(Part.from_json(p) for p in data.get("new", [])),
                   Part.from_json(data["rest"]))


class Fingerprinter:
    """Fingerprints one session's requests in order (the base of each is an earlier one)."""

    def __init__(self, volatile: Volatile) -> None:
        self.volatile = volatile
        self.history: list[tuple[str, ...]] = []

    def take(self, route: str, body: bytes) -> Fingerprint:
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        key = "messages" if isinstance(data, dict) and isinstance(data.get("messages"), list) \
            else "input" if isinstance(data, dict) and isinstance(data.get("input"), list) \
            else None
        if key is None or not isinstance(data, dict):
            text = self.volatile.text(body.decode("utf-8", "replace")) if data is None \
                else _canonical(self.volatile.value(data))
            self.history.append(())
            return Fingerprint(route, None, 0, (), Part(_digest(text), text[:TEXT_CAP]),
                               n=len(self.history))
        messages = data[key]
        names = tool_names(messages)
        parts = []
        for message in messages:
            text = _canonical(self.volatile.value(message))
            parts.append(Part(_digest(text), text[:TEXT_CAP], _tool_of(message, names)))
        digests = tuple(p.sha for p in parts)
        base, keep = self._base(digests)
        rest_text = _canonical(self.volatile.value({k: v for k, v in data.items() if k != key}))
        self.history.append(digests)
        return Fingerprint(route, base, keep, tuple(parts[keep:]),
                           Part(_digest(rest_text), rest_text[:TEXT_CAP]), digests,
                           n=len(self.history))

    def _base(self, digests: tuple[str, ...]) -> tuple[int | None, int]:
        best, keep = None, 0
        for index, earlier in enumerate(self.history, start=1):
            common = 0
            for a, b in zip(earlier, digests, strict=False):
                if a != b:
                    break
                common += 1
            if common and common >= keep:  # ties: the latest (the conversation's last turn)
                best, keep = index, common
        return best, keep


def difference(recorded: Fingerprint, sent: Fingerprint) -> str | None:
    """What differs between a recorded request and the one sent now (None: nothing), in a
    few lines: which part, the tool whose result it is, and a short unified diff."""
    if recorded.route != sent.route:
        return f"the request went to {sent.route}, recorded: {recorded.route}"
    if (recorded.base, recorded.keep) != (sent.base, sent.keep):
        return (f"the request continues exchange {sent.base} after {sent.keep} message(s); "
                f"recorded: exchange {recorded.base} after {recorded.keep}")
    for index, (a, b) in enumerate(zip(recorded.new, sent.new, strict=False)):
        if a.sha != b.sha:
            what = f"the result of tool {b.tool or a.tool}" if (b.tool or a.tool) else \
                f"new message {index + 1}"
            return f"{what} differs:\n{_diff(a.text, b.text)}"
    if len(recorded.new) != len(sent.new):
        return f"{len(sent.new)} new message(s) sent, recorded: {len(recorded.new)}"
    if recorded.rest.sha != sent.rest.sha:
        return "the request's settings (model, system prompt, tools) differ" + (
            f":\n{_diff(recorded.rest.text, sent.rest.text)}" if recorded.rest.text else "")
    return None


def _lines(text: str) -> list[str]:
    """A normalised part's lines, also inside its JSON strings (a tool's output is one)."""
    return [line for raw in text.splitlines() for line in raw.split("\\n")]


def _diff(recorded: str, sent: str) -> str:
    lines = [line for line in difflib.unified_diff(
        _lines(recorded), _lines(sent), "recorded", "replayed", n=0, lineterm="")
        if not line.startswith(("---", "+++", "@@"))]
    cut = [line[:200] for line in lines[:DIFF_LINES]]
    if len(lines) > DIFF_LINES:
        cut.append(f"... {len(lines) - DIFF_LINES} more line(s)")
    return "\n".join(cut)


# --- recording ----------------------------------------------------------------------------


class Recorder:
    """Appends one session's exchanges to the trial's recording (see the module doc). A write
    the disk refuses is counted, never raised: the work goes on, and a replay of that trial
    stops where its recording does."""

    def __init__(self, path: Path, volatile: Volatile, *, file_cap: int = FILE_CAP) -> None:
        self.path = path
        self.fingerprints = Fingerprinter(volatile)
        self.file_cap = file_cap
        self.written = path.stat().st_size if path.exists() else 0
        self.lost = 0
        self.capped = False
        self._rests: set[str] = set()
        self._append({"format": FORMAT, "session": True})

    def fingerprint(self, route: str, body: bytes) -> Fingerprint:
        return self.fingerprints.take(route, body)

    def exchange(self, fingerprint: Fingerprint, status: int, content_type: str,
                 response: bytes | None) -> None:
        """Record one answered request (its number is its arrival's: concurrent requests
        may end in another order); ``response`` None: too big to record in full."""
        rest_text = fingerprint.rest.sha not in self._rests
        self._rests.add(fingerprint.rest.sha)
        entry: dict[str, Any] = {"n": fingerprint.n, "request": fingerprint.to_json(
            rest_text=rest_text), "status": status, "content_type": content_type}
        if response is None:
            entry["response"] = None
        else:
            entry.update(size=len(response), sha256=hashlib.sha256(response).hexdigest(),
                         response=base64.b64encode(response).decode("ascii"))
        self._append(entry)

    def _append(self, entry: dict[str, Any]) -> None:
        if self.capped:
            return
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        if self.written + len(line) > self.file_cap:
            self.capped = True
            line = json.dumps({"capped": self.file_cap}) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
            self.written += len(line.encode())
        except OSError as exc:
            if not self.lost:
                log.warning("%s: replay record not written: %s", self.path, exc.strerror or exc)
            self.lost += 1
            self.capped = True  # a gap would make a later exchange look like the next one


# --- playback -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    """One recorded exchange, read back."""

    n: int
    request: Fingerprint
    status: int
    content_type: str
    response: bytes | None


def read_recording(path: Path) -> tuple[list[Recorded], str | None]:
    """The last session of a trial's recording (the attempt that was scored) and why it ends
    early (capped, or None). Sizes and digests are checked: a damaged file is a
    :class:`ReplayError` naming the line. A link is refused: a run folder from elsewhere
    must not make the runner read another file."""
    if path.is_symlink():
        raise ReplayError(f"{path}: a link, not a recording")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ReplayError(f"{path}: no recording of this trial (recorded before replays "
                          "existed, or its agent used no model gateway)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayError(f"{path}: recording unreadable: {exc}") from None
    sessions: list[list[tuple[int, dict[str, Any]]]] = []
    for number, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line)
        except ValueError:
            raise ReplayError(f"{path}:{number}: not a JSON line (a damaged recording)"
                              ) from None
        if not isinstance(entry, dict):
            raise ReplayError(f"{path}:{number}: not an object (a damaged recording)")
        if entry.get("session"):
            if entry.get("format") != FORMAT:
                raise ReplayError(f"{path}:{number}: recording format {entry.get('format')!r}, "
                                  f"this spider2local reads {FORMAT}")
            sessions.append([])
        elif sessions:
            sessions[-1].append((number, entry))
    if not sessions:
        raise ReplayError(f"{path}: no session recorded")
    found: list[Recorded] = []
    ends: str | None = None
    for number, entry in sessions[-1]:
        if "capped" in entry:
            ends = f"the recording was capped at {entry['capped']} bytes"
            break
        try:
            found.append(_recorded(entry))
        except (KeyError, TypeError, ValueError) as exc:
            raise ReplayError(f"{path}:{number}: a damaged exchange ({exc})") from None
    return sorted(found, key=lambda e: e.n), ends


def _recorded(entry: Mapping[str, Any]) -> Recorded:
    body = entry.get("response")
    response = None
    if body is not None:
        response = base64.b64decode(body, validate=True)
        if len(response) != int(entry["size"]) or \
                hashlib.sha256(response).hexdigest() != entry["sha256"]:
            raise ValueError(f"exchange {entry.get('n')}: response size or digest differs "
                             "from the one recorded")
    return Recorded(int(entry["n"]), Fingerprint.from_json(entry["request"]),
                    int(entry["status"]), str(entry.get("content_type", "")), response)


@dataclass(frozen=True)
class Divergence:
    exchange: int
    detail: str
    asked: bool = False
    """Not a difference: the replay was asked to stop before this exchange (``until``)."""

    def message(self) -> str:
        if self.asked:
            return f"replay stopped before exchange {self.exchange}, as asked"
        return f"diverged at exchange {self.exchange}: {self.detail}"


@dataclass(frozen=True)
class ReplaySource:
    """Which recorded run a replay serves from (``run --replay``)."""

    run_id: str
    folder: Path
    """The recorded run's folder."""
    lenient: bool = False
    until: int | None = None
    """Serve exchanges 1 to ``until`` only, then refuse (``--replay-until N``: with ``--keep``,
    the workspace as it stood after exchange N, to open with ``shell``)."""


class Playback:
    """Answers one session's requests from a recorded session, in order (module doc)."""

    def __init__(self, exchanges: Sequence[Recorded], *, lenient: bool = False,
                 ends: str | None = None, source: str = "", until: int | None = None) -> None:
        self.exchanges = {e.n: e for e in exchanges}
        self.recorded = max(self.exchanges, default=0)
        self.lenient = lenient
        self.ends = ends
        self.source = source
        self.served = 0
        self.until = until
        self.diverged: Divergence | None = None
        """Strict: where the replay stopped. Lenient: the first difference (served anyway)."""
        self.ended: Divergence | None = None
        """Where nothing more could be served, lenient or not (the recording ran out)."""
        self.rests: dict[str, str] = {e.request.rest.sha: e.request.rest.text
                                      for e in exchanges if e.request.rest.text}

    @classmethod
    def load(cls, path: Path, *, lenient: bool = False, until: int | None = None) -> Playback:
        exchanges, ends = read_recording(path)
        return cls(exchanges, lenient=lenient, ends=ends, source=str(path), until=until)

    @property
    def unverified_from(self) -> int | None:
        """Lenient: the first exchange served though the request differed."""
        return self.diverged.exchange if self.lenient and self.diverged is not None else None

    @property
    def stopped(self) -> Divergence | None:
        """Why no further request is answered (None: the replay goes on)."""
        if self.ended is not None:
            return self.ended
        return self.diverged if not self.lenient else None

    def answer(self, sent: Fingerprint) -> Recorded | Divergence:
        """The recorded answer to request number ``sent.n`` of the session, or why there is
        none."""
        number = sent.n
        stopped = self.stopped
        if stopped is not None:
            return stopped
        if self.until is not None and number > self.until:
            self.ended = Divergence(number, "", asked=True)
            return self.ended
        if number not in self.exchanges:
            why = f"the recorded trial made {self.recorded} request(s)" + (
                f" ({self.ends})" if self.ends else "") if number > self.recorded else \
                "this exchange's answer was not recorded (it never completed)"
            self.ended = found = Divergence(number, why)
            self.diverged = self.diverged or found
            return found
        recorded = self.exchanges[number]
        rest = recorded.request.rest
        if not rest.text and rest.sha in self.rests:
            recorded = dataclasses.replace(recorded, request=dataclasses.replace(
                recorded.request, rest=Part(rest.sha, self.rests[rest.sha])))
        detail = difference(recorded.request, sent)
        if recorded.response is None:
            detail = detail or "its response was too big to be recorded"
            self.ended = found = Divergence(number, detail)
            self.diverged = self.diverged or found
            return found
        if detail is not None:
            found = Divergence(number, detail)
            if self.diverged is None:
                self.diverged = found
            if not self.lenient:
                return found
        self.served += 1
        return recorded

    def summary(self) -> dict[str, Any]:
        return {"recorded": len(self.exchanges), "served": self.served,
                "diverged": self.diverged.message() if self.diverged else None,
                "until": self.until,
                "stopped": self.stopped.message() if self.stopped else None,
                "unverified_from": self.unverified_from}


@dataclass
class Tape:
    """A session's recording and, when replaying, its playback: what the runner hands the
    agent's gateway (:func:`spider2local.gateway.server.open_gateway`)."""

    path: Path
    """Where the session's exchanges are recorded (the trial's folder in the run)."""
    volatile: Volatile = field(default_factory=Volatile)
    playback: Playback | None = None

    def recorder(self) -> Recorder:
        return Recorder(self.path, self.volatile)


def route_of(upstream: int, method: str, path: str) -> str:
    return f"u{upstream} {method} {path}"


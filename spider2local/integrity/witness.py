"""The unsealed witness: who opens gold while agents work, where no sandbox hides it.

Under ``--isolation none`` (asked for, ``auto`` on macOS, a restricted runner) an agent runs as
the runner's user and can copy gold unseen: a Python script that builds the gold path at run
time and prints nothing, a dbt ``pre_hook`` that ATTACHes a path read from an environment
variable. Detection (:mod:`.scan`) reads only what the agent left in text, so neither leaves a
trace there. Linux offers a witness without root: inotify.

How it works (:func:`open_witness`, one per run invocation):

- before any agent starts, the runner copies each selected task's gold database (and its
  ``.wal``) and each evaluation file into a private folder (:data:`KIND`, mode 0700, a random
  name per file's folder) and from then on reads **only those copies** (:meth:`Witness.reading`,
  :meth:`Witness.eval_file`: the pre-score guard, the scorer, the gold check). So nothing of the
  runner opens an original while agents work;
- inotify watches every original (``IN_OPEN``, ``IN_ACCESS``, and any write, attribute change,
  move or deletion) and the private folder itself (``IN_OPEN`` of the folder: a listing, the
  only way to learn a copy's random name), for the whole invocation;
- the runner says when each trial enters and leaves its agent stage (:meth:`Witness.entered`,
  :meth:`Witness.left`, after the agent's processes were reaped). A reader thread takes events
  as they come; entering and leaving first take whatever the kernel still holds, so every event
  is charged to the set of trials that were in their agent stage when it happened;
- each such trial gets evidence (:meth:`Witness.evidence`: "gold file X opened during the agent
  stage", when, how often) which the scan's one rule turns into ``integrity: suspect``
  (:func:`spider2local.integrity.scan.witnessed`). inotify does not say which process opened
  a file: with several trials in their agent stage at once, every one of them is marked, and
  the evidence says so. An event while no agent works is the run's (a leftover of an agent,
  another program): kept in run.json and said on stderr at the end.

Where inotify cannot work (not Linux, no ``inotify_init1`` in libc, the per-user limits
``fs.inotify.max_user_instances`` / ``max_user_watches`` reached, the private copies not
possible) the witness is **off**, never silently: the reason is printed at the start and kept
in run.json's session entry (``witness``); the runner then reads the originals as before.

What it cannot see (docs/isolation.md): a copy made before the watch started (an earlier
session's leftover, another user), reads through a memory mapping made before it, and which
process did it. Anything opening the originals during an agent stage counts, including another
program or another spider2local run on the same dataset files.

Why ctypes against libc and not a package: the witness needs three calls and one struct
(``inotify_init1``, ``inotify_add_watch``, the event layout), which libc has on every Linux;
the maintained packages (``inotify_simple``, ``asyncinotify``) are ctypes wrappers of the same
calls, a dependency for some forty lines.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import errno
import os
import secrets
import select
import shutil
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from spider2local.core.results import Evidence
from spider2local.dataset.task import TaskSpec
from spider2local.proc.tempdirs import make_owned_dir

KIND = "witness"
"""The private copies' temporary folder kind (``spider2local-tmp-witness-<pid>-...``)."""
SOURCE = "witness"
"""The evidence's ``source``."""
MAX_UNATTRIBUTED = 50
"""Events with no trial in its agent stage kept for run.json at most."""

IN_ACCESS = 0x00000001
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_OPEN = 0x00000020
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_ONLYDIR = 0x01000000
FILE_MASK = IN_ACCESS | IN_MODIFY | IN_ATTRIB | IN_OPEN | IN_DELETE_SELF | IN_MOVE_SELF
"""On an original: any open or read, and any change (an agent replacing gold)."""
FOLDER_MASK = IN_OPEN | IN_ONLYDIR
"""On the private copies' folder: a listing (the runner never lists it while agents work)."""
_EVENT = struct.Struct("iIII")
_WHAT = ((IN_OPEN, "opened"), (IN_ACCESS, "read"), (IN_MODIFY, "written"),
         (IN_ATTRIB, "changed (attributes)"), (IN_MOVE_SELF, "moved"),
         (IN_DELETE_SELF, "deleted"))


class WitnessState(StrEnum):
    ON = "on"
    OFF = "off"


@dataclass(frozen=True)
class Private:
    """Where the runner reads one task's gold and evaluation record during the run."""

    gold: Path
    """The copy of the gold database (its ``.wal`` beside it when the original had one), under
    the original's file name (gold's views may name their own catalog)."""
    eval_file: Path
    eval_original: tuple[Path, tuple[int, ...] | None] | None = None
    """The original evaluation file and its metadata when copied."""
    originals: tuple[tuple[str, Path, tuple[int, ...] | None], ...] = ()
    """``(what, path, metadata)`` of the original gold database and its ``.wal`` when copied
    (``None``: absent): a write since is seen by its metadata alone (size, times, inode; a
    write changes ctime, which no program sets back), without opening it."""

    def changed(self) -> list[str]:
        """One phrase per original gold file written, replaced, removed or added since."""
        found = []
        for what, path, then in self.originals:
            now = _meta(path)
            if now != then:
                how = ("appeared" if then is None else "was removed" if now is None
                       else "changed")
                found.append(f"{what} {path} {how} since the run started (its metadata; the "
                             "runner scores a private copy taken before any agent started)")
        return found


def _meta(path: Path) -> tuple[int, ...] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


@dataclass(frozen=True)
class Sighting:
    """One watched file touched: what, how, when (UTC), how often, and the trials then in their
    agent stage (empty: none was)."""

    kind: str
    path: str
    what: str
    at: str
    trials: tuple[str, ...]
    count: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "what": self.what, "at": self.at,
                "trials": list(self.trials), "count": self.count}


class Inotify:
    """The three libc calls (see the module docstring for why by hand)."""

    def __init__(self, libc: Any = None) -> None:
        lib = libc if libc is not None else ctypes.CDLL(None, use_errno=True)
        try:
            self._init = lib.inotify_init1
            self._add = lib.inotify_add_watch
        except AttributeError as exc:
            raise OSError(0, "this C library has no inotify") from exc
        self._init.argtypes, self._init.restype = [ctypes.c_int], ctypes.c_int
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._add.restype = ctypes.c_int
        fd = self._init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            hint = " (fs.inotify.max_user_instances reached)" if err == errno.EMFILE else ""
            raise OSError(err, f"inotify_init1: {os.strerror(err)}{hint}")
        self.fd = fd

    def add(self, path: Path, mask: int) -> int:
        wd = self._add(self.fd, os.fsencode(path), mask)
        if wd < 0:
            err = ctypes.get_errno()
            hint = " (fs.inotify.max_user_watches reached)" if err == errno.ENOSPC else ""
            raise OSError(err, f"inotify_add_watch {path}: {os.strerror(err)}{hint}")
        return int(wd)

    def read(self) -> list[tuple[int, int, str]]:
        """``(wd, mask, name)`` of every event the kernel holds now (never blocks)."""
        found: list[tuple[int, int, str]] = []
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return found
            if not data:
                return found
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, pos)
                name = data[pos + _EVENT.size: pos + _EVENT.size + size].rstrip(b"\0")
                found.append((wd, mask, os.fsdecode(name)))
                pos += _EVENT.size + size

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


@dataclass
class Witness:
    """One run invocation's witness: on (watching, copies taken) or off (with the reason)."""

    state: WitnessState
    reason: str
    private: Mapping[str, Private] = field(default_factory=dict)
    watched: Mapping[int, tuple[str, Path]] = field(default_factory=dict)
    """``wd -> (kind, path)``: what each watch is on."""
    folder: Path | None = None
    """The private copies' folder (removed by :meth:`close`)."""
    inotify: Inotify | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[str, None] = {}
        self._seen: dict[str, dict[tuple[str, str, str], Sighting]] = {}
        self._stray: dict[tuple[str, str, str], Sighting] = {}
        self._ignoring: str | None = None
        self._stop_r, self._stop_w = -1, -1
        self._thread: threading.Thread | None = None

    def _start(self) -> None:
        """Start the reader thread (raises OSError or RuntimeError where it cannot start:
        no memory, no file descriptor left)."""
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._follow, name="witness", daemon=True)
        self._thread.start()

    @classmethod
    def off(cls, reason: str) -> Witness:
        return cls(WitnessState.OFF, reason)

    @property
    def on(self) -> bool:
        return self.state is WitnessState.ON

    # -- what the runner reads --------------------------------------------------------------
    def reading(self, task: TaskSpec) -> TaskSpec:
        """``task`` with its gold database where the runner reads it: the private copy while
        the witness is on (the original otherwise)."""
        copy = self.private.get(task.id)
        if copy is None or task.gold is None:
            return task
        return replace(task, gold=replace(task.gold, db=copy.gold))

    def eval_file(self, task: TaskSpec) -> Path:
        """Where the runner reads ``task``'s evaluation record: the private copy, or the
        original once that was written since the copy (someone changed the records: the
        guard must read what it says now; do it inside :meth:`own_read`)."""
        copy = self.private.get(task.id)
        if copy is None:
            return task.eval_file
        if copy.eval_original is not None and _meta(copy.eval_original[0]) != \
                copy.eval_original[1]:
            return copy.eval_original[0]
        return copy.eval_file

    @contextlib.contextmanager
    def own_read(self, path: Path) -> Iterator[None]:
        """The runner itself reads the original ``path`` (an evaluation file written during
        the run, to name the record that changed): its events are not charged. Only ever
        after that file was written, so the run has already been seen tampering with it."""
        if self.inotify is None:
            yield
            return
        real = os.path.realpath(path)
        with self._lock:
            self._take()
            self._ignoring = real
        try:
            yield
        finally:
            with self._lock:
                self._take()
                self._ignoring = None

    def originals_changed(self, task: TaskSpec) -> list[str]:
        """The task's original gold files written since their copies were taken (by their
        metadata: reading them would be an event like an agent's)."""
        copy = self.private.get(task.id)
        return copy.changed() if copy is not None else []

    # -- the agent stages ---------------------------------------------------------------------
    def entered(self, trial: str) -> None:
        """``trial``'s agent is about to start: events from now on are charged to it too."""
        if self.inotify is None:
            return
        with self._lock:
            self._take()
            self._active[trial] = None

    def left(self, trial: str) -> None:
        """``trial``'s agent stage is over (its processes reaped): what happened until now is
        charged, then it is no longer."""
        if self.inotify is None:
            return
        with self._lock:
            self._take()
            self._active.pop(trial, None)

    def evidence(self, trial: str) -> tuple[Evidence, ...]:
        """What was seen while ``trial`` was in its agent stage, one item per file and kind of
        access (taken: a second call returns nothing new)."""
        with self._lock:
            seen = self._seen.pop(trial, {})
        return tuple(_evidence(s, trial) for s in seen.values())

    def stray(self) -> list[Sighting]:
        """Events while no trial was in its agent stage (the run's, not a trial's)."""
        with self._lock:
            if self.inotify is not None:
                self._take()
            return list(self._stray.values())

    def _follow(self) -> None:
        assert self.inotify is not None
        while True:
            try:
                ready, _, _ = select.select([self.inotify.fd, self._stop_r], [], [])
            except (OSError, ValueError):
                return
            if self._stop_r in ready:
                return
            with self._lock:
                self._take()

    def _take(self) -> None:
        """Charge every event the kernel holds to the trials in their agent stage now (the
        caller holds the lock)."""
        assert self.inotify is not None
        try:
            events = self.inotify.read()
        except OSError:
            return
        at, trials = _now(), tuple(self._active)
        for wd, mask, name in events:
            for kind, path, what in self._describe(wd, mask, name):
                key = (kind, path, what)
                self._charge(key, at, trials)

    def _describe(self, wd: int, mask: int, name: str) -> Iterable[tuple[str, str, str]]:
        if mask & IN_Q_OVERFLOW:
            yield "watched file", "(events lost: inotify's queue overflowed)", "touched"
            return
        if mask & IN_IGNORED or wd not in self.watched:
            return  # a watch gone with its file (its deletion was reported)
        kind, path = self.watched[wd]
        if str(path) == self._ignoring:
            return  # the runner's own read (:meth:`own_read`)
        if kind == COPIES and name:
            return  # a file inside the copies' folder: only a listing of the folder counts
        for bit, word in _WHAT:
            if mask & bit:
                yield kind, str(path), ("listed" if kind == COPIES and bit == IN_OPEN else word)

    def _charge(self, key: tuple[str, str, str], at: str, trials: tuple[str, ...]) -> None:
        if not trials:
            old = self._stray.get(key)
            if old is not None:
                self._stray[key] = replace(old, count=old.count + 1)
            elif len(self._stray) < MAX_UNATTRIBUTED:
                self._stray[key] = Sighting(*key, at=at, trials=())
            return
        for trial in trials:
            mine = self._seen.setdefault(trial, {})
            old = mine.get(key)
            if old is None:
                mine[key] = Sighting(*key, at=at, trials=trials)
            else:
                joined = tuple(dict.fromkeys((*old.trials, *trials)))
                mine[key] = replace(old, count=old.count + 1, trials=joined)

    # -- the record -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """What run.json's session entry keeps (``witness``)."""
        data: dict[str, Any] = {"state": self.state.value, "reason": self.reason}
        if self.on:
            data["watched"] = sorted(str(p) for k, p in self.watched.values() if k != COPIES)
            if self.folder is not None:
                data["private_copies"] = str(self.folder)
            stray = self.stray()
            if stray:
                data["unattributed"] = [s.to_json() for s in stray]
        return data

    def close(self) -> None:
        """Stop watching and remove the private copies (the watch first: removing the copies'
        folder lists it)."""
        if self.inotify is not None:
            with contextlib.suppress(OSError):
                os.write(self._stop_w, b"x")
            if self._thread is not None and self._thread.is_alive():
                self._thread.join(5)
            self.inotify.close()
            for fd in (self._stop_r, self._stop_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.inotify = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


GOLD = "gold file"
EVAL = "evaluation file"
COPIES = "private gold copies folder"


def _evidence(s: Sighting, trial: str) -> Evidence:
    others = [t for t in s.trials if t != trial]
    shared = "" if not others else (
        f"; {len(s.trials)} trials were in their agent stage then ({', '.join(s.trials)}): "
        "inotify cannot tell which one did it, so all are marked")
    times = "once" if s.count == 1 else f"{s.count} times"
    return Evidence(SOURCE, None, f"{s.kind} {s.path} {s.what} during the agent stage",
                    f"first at {s.at}, {times}{shared}")


def originals(tasks: Iterable[TaskSpec]) -> list[tuple[str, Path]]:
    """``(kind, path)`` of every original the witness watches: each task's gold database and
    its ``.wal`` (when there is one) and each evaluation file (real paths, once)."""
    found: dict[Path, str] = {}
    for task in tasks:
        if task.gold is None:
            continue
        db = task.gold.db
        for path, kind in ((db, GOLD), (db.with_name(db.name + ".wal"), GOLD),
                           (task.eval_file, EVAL)):
            if path.is_file():
                found.setdefault(Path(os.path.realpath(path)), kind)
    return [(kind, path) for path, kind in found.items()]


def take_copies(tasks: Iterable[TaskSpec], folder: Path) -> dict[str, Private]:
    """Copy each task's gold (and ``.wal``) and evaluation file into ``folder``, each in a
    subfolder of a random name (learnt only by listing ``folder``, which is watched)."""
    private: dict[str, Private] = {}
    evals: dict[Path, Path] = {}
    metas: dict[Path, tuple[Path, tuple[int, ...] | None]] = {}
    for task in tasks:
        if task.gold is None:
            continue
        db = task.gold.db
        wal = db.with_name(db.name + ".wal")
        home = folder / secrets.token_hex(16)
        home.mkdir(mode=0o700)
        originals = (("gold file", db, _meta(db)), ("gold .wal", wal, _meta(wal)))
        shutil.copyfile(db, home / db.name)
        if wal.is_file():
            shutil.copyfile(wal, home / wal.name)
        source = task.eval_file
        if source not in evals:
            where = folder / secrets.token_hex(16)
            where.mkdir(mode=0o700)
            evals[source] = where / source.name
            metas[source] = (source, _meta(source))
            shutil.copyfile(source, evals[source])
        private[task.id] = Private(home / db.name, evals[source], metas[source], originals)
    return private


def open_witness(tasks: Iterable[TaskSpec], *, parent: Path | None = None,
                 make: Callable[[], Inotify] | None = None) -> Witness:
    """Take the private copies and start watching the originals; an off witness with the
    reason where that cannot be done (never raises for it). ``make``: tests stand in a failing
    libc."""
    todo = [t for t in tasks if t.gold is not None]
    if not sys.platform.startswith("linux"):
        return Witness.off(f"inotify is Linux-only (this is {sys.platform})")
    try:
        inotify = (make or Inotify)()
    except OSError as exc:
        return Witness.off(f"inotify unavailable: {exc.strerror or exc}")
    folder: Path | None = None
    watched: dict[int, tuple[str, Path]] = {}
    step = "private copies not taken"
    try:
        folder = make_owned_dir(KIND, parent)
        private = take_copies(todo, folder)
        step = "inotify"
        for kind, path in originals(todo):
            watched[inotify.add(path, FILE_MASK)] = (kind, path)
        watched[inotify.add(folder, FOLDER_MASK)] = (COPIES, folder)
    except OSError as exc:
        inotify.close()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        where = f" ({exc.filename})" if exc.filename else ""
        return Witness.off(f"{step}: {exc.strerror or exc}{where}")
    files = sum(1 for kind, _ in watched.values() if kind != COPIES)
    found = Witness(WitnessState.ON, f"inotify watches {files} gold and evaluation file(s); "
                    "the runner reads private copies", private, watched, folder, inotify)
    try:
        found._start()
    except (OSError, RuntimeError) as exc:  # a thread cannot start (no memory): off, said
        found.close()
        return Witness.off(f"its reader thread cannot start: {exc}")
    return found

"""Detection: after each task, look for signs that the agent reached outside its workspace.

Always on, with or without isolation: a sandbox stops the attempt, detection makes it visible.
What is read: the transcript (tool inputs and outputs alike: each JSON line is decoded and
every string in it is read, so JSON escapes hide nothing), the queries log, and every text file
of the workspace project the agent created or changed (compared with the project as it was
prepared: the dataset's own files, vendored packages, the runner's context files and skills
are not the agent's doing). dbt's own logs and compiled SQL count: a model that ATTACHes gold
through Jinja shows the resolved path there.

What is looked for (:class:`Protected`): the dataset root, the runs folder, the suite file and
spider2local's cache by path; the gold folder name (``evaluation_suite``), the evaluation file
name and the task's gold file name by name (the gold name only when it differs from the start
database's, which it often equals in upstream's layout); ``ATTACH``, ``read_*``, ``glob``,
``COPY``, ``FROM '<file>'`` and ``connect(...)`` of a path outside the workspace; and any
``/proc/<pid>/environ``. Each text is read three ways: as written, with ``\\uXXXX``/``\\xXX``
escapes decoded, and squashed (quotes, ``+``, backslashes and whitespace removed, so a path
split across lines or string pieces joins up). Matching ignores case.

A hit makes the task ``suspect`` with the evidence (source, line, rule, excerpt): the verdict is
kept, reports count suspect tasks apart, a person decides. It is not a proof of cheating (an
honest agent may look at ``/tmp``) and its absence is not a proof of honesty (a base64 string
hides anything): the guards and the sandbox are the guarantees, this is the witness.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.core import upstream
from spider2local.core.results import Evidence, Integrity
from spider2local.exceptions import DeadlinePassed
from spider2local.safepath import is_within
from spider2local.workspace.tree import Check, read_regular, walk_files

MAX_FILE_BYTES = 20 * 1024 * 1024
"""Project files larger than this are not read (a database, a data dump): text the agent
wrote is far smaller."""
MAX_EVIDENCE = 20
EXCERPT = 60
RUNNER_ENTRIES = frozenset({"attempt", "apply"})
"""Transcript entries the runner and its built-in agents write about themselves, naming paths
they chose (the workspace; the reference solution's folder inside the dataset), not actions of
an agent."""
BUILD_OUTPUT = frozenset({"target", "logs"})
GOLD_FOLDER = upstream.GOLD_FOLDER
EVAL_FILE_NAME = upstream.EVAL_FILE_NAME


@dataclass(frozen=True)
class Protected:
    """What lies outside one task's workspace and must not be named or opened by its agent.

    The one owner of "outside the workspace": :meth:`outside` decides it for every path the
    scan finds."""

    workspace: Path
    """The workspace root (resolved): the project, the CLI's config, everything of the attempt."""
    cwd: Path
    """Where relative paths resolve: the project folder, the agent's working directory."""
    paths: tuple[tuple[str, str], ...] = ()
    """``(rule, absolute path)``, matched as a path (with boundaries)."""
    names: tuple[tuple[str, str], ...] = ()
    """``(rule, name)``, matched anywhere."""
    own: tuple[str, ...] = ()
    """Folders of this task a path needle may lead into without a hit: the workspace, and the
    task's own folder in the run (the runner points the built-in agents' dbt logs there)."""

    @classmethod
    def for_task(cls, *, workspace: Path, cwd: Path, dataset_root: Path | None,
                 gold: Path | None, start_db: Path | None, runs_dir: Path | None = None,
                 suite_file: Path | None = None, cache_dir: Path | None = None,
                 artifacts: Path | None = None, off_limits: Iterable[Path] = ()) -> Protected:
        ws = Path(os.path.realpath(workspace))
        own = [str(ws)] + ([] if artifacts is None else
                           list(dict.fromkeys((str(artifacts.absolute()),
                                               os.path.realpath(artifacts)))))
        paths: list[tuple[str, str]] = []
        named = [("dataset root", dataset_root), ("runs folder", runs_dir),
                 ("suite file", suite_file), ("spider2local cache", cache_dir)]
        named += [("off limits", p) for p in off_limits]  # the sandbox's hidden list
        taken: set[str] = set()
        for rule, path in named:
            if path is None:
                continue
            for form in dict.fromkeys((str(Path(path).absolute()), os.path.realpath(path))):
                # A folder that holds the workspace would match every honest path.
                if form != "/" and not _inside(ws, Path(form)) and form not in taken:
                    taken.add(form)
                    paths.append((rule, form))
        names = [("gold folder", GOLD_FOLDER), ("evaluation file", EVAL_FILE_NAME)]
        if gold is not None and (start_db is None or gold.name.lower() != start_db.name.lower()):
            names.append(("gold file", gold.name))
        return cls(ws, Path(os.path.realpath(cwd)), tuple(paths), tuple(names),
                   tuple(p.lower() for p in own))

    @functools.cached_property
    def _needles(self) -> tuple[tuple[re.Pattern[str], ...], dict[str, list[str]],
                                tuple[int, ...]]:
        """Searches that find where path needles start (zero-width, each capturing the longest
        needle of its own there; together they cover every needle), each lowered needle's
        rules, and the needle lengths: see :func:`find_hits`."""
        rules: dict[str, list[str]] = {}
        for rule, path in self.paths:
            rules.setdefault(path.lower(), []).append(rule)
        return _needle_searches(frozenset(rules)), rules, tuple(sorted({len(n) for n in rules}))

    def outside(self, written: str) -> bool:
        """Does a path as written in SQL or code (relative to :attr:`cwd`) leave the workspace?
        Both its lexical form and, where it exists, its real path (symlinks) must stay inside.
        In-memory databases, URLs and unresolved Jinja are not files here."""
        text = written.strip()
        if not text or text.lower() == ":memory:" or _URL.match(text) or "{{" in text:
            return False
        try:
            path = Path(text).expanduser()
        except RuntimeError:  # ~someone unknown: a path like any other
            path = Path(text)
        path = path if path.is_absolute() else self.cwd / path
        lexical = Path(os.path.normpath(path))
        return not (_inside(lexical, self.workspace)
                    and _inside(Path(os.path.realpath(lexical)), self.workspace))


@functools.lru_cache(maxsize=32)
def _needle_search(needles: tuple[str, ...]) -> re.Pattern[str]:
    """The zero-width search for any of ``needles`` (sorted, lowered)."""
    return re.compile(f"(?=({trie_pattern(needles)}))") if needles else re.compile(r"(?!)")


DELTA_NEEDLES = 64
"""Needles a task may have beyond the shared search's before that search is built anew."""
_shared: tuple[frozenset[str], re.Pattern[str]] | None = None
_shared_lock = threading.Lock()  # scans of several tasks run in worker threads at once


def _needle_searches(needles: frozenset[str]) -> tuple[re.Pattern[str], ...]:
    """Searches that together find every one of ``needles``: the process's shared search
    (built for an earlier task's needles) and one for the few of these it lacks.

    Why: with the machine's remembered runs folders and setup zips every task has some 1,400
    path needles, and building and compiling their trie took 0.17 s of each trial's scan
    (measured, 2 loaded cores), while the tasks of a run differ only by a few (their gold
    folders). A search built for more needles than a task's is still right for it: a match
    only says where to look, and :func:`find_hits` yields a hit only for a prefix of the
    match that is one of the task's own needles (every needle matching at one position is a
    prefix of the longest one matching there)."""
    global _shared
    with _shared_lock:
        shared = _shared
    if shared is not None:
        extra = needles - shared[0]
        if not extra:
            return (shared[1],)
        if len(extra) <= DELTA_NEEDLES:
            return shared[1], _needle_search(tuple(sorted(extra)))
    built = _needle_search(tuple(sorted(needles)))
    with _shared_lock:
        _shared = (needles, built)
    return (built,)


def _longest_at(low: str, searches: tuple[re.Pattern[str], ...]) -> Iterator[tuple[int, str]]:
    """``(position, longest needle there)`` in the order of the text, over all ``searches``
    (several matching at one position: the longest, which the others are prefixes of)."""
    if len(searches) == 1:
        for m in searches[0].finditer(low):
            yield m.start(), m.group(1)
        return
    found: dict[int, str] = {}
    for search in searches:
        for m in search.finditer(low):
            if len(m.group(1)) > len(found.get(m.start(), "")):
                found[m.start()] = m.group(1)
    yield from sorted(found.items())


def _inside(path: Path, root: Path) -> bool:
    return is_within(path, root)


def trie_pattern(words: Iterable[str]) -> str:
    """A regular expression matching any of ``words`` (longest first), built as a trie.

    Written by hand because a plain alternation is what Python's ``re`` tries branch by branch
    at every position: with the hundreds of remembered runs folders and setup zips a task's
    off-limits list holds, one search per needle over a 1 MB transcript took the scan past
    its 5 s deadline (measured); the trie reads each position once, sharing prefixes."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = []
        for ch, sub in sorted(node.items()):
            if not ch:
                continue
            chain = ch
            while len(sub) == 1 and "" not in sub:  # a run of single children: one literal
                (nxt, sub), = sub.items()
                chain += nxt
            branches.append(re.escape(chain) + emit(sub))
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(trie)


_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|md:|motherduck:)", re.IGNORECASE)
_QUOTED = r"""(?:'(?P<s>[^']*)'|"(?P<d>[^"]*)"|\$\$(?P<dd>.*?)\$\$)"""
_OPENERS = (r"\battach\b(?:\s+database)?(?:\s+if\s+not\s+exists)?\s*",
            r"\b(?:read_\w+|glob|parquet_scan|sqlite_scan)\s*\(\s*\[?\s*",
            r"\bcopy\b[^;]{0,300}?\b(?:from|to)\s+",
            r"\bconnect\s*\(\s*(?:database\s*=\s*)?",
            r"\bfrom\s+")
_OPEN_FILE = re.compile(rf"(?:{'|'.join(_OPENERS)}){_QUOTED}", re.IGNORECASE | re.DOTALL)
_FILE_LIST = re.compile(r"\b(?:read_\w+|glob|parquet_scan)\s*\(\s*\[(?P<items>[^\]]{0,4000})\]",
                        re.IGNORECASE)
_QUOTED_ONLY = re.compile(_QUOTED, re.DOTALL)
_ENVIRON = re.compile(r"/proc/[^/\s'\"]{1,40}/environ", re.IGNORECASE)
_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|\\(/)")
_SQUASH = re.compile(r"""[\s'"+\\]+""")
_PATH_CHAR = re.compile(r"[A-Za-z0-9_.-]")


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: m.group(3) or chr(int(m.group(1) or m.group(2), 16)), text)


def _variants(text: str) -> Iterator[tuple[str, bool]]:
    """``(text, lines_kept)``: as written, unescaped, squashed."""
    yield text, True
    unescaped = _unescape(text)
    if unescaped != text:
        yield unescaped, True
    yield _SQUASH.sub("", unescaped), False


def _excerpt(text: str, start: int, end: int) -> str:
    piece = text[max(0, start - EXCERPT): end + EXCERPT]
    return " ".join(piece.split())


def find_hits(text: str, prot: Protected) -> Iterator[tuple[str, int | None, str]]:
    """``(rule, line offset from the text's first line or None, excerpt)`` for each hit."""
    for variant, lines_kept in _variants(text):
        low = variant.lower()

        def line_of(pos: int, variant: str = variant, lines_kept: bool = lines_kept) -> int | None:
            return variant.count("\n", 0, pos) if lines_kept else None

        starts, rules, lengths = prot._needles
        for start, longest in _longest_at(low, starts):  # then every needle starting here
            for size in lengths:
                if size > len(longest):
                    break
                for rule in rules.get(longest[:size], ()):
                    end = start + size
                    before = low[start - 1] if start else ""
                    after = low[end] if end < len(low) else ""
                    if _PATH_CHAR.match(before) or (after and _PATH_CHAR.match(after)):
                        continue
                    if any(_leads_into(low, start, own) for own in prot.own):
                        continue  # this task's own folders lie below this one: they are fine
                    yield rule, line_of(start), _excerpt(variant, start, end)
        for rule, name in prot.names:
            for m in re.finditer(re.escape(name.lower()), low):
                yield rule, line_of(m.start()), _excerpt(variant, m.start(), m.end())
        for m in _ENVIRON.finditer(variant):
            yield "process environment", line_of(m.start()), _excerpt(variant, m.start(), m.end())
        if not lines_kept:
            continue  # quotes are gone from the squashed text
        opened = [(m, _written(m)) for m in _OPEN_FILE.finditer(variant)]
        opened += [(m, _written(q)) for m in _FILE_LIST.finditer(variant)
                   for q in _QUOTED_ONLY.finditer(m.group("items"))]
        for m, written in opened:
            if prot.outside(written):
                yield ("file outside the workspace", line_of(m.start()),
                       _excerpt(variant, m.start(), m.end()))


def _leads_into(text: str, pos: int, folder: str) -> bool:
    """Is the path at ``pos`` ``folder`` itself or inside it (not a sibling with a longer
    name)?"""
    end = pos + len(folder)
    return text.startswith(folder, pos) and (end == len(text) or not _PATH_CHAR.match(text[end]))


def _written(m: re.Match[str]) -> str:
    return next(g for g in (m.group("s"), m.group("d"), m.group("dd")) if g is not None)


class _Collector:
    """Distinct hits, and a short, varied selection of them: one per (source, rule) first, so a
    model file's ATTACH is not crowded out by the dbt logs that repeat it."""

    def __init__(self) -> None:
        self.found: list[Evidence] = []
        self.seen: set[tuple[str, int | None, str]] = set()
        self.kinds: set[tuple[str, str]] = set()

    def add(self, source: str, line: int | None, rule: str, excerpt: str) -> None:
        key = (source, line, rule)
        if key in self.seen or (line is None and (source, rule) in self.kinds):
            return
        self.seen.add(key)
        self.kinds.add((source, rule))
        self.found.append(Evidence(source, line, rule, excerpt))

    @property
    def total(self) -> int:
        return len(self.found)

    @property
    def items(self) -> list[Evidence]:
        first: dict[tuple[str, str], Evidence] = {}
        for e in self.found:
            first.setdefault((e.source, e.rule), e)
        chosen = list(first.values())[:MAX_EVIDENCE]
        rest = [e for e in self.found if e not in chosen]
        return chosen + rest[:MAX_EVIDENCE - len(chosen)]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _scan_jsonl(path: Path, prot: Protected, out: _Collector,
                check: Check | None = None) -> None:
    try:
        lines = read_regular(path).decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return
    for no, line in enumerate(lines, start=1):
        if check is not None:
            check()
        try:
            entry = json.loads(line)
        except ValueError:
            entry = line  # a torn last line is still text
        if isinstance(entry, dict) and entry.get("kind") in RUNNER_ENTRIES:
            continue
        for text in _strings(entry):
            for rule, _, excerpt in find_hits(text, prot):
                out.add(path.name, no, rule, excerpt)


def project_baseline(project: Path) -> dict[str, str]:
    """``relative path -> sha256`` of the project's readable files as prepared, before the
    agent starts: what :func:`scan_task` leaves out as not the agent's doing."""
    found = {}
    for path, rel in _project_files(project):
        digest = _digest(path)
        if digest is not None:
            found[rel] = digest
    return found


def _project_files(project: Path, check: Check | None = None) -> Iterator[tuple[Path, str]]:
    """Plain files only: reading a FIFO the agent left would block the runner for ever (its
    writer died with the sandbox), and a project folder replaced by a symlink to ``/`` would
    walk the runner's whole file system. Iterative (:mod:`spider2local.workspace.tree`): a
    1,200-level tree must not crash the scan."""
    for path, info in walk_files(project, check=check):
        if info.st_size <= MAX_FILE_BYTES:
            yield path, path.relative_to(project).as_posix()


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(read_regular(path, MAX_FILE_BYTES + 1)).hexdigest()
    except OSError:
        return None


def _scan_project(project: Path, baseline: Mapping[str, str], prot: Protected,
                  out: _Collector, check: Check | None = None) -> None:
    # What the agent wrote before what dbt derived from it (target/, logs/).
    files = sorted(_project_files(project, check),
                   key=lambda f: f[1].split("/")[0] in BUILD_OUTPUT)
    for path, rel in files:
        try:
            data = read_regular(path, MAX_FILE_BYTES + 1)
        except OSError:
            continue
        if baseline.get(rel) == hashlib.sha256(data).hexdigest() or b"\0" in data[:8192]:
            continue  # as prepared, or binary
        text = data.decode("utf-8", errors="replace")
        for rule, offset, excerpt in find_hits(text, prot):
            out.add(f"project/{rel}", None if offset is None else offset + 1, rule, excerpt)


@dataclass(frozen=True)
class ScanResult:
    integrity: Integrity
    evidence: tuple[Evidence, ...] = ()
    hits: int = 0
    """How many hits in all (the evidence keeps the first :data:`MAX_EVIDENCE`)."""


def scan_task(*, transcript: Path, queries: Path, project: Path | None,
              baseline: Mapping[str, str], prot: Protected,
              check: Check | None = None) -> ScanResult:
    """Scan one finished task (see the module docstring). Never raises for what an agent
    left: unreadable files are skipped, and an unexpected failure of the scan itself marks the
    task suspect (an agent must not be able to hide behind a crash of its witness).
    ``check`` (the stage deadline) is called per line and file; its :class:`DeadlinePassed`
    is raised through."""
    out = _Collector()
    try:
        _scan_jsonl(transcript, prot, out, check)
        _scan_jsonl(queries, prot, out, check)
        if project is not None and project.is_dir():
            _scan_project(project, baseline, prot, out, check)
    except DeadlinePassed:
        raise
    except Exception as exc:
        out.add("scanner", None, "scan failed", f"{type(exc).__name__}: {exc}")
    if not out.items:
        return ScanResult(Integrity.CLEAN)
    return ScanResult(Integrity.SUSPECT, tuple(out.items), out.total)

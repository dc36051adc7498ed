"""Find out, from a dbt project's text alone, whether its models read the clock.

A project whose models never call ``current_date``, ``now()`` and friends builds the same tables
on every date, so its task needs no fake date (``clock-independent``). The scan is static and
errs on the side of "reads the clock": a false positive only costs a derived date, a false
negative would make results drift with the calendar.

Macros are followed: a macro that reads the clock (in the project or a vendored package) only
matters when some model calls it, directly or through other macros, because macros such as
``dbt_utils.current_timestamp`` are vendored by most projects and used by few. Each hit names the
file and line so a human can check the verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from spider2local.dbtproject import inventory as scan
from spider2local.dbtproject.paths import ProjectPaths, project_paths

CLOCK_PATTERN = re.compile(
    r"\bcurrent_date\b|\bcurrent_timestamp\w*|\bcurrent_time\b|\blocaltimestamp\b"
    r"|\blocaltime\b|\bsysdate\b|\bsystimestamp\b|\bcurrent_localtimestamp\s*\("
    r"|\bnow\s*\(|\bgetdate\s*\(|\bgetutcdate\s*\(|\bsysdatetime\s*\(|\btoday\s*\("
    r"|\btransaction_timestamp\s*\(|\bstatement_timestamp\s*\(|\bget_current_time\w*\s*\("
    r"|\brun_started_at\b|\bdatetime\.now\b|\bdatetime\.utcnow\b|\bdate\.today\b",
    re.IGNORECASE,
)
"""Every way we know of to read the clock in DuckDB SQL or dbt Jinja (``dbt.current_timestamp()``
and ``current_timestamp_backcompat`` match ``current_timestamp\\w*``)."""

_DATE_SPINE = re.compile(r"\b(?:dbt_utils|dbt)\s*\.\s*date_spine\s*\(")
"""``dbt_utils.date_spine(...)`` and dbt-core's copy ``dbt.date_spine(...)`` (same semantics)."""
_SPINE_PARAMS = ("datepart", "start_date", "end_date")
_DATEADD = re.compile(r"dateadd\s*\(\s*(?:datepart\s*=\s*)?[\\'\"]*\s*(\w+)\s*[\\'\"]*\s*,"
                      r"\s*(?:interval\s*=\s*)?[\\'\"]*\s*(-?\d+)\s*[\\'\"]*\s*,", re.IGNORECASE)
_COMMENT = re.compile(r"\{#.*?#\}|/\*.*?\*/|--[^\n]*", re.DOTALL)
_MACRO = re.compile(r"\{%-?\s*macro\s+(\w+)\s*\((.*?)\{%-?\s*endmacro", re.DOTALL)
_CALL = re.compile(r"\b(\w+)\s*\(")


@dataclass(frozen=True)
class ClockHit:
    """One place where the clock is read."""

    path: Path
    """Relative to the project folder."""
    line: int
    match: str
    text: str
    via: str | None = None
    """For a model calling a clock-reading macro: that macro's name."""

    def describe(self) -> str:
        how = f"{self.via}() -> " if self.via else ""
        return f"{self.path}:{self.line} {how}{self.match}"


@dataclass(frozen=True)
class SpineEnd:
    """A ``date_spine`` call whose ``end_date`` reads the clock.

    The macro generates ``datediff(start_date, end_date, datepart)`` periods from
    ``start_date`` (dbt-core's and dbt_utils' ``default__date_spine``): the end is excluded, so
    a daily spine built on D ends at D-1 and a monthly one at the month before D's.
    """

    model: str
    datepart: str
    """``day``, ``month``, ...: lower case, as the call names it."""
    offset: int | None
    """Periods the end adds to the clock (``dbt.dateadd('day', 1, 'current_date')``: 1); 0 for
    the clock itself; ``None`` when the end is some other expression of the clock."""
    where: str
    """``models/x.sql:3``, for the evidence text."""


@dataclass(frozen=True)
class ClockScan:
    """The verdict for one project."""

    project: Path
    hits: tuple[ClockHit, ...]
    """Hits in models (directly or through macros): these make the output depend on the date."""
    unused: tuple[ClockHit, ...]
    """Hits in macros that no model calls (reported, but they do not read the clock)."""
    spines: tuple[SpineEnd, ...] = ()
    """Date spines in models that end at the clock (their end date is exclusive)."""

    def spine_end(self, model: str) -> SpineEnd | None:
        """The first clock-ended ``date_spine`` of ``model`` (matched case-insensitively)."""
        return next((s for s in self.spines if s.model.lower() == model.lower()), None)

    @property
    def reads_clock(self) -> bool:
        return bool(self.hits)

    @property
    def models(self) -> tuple[str, ...]:
        """Names (file stems) of models that read the clock, in scan order, no repeats."""
        return tuple(dict.fromkeys(h.path.stem for h in self.hits))

    def summary(self, limit: int = 3) -> str:
        if not self.hits:
            return "never reads the clock"
        shown = "; ".join(h.describe() for h in self.hits[:limit])
        more = f" (+{len(self.hits) - limit} more)" if len(self.hits) > limit else ""
        return f"reads the clock: {shown}{more}"


@dataclass(frozen=True)
class _Source:
    path: Path
    code: str
    """Text with comments blanked out (line numbers kept)."""
    is_model: bool


def strip_comments(text: str) -> str:
    """Blank out SQL and Jinja comments but keep every newline, so line numbers still match."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def scan_clock_reads(project: Path) -> ClockScan:
    """Scan the project's models, macros and snapshots, and its vendored packages."""
    sources = list(_sources(project))
    bodies = _macro_bodies(sources)
    clock_macros = _clock_macros(bodies)
    hits: list[ClockHit] = []
    spines: list[SpineEnd] = []
    model_calls: set[str] = set()
    for src in (s for s in sources if s.is_model):
        hits += _direct_hits(src)
        hits += _macro_hits(src, clock_macros)
        spines += _spine_ends(src)
        model_calls |= _calls(src.code)
    used = _reachable(model_calls, bodies)
    unused = [hit for name, macro in bodies.items() if name not in used for hit in macro.hits]
    return ClockScan(project, tuple(hits), tuple(unused), tuple(spines))


def unshipped_models(project: Path, names: Iterable[str]) -> tuple[str, ...]:
    """The ``names`` (graded tables) whose model SQL the project does not ship complete: declared
    in YML only, a stub, or absent. The scan above cannot see their clock reads: that SQL is
    what the agent will write, so "never reads the clock" only covers the shipped models."""
    found = scan.scan_project(project)
    complete = {m.name.lower() for m in found.models if m.status == "complete"}
    complete |= {Path(rel).stem.lower() for rel in found.undeclared
                 if scan.sql_status(project / rel) == "complete"}
    return tuple(n for n in dict.fromkeys(names) if n.lower() not in complete)


def _direct_hits(src: _Source) -> list[ClockHit]:
    lines = src.code.splitlines()
    return [ClockHit(src.path, n, m.group(0).strip(), lines[n - 1].strip())
            for m, n in _matches(CLOCK_PATTERN, src.code)]


def _macro_hits(src: _Source, clock_macros: dict[str, list[ClockHit]]) -> list[ClockHit]:
    called = _calls(src.code) & clock_macros.keys()
    if not called:
        return []
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(called))) + r")\s*\(")
    lines = src.code.splitlines()
    return [ClockHit(src.path, n, clock_macros[m.group(1)][0].match, lines[n - 1].strip(),
                     via=m.group(1))
            for m, n in _matches(pattern, src.code)]


def _spine_ends(src: _Source) -> list[SpineEnd]:
    """``date_spine`` calls of a model whose ``end_date`` argument reads the clock."""
    found = []
    for m, line in _matches(_DATE_SPINE, src.code):
        args = _call_args(src.code, m.end())
        end = args.get("end_date", "")
        if not CLOCK_PATTERN.search(end):
            continue
        datepart = args.get("datepart", "").strip().strip("\"'").strip().lower()
        found.append(SpineEnd(src.path.stem, datepart, _end_offset(end, datepart),
                              f"{src.path}:{line}"))
    return found


def _call_args(code: str, start: int) -> dict[str, str]:
    """The arguments of the call whose ``(`` ends just before ``start``, by parameter name.

    Hand-written rather than a Jinja parse: only the top-level commas matter (outside quotes
    and brackets), and a call cut off by the end of the file just yields fewer arguments.
    """
    args: list[str] = []
    depth, quote = 0, ""
    current: list[str] = []
    for char in code[start:]:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif char == "," and depth == 0:
            args.append("".join(current))
            current = []
            continue
        current.append(char)
    args.append("".join(current))
    named: dict[str, str] = {}
    for position, arg in enumerate(a.strip() for a in args):
        key, eq, value = arg.partition("=")
        if eq and key.strip() in _SPINE_PARAMS and not value.startswith("="):
            named[key.strip()] = value.strip()
        elif position < len(_SPINE_PARAMS):
            named.setdefault(_SPINE_PARAMS[position], arg)
    return named


def _end_offset(end: str, datepart: str) -> int | None:
    """How many ``datepart`` periods ``end`` adds to the clock: 0 for a bare clock read, N for
    ``dateadd(<datepart>, N, <clock>)``, ``None`` for anything else (a rebuild measures it)."""
    text = end.strip().strip("\"'").strip()
    bare = CLOCK_PATTERN.fullmatch(text) or re.fullmatch(
        r"(?:\{\{\s*)?(?:dbt\s*\.\s*)?current_timestamp\s*\(\s*\)(?:\s*\}\})?"
        r"|cast\s*\(\s*(?:current_date|current_timestamp|now\s*\(\s*\))\s+as\s+date\s*\)",
        text, re.IGNORECASE)
    if bare:
        return 0
    add = _DATEADD.search(text)
    if add is not None and add.group(1).lower() == datepart:
        return int(add.group(2))
    return None


def _matches(pattern: re.Pattern[str], code: str, start: int = 0,
             end: int | None = None) -> Iterator[tuple[re.Match[str], int]]:
    for m in pattern.finditer(code, start, len(code) if end is None else end):
        yield m, code.count("\n", 0, m.start()) + 1


def _calls(code: str) -> set[str]:
    return set(_CALL.findall(code))


@dataclass(frozen=True)
class _Macro:
    calls: frozenset[str]
    hits: tuple[ClockHit, ...]


def _macro_bodies(sources: list[_Source]) -> dict[str, _Macro]:
    """Every macro defined in the project and its packages (same-name macros are merged)."""
    macros: dict[str, _Macro] = {}
    for src in (s for s in sources if not s.is_model):
        lines = src.code.splitlines()
        for m in _MACRO.finditer(src.code):
            name = m.group(1)
            hits = tuple(ClockHit(src.path, n, hit.group(0).strip(), lines[n - 1].strip())
                         for hit, n in _matches(CLOCK_PATTERN, src.code, m.start(), m.end()))
            calls = frozenset(_calls(m.group(2)) - {name})
            old = macros.get(name, _Macro(frozenset(), ()))
            macros[name] = _Macro(old.calls | calls, old.hits + hits)
    return macros


def _clock_macros(macros: dict[str, _Macro]) -> dict[str, list[ClockHit]]:
    """Macro name -> hits, for macros that read the clock directly or call one that does."""
    result = {name: list(m.hits) for name, m in macros.items() if m.hits}
    changed = True
    while changed:
        changed = False
        for name, macro in macros.items():
            called = sorted(macro.calls & result.keys())
            if name not in result and called:
                result[name] = result[called[0]]
                changed = True
    return result


def _reachable(calls: set[str], macros: dict[str, _Macro]) -> set[str]:
    """Macros called from models, directly or through other macros."""
    seen: set[str] = set()
    todo = [c for c in calls if c in macros]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [c for c in macros[name].calls if c in macros and c not in seen]
    return seen


def _sources(project: Path) -> Iterator[_Source]:
    """The project's files, then its vendored packages', in the folders dbt reads (the same
    :func:`project_paths` answer the model inventory uses)."""
    paths = project_paths(project)
    yield from _folder_sources(project, paths)
    for package in paths.packages():
        yield from _folder_sources(project, package)


def _folder_sources(project: Path, paths: ProjectPaths) -> Iterator[_Source]:
    kinds = [(paths.models, True), (paths.snapshots, True), (paths.macros, False)]
    for folders, is_model in kinds:
        for folder in folders:
            for path in paths.files((folder,), (".sql",)):
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                yield _Source(path.relative_to(project), strip_comments(text), is_model)


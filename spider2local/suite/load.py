"""Read a suite file (``tasks.toml``) into :mod:`.model`'s frozen data, and find the suite file.

Parsing is strict on purpose. A typo such as ``max_turn`` would otherwise silently fall back to a
default and change a benchmark's result, so every unknown key, wrong type or bad date is a
:class:`SuiteError` naming the file and the key (the CLI prints it as one line, exit code 2).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import stat
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from spider2local.exceptions import SuiteError
from spider2local.resources import resource_dir
from spider2local.safepath import NAME_FIX, name_problem
from spider2local.suite import options, tomlerror
from spider2local.suite.model import (
    BUILTIN_SUBSETS,
    COMMAND_APIS,
    SAMPLE,
    CommandAgentSpec,
    Confidence,
    DateMethod,
    RunDefaults,
    Suite,
    TaskSettings,
)


def bundled_suite_path() -> Path:
    """The embedded default suite: ``tasks.toml`` at the repo top (copied into the wheel). Its
    dataset is the bundled sample suite; it also carries what is known of the real tasks, so
    ``--dataset PATH`` alone is enough to run the real benchmark with the curated settings."""
    return resource_dir("tasks.toml")


SUITE_FILE = "tasks.toml"


def find_suite_file(cwd: Path | None = None) -> Path | None:
    """The nearest ``tasks.toml`` in ``cwd`` or one of its parents, as pytest, dbt and git
    search upward: run from ``models/`` of a project, the project's suite one level up is the
    one meant, and falling back to the bundled sample suite there spent money on the wrong
    suite. Anything of that name counts (a folder or a FIFO too: loading it then names it,
    where skipping it ran another suite in silence)."""
    start = (cwd or Path.cwd()).absolute()
    for folder in (start, *start.parents):
        candidate = folder / SUITE_FILE
        if os.path.lexists(candidate):
            return candidate
    return None


def default_suite_path(cwd: Path | None = None) -> Path:
    """The nearest ``tasks.toml`` (:func:`find_suite_file`), else the embedded default
    suite."""
    return find_suite_file(cwd) or bundled_suite_path()


MAX_SUITE_BYTES = 16 * 1024 * 1024
"""A suite file is a few kilobytes (68 tasks with dates and notes: about 20 KB); anything past
this is not one (``--suite /dev/zero`` read until memory ran out)."""


def _read_suite_bytes(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most :data:`MAX_SUITE_BYTES`.

    Opened non-blocking and checked with ``fstat`` on that same descriptor: ``open`` of a FIFO
    blocks until a writer comes (forever, for ``--suite`` given one), and a check by path
    before the open could be raced."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise SuiteError("is a folder, not a suite file", path=path,
                         fix="pass --suite with a tasks.toml file") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SuiteError("is a folder, not a suite file", path=path,
                             fix="pass --suite with a tasks.toml file")
        if not stat.S_ISREG(info.st_mode):
            raise SuiteError("is not a regular file (a FIFO, a device or a socket)", path=path,
                             fix="pass --suite with a tasks.toml file")
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_SUITE_BYTES + 1)
    if len(data) > MAX_SUITE_BYTES:
        raise SuiteError(f"is larger than {MAX_SUITE_BYTES // (1024 * 1024)} MiB: not a suite "
                         "file", path=path, fix="pass --suite with a tasks.toml file")
    return data


def load_suite(path: Path) -> Suite:
    """Read and validate a suite file; raise :class:`SuiteError` with a one-line message."""
    try:
        raw_bytes = _read_suite_bytes(path)
    except FileNotFoundError:
        raise SuiteError("suite file not found", path=path,
                         fix="pass --suite with an existing tasks.toml") from None
    except OSError as exc:
        raise SuiteError(f"cannot read suite file: {exc.strerror}", path=path) from None
    try:
        text = raw_bytes.decode("utf-8-sig")  # a byte-order mark is not a TOML error
    except UnicodeDecodeError as exc:
        raise SuiteError(f"not valid TOML: {exc}", path=path, fix=tomlerror.SYNTAX_FIX) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message, fix = tomlerror.describe(text, exc)
        raise SuiteError(message, path=path, fix=fix) from None
    return _parse(path, data, hashlib.sha256(raw_bytes).hexdigest())


def _parse(path: Path, data: dict[str, Any], digest: str) -> Suite:
    r = _Reader(path)
    r.keys(data, "", {"schema", "dataset", "run", "tasks", "subsets", "agents"})
    schema = r.get(data, "schema", int, 1)
    if schema != 1:
        raise r.error("schema", f"unsupported schema {schema}", "this spider2local reads schema 1")
    dataset_tbl = r.table(data, "dataset")
    r.keys(dataset_tbl, "dataset.", {"root"})
    root_value = r.get(dataset_tbl, "root", str, SAMPLE, key="dataset.root")
    dataset: str | Path = SAMPLE if root_value == SAMPLE else _resolve(path, root_value)
    defaults = _parse_defaults(r, r.table(data, "run"))
    tasks_tbl = r.table(data, "tasks")
    for tid in tasks_tbl:
        if (problem := name_problem(tid)) is not None:
            raise r.error(f"tasks.{tid}", f"task id {problem}", NAME_FIX)
    tasks = {tid: _parse_task(r, tid, r.table(tasks_tbl, tid, key=f"tasks.{tid}"))
             for tid in tasks_tbl}
    subsets = _parse_subsets(r, r.table(data, "subsets"))
    agents_tbl = r.table(data, "agents")
    agents = {name: _parse_agent(r, name, r.table(agents_tbl, name, key=f"agents.{name}"))
              for name in agents_tbl}
    return Suite(path.resolve(), dataset, defaults, tasks, subsets, digest, agents)


def _parse_defaults(r: _Reader, tbl: dict[str, Any]) -> RunDefaults:
    """``[run]``: the keys of the settings table (:mod:`.options`), each through its parser."""
    table = {s.name: s for s in options.suite_keys()}
    r.keys(tbl, "run.", set(table))
    return RunDefaults(**{name: r.parsed(table[name], tbl[name], f"run.{name}")
                          for name in tbl})


def _parse_task(r: _Reader, tid: str, tbl: dict[str, Any]) -> TaskSettings:
    k = f"tasks.{tid}."
    r.keys(tbl, k, {"date", "date_method", "date_evidence", "date_confidence", "exclude",
                    "note", "skills", "skip_skills", "solution", "timeout", "max_turns",
                    "thinking_budget"})
    method = r.choice(tbl, "date_method", DateMethod, k)
    solution = r.get(tbl, "solution", str, None, key=k + "solution")
    timeout = r.setting(tbl, "timeout", k)
    return TaskSettings(
        date=r.date(tbl, "date", k + "date"),
        date_method=method,
        date_evidence=r.get(tbl, "date_evidence", str, None, key=k + "date_evidence"),
        date_confidence=r.choice(tbl, "date_confidence", Confidence, k),
        exclude=r.get(tbl, "exclude", str, None, key=k + "exclude"),
        note=r.get(tbl, "note", str, None, key=k + "note"),
        skills=r.strings(r.get(tbl, "skills", list, [], key=k + "skills"), k + "skills"),
        skip_skills=r.strings(r.get(tbl, "skip_skills", list, [], key=k + "skip_skills"),
                              k + "skip_skills"),
        solution=_resolve(r.path, solution) if solution else None,
        timeout=float(timeout) if timeout is not None else None,
        max_turns=r.setting(tbl, "max_turns", k),
        thinking_budget=r.setting(tbl, "thinking_budget", k),
    )


USAGE_READERS = ("file", "claude-json", "mini-swe-agent")
"""How a command agent's usage is read (:mod:`spider2local.agents.usage`)."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _parse_agent(r: _Reader, name: str, tbl: dict[str, Any]) -> CommandAgentSpec:
    """``[agents.NAME]``: a command-line agent (see :class:`CommandAgentSpec`)."""
    k = f"agents.{name}."
    if name in options.BUILT_IN_AGENT_NAMES or not _ENV_NAME.fullmatch(name.replace("-", "_")):
        raise r.error(f"agents.{name}", "is a built-in agent's name or not a plain name",
                      "name it with letters, digits, '-' and '_', not "
                      + ", ".join(options.BUILT_IN_AGENT_NAMES))
    r.keys(tbl, k, {"command", "pass_env", "read_only", "usage", "apis"})
    command = r.get(tbl, "command", str, None, key=k + "command")
    if command is None or not command.strip():
        raise r.error(k + "command", "is missing or empty",
                      "give the shell command that runs the agent")
    pass_env = r.strings(r.get(tbl, "pass_env", list, [], key=k + "pass_env"), k + "pass_env")
    bad = [v for v in pass_env if not _ENV_NAME.fullmatch(v)]
    if bad:
        raise r.error(k + "pass_env", f"{bad[0]!r} is not a variable name",
                      "list environment variable names, e.g. [\"OPENAI_API_KEY\"]")
    read_only = r.strings(r.get(tbl, "read_only", list, [], key=k + "read_only"),
                          k + "read_only")
    usage = r.get(tbl, "usage", str, None, key=k + "usage")
    if usage is not None and usage not in USAGE_READERS:
        raise r.error(k + "usage", f"unknown usage reader {usage!r}",
                      "one of " + ", ".join(USAGE_READERS))
    apis = r.strings(r.get(tbl, "apis", list, [], key=k + "apis"), k + "apis")
    unknown = [a for a in apis if a not in COMMAND_APIS]
    if unknown:
        raise r.error(k + "apis", f"unknown API {unknown[0]!r}",
                      "list some of: " + ", ".join(COMMAND_APIS))
    return CommandAgentSpec(command=command, pass_env=pass_env,
                            read_only=tuple(_resolve(r.path, p) for p in read_only),
                            usage=usage, apis=tuple(dict.fromkeys(apis)))


def _parse_subsets(r: _Reader, tbl: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    subsets: dict[str, tuple[str, ...]] = {}
    for name, value in tbl.items():
        if name in BUILTIN_SUBSETS:
            raise r.error(f"subsets.{name}", "shadows a built-in subset",
                          f"built-in subsets are {', '.join(BUILTIN_SUBSETS)}; pick another name")
        if not isinstance(value, list):
            raise r.error(f"subsets.{name}", "must be a list of task ids", None)
        subsets[name] = r.strings(value, f"subsets.{name}")
    return subsets


def _resolve(suite_path: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else (suite_path.resolve().parent / p).resolve()


E = TypeVar("E", bound=StrEnum)


class _Reader:
    """Typed access to TOML tables that reports errors as ``file: key: problem (fix)``."""

    def __init__(self, path: Path):
        self.path = path

    def error(self, key: str, problem: str, fix: str | None) -> SuiteError:
        return SuiteError(f"{key}: {problem}", path=self.path, fix=fix)

    def keys(self, tbl: dict[str, Any], prefix: str, allowed: set[str]) -> None:
        for key in tbl:
            if key not in allowed:
                raise self.error(prefix + key, "unknown key",
                                 f"allowed here: {', '.join(sorted(allowed))}")

    def table(self, tbl: dict[str, Any], name: str, key: str | None = None) -> dict[str, Any]:
        value = tbl.get(name, {})
        if not isinstance(value, dict):
            raise self.error(key or name, f"must be a table, not {_tname(value)}",
                             f"write it as [{key or name}]")
        return value

    def get(self, tbl: dict[str, Any], name: str, typ: Any, default: Any,
            *, key: str | None = None) -> Any:
        if name not in tbl:
            return default
        value = tbl[name]
        types = typ if isinstance(typ, tuple) else (typ,)
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
            raise self.error(key or name, f"must be {want}, not {_tname(value)}", None)
        return value

    def parsed(self, setting: options.Setting, value: Any, key: str) -> Any:
        """``value`` through the setting's parser: the same rule, and the same phrase, as its
        command-line flag (``run.trials: must be positive, not 0``)."""
        try:
            return setting.parse(value, text=False)
        except ValueError as exc:
            raise self.error(key, str(exc), None) from None

    def setting(self, tbl: dict[str, Any], name: str, prefix: str) -> Any:
        """A task's own value of run setting ``name`` (``None`` when absent)."""
        if name not in tbl:
            return None
        return self.parsed(options.setting(name), tbl[name], prefix + name)

    def strings(self, values: list[Any], key: str) -> tuple[str, ...]:
        if not all(isinstance(v, str) for v in values):
            raise self.error(key, "must be a list of strings", None)
        return tuple(values)

    def choice(self, tbl: dict[str, Any], name: str, allowed: type[E],
               prefix: str) -> E | None:
        value = self.get(tbl, name, str, None, key=prefix + name)
        if value is None:
            return None
        words = [member.value for member in allowed]
        if value not in words:
            raise self.error(prefix + name, f"{value!r} is not one of {', '.join(words)}", None)
        return allowed(value)

    def date(self, tbl: dict[str, Any], name: str, key: str) -> dt.date | None:
        """A task's date, by the settings table's one rule for dates (:class:`options.Date`)."""
        value = tbl.get(name)
        if value is None:
            return None
        try:
            return options.Date()(value, text=False)
        except ValueError as exc:
            problem, _, fix = str(exc).partition(" (")
            raise self.error(key, problem, fix.rstrip(")") or "write it as YYYY-MM-DD") from None


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list",
               bool: "true or false", dict: "a table"}


def _tname(value: object) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)

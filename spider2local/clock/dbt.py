"""Run dbt as a child process and read what it did from ``target/run_results.json``.

dbt runs as a subprocess, never through ``dbtRunner``: the Python API keeps global adapter state
(two invocations cannot run at once in one process) and cannot be put under a fake clock.
Whether dbt is faked is decided by ``env``: pass ``Clock.agent_env(...)`` and "dbt" resolves to
the shim on that PATH (faked for every command but ``deps`` and ``--version``), or
``Clock.faked_env(...)`` to preload it directly. Every path dbt writes (target, logs) stays inside
the workspace, and dbt's partial-parse cache is only reused on the date it was made at.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.clock.faketime import RUNS_ENV, TELEMETRY_ENV, env_date, find_real_dbt
from spider2local.exceptions import ClockError, DbtError
from spider2local.proc.run import run_process
from spider2local.resources import faketime_dir

PARSE_CACHE = "partial_parse.msgpack"
"""dbt's partial-parse cache in the target folder (dbt-core's ``PARTIAL_PARSE_FILE_NAME``)."""
PARSE_DATE_STAMP = "spider2local-parse-date"
"""Beside the cache: the date (YYYY-MM-DD) the dbt processes that wrote it saw."""

ERROR_STATUSES = frozenset({"error", "fail", "runtime error"})
"""run_results statuses that mean a node did not do its job (``warn`` and ``skipped`` do not)."""


ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
"""A terminal escape sequence (CSI colours, OSC titles, two-byte escapes): dbt colours its
messages (``\x1b[31mERROR\x1b[0m``) even in its JSON log."""
_ERROR_HEADER = re.compile(r"^(?:[A-Z][A-Za-z]* )+Error(?: in .+)?$")
"""dbt's header line of an error, which names where but not what: ``Runtime Error in model
daily_revenue (models/daily_revenue.sql)``, ``Compilation Error``, ``Database Error in ...``."""
_ERROR_DETAIL = re.compile(r"^(?:[A-Z][A-Za-z]* )+Error: \S")
"""A line naming the actual error: DuckDB's ``Parser Error: syntax error at or near "by"``,
``Catalog Error: Table with name x does not exist!``, ``Binder Error: ...``."""
_PREAMBLE = frozenset({"Encountered an error:"})
"""Lines dbt puts before the header of a failure that stopped the whole invocation."""


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences."""
    return ANSI_ESCAPE.sub("", text)


def decisive_line(message: str) -> str:
    """The one line of a dbt error message that says what went wrong.

    dbt's messages span lines: a header naming where (``Runtime Error in model x (path)``),
    then the database's or Jinja's own message, then the SQL around it. The header alone says
    nothing a person can act on, so it is joined with the first line that names the actual
    error (DuckDB's ``X Error: ...``), or else with the line after it (a Compilation Error's
    detail): ``Runtime Error in model x (path): Parser Error: syntax error at or near "by"``.
    A message of one line comes back as it is (stripped of colours and blanks).
    """
    lines = [line.strip() for line in strip_ansi(message).splitlines()]
    lines = [line for line in lines if line and line not in _PREAMBLE]
    if not lines:
        return ""
    head, rest = lines[0], lines[1:]
    if not rest or not _ERROR_HEADER.match(head):
        return head
    detail = next((line for line in rest if _ERROR_DETAIL.match(line)), rest[0])
    return f"{head}: {detail}"


@dataclass(frozen=True)
class NodeResult:
    """One node of ``run_results.json``: a model, test, seed or snapshot."""

    unique_id: str
    name: str
    status: str
    message: str | None
    execution_time: float

    @property
    def failed(self) -> bool:
        return self.status in ERROR_STATUSES

    @property
    def error_line(self) -> str:
        """What went wrong with this node, in one line (:func:`decisive_line`)."""
        return decisive_line(self.message or "") or self.status


@dataclass(frozen=True)
class DbtResult:
    """How one dbt invocation ended. ``models`` is empty when dbt wrote no run_results."""

    args: tuple[str, ...]
    returncode: int
    models: tuple[NodeResult, ...]
    duration: float
    timed_out: bool
    stdout_tail: str
    stderr_tail: str
    run_results_path: Path | None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def errored(self) -> tuple[NodeResult, ...]:
        """Nodes that errored or failed (what the agent must fix)."""
        return tuple(m for m in self.models if m.failed)

    def status_of(self, name: str) -> str | None:
        """Status of the node called ``name`` (or with that unique_id), None if not run."""
        for model in self.models:
            if name in (model.name, model.unique_id):
                return model.status
        return None

    def error_messages(self) -> list[str]:
        """Messages of error-level JSON log lines in the stdout tail (compile errors included).

        A project that does not compile writes no node results: these lines are then the only
        explanation of the failure.
        """
        messages: list[str] = []
        for line in self.stdout_tail.splitlines():
            event = _json_line(line)
            info = event.get("info", {}) if event else {}
            if isinstance(info, dict) and info.get("level") == "error" and info.get("msg"):
                messages.append(str(info["msg"]))
        return messages


def _json_line(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def log_as_text(lines: Iterable[str]) -> Iterator[str]:
    """dbt's JSON-event log (``DBT_LOG_FORMAT=json``: one event a line) as the plain text log
    dbt writes without it: ``HH:MM:SS.ffffff [level] message`` per event, a message's further
    lines indented below it, a rule with the invocation's id where a new dbt invocation
    starts, and no terminal escapes (dbt colours its messages even in JSON). A line that is
    not a JSON event (a text-format log, a line cut short) is kept as it is, escapes removed.
    Each item yielded ends with a newline."""
    invocation = None
    for raw in lines:
        event = _json_line(raw.strip())
        info = event.get("info") if event else None
        if not isinstance(info, dict):
            text = strip_ansi(raw).rstrip("\r\n")
            if text:
                yield text + "\n"
            continue
        ts = str(info.get("ts") or "")
        clock = ts[11:26] if len(ts) >= 19 else ts
        if info.get("invocation_id") != invocation:
            invocation = info.get("invocation_id")
            yield f"{'=' * 30} {ts[:10]} {clock} | {invocation} {'=' * 30}\n"
        first, *rest = strip_ansi(str(info.get("msg") or "")).rstrip().splitlines() or [""]
        yield f"{clock} [{info.get('level') or '?'!s:<5}] {first}\n"
        for line in rest:
            yield f"    {line}\n"


def parse_run_results(path: Path) -> tuple[NodeResult, ...]:
    """Read a ``run_results.json``; raises :class:`DbtError` if it is not valid JSON."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DbtError(f"{path}: unreadable run_results.json ({exc})") from exc
    models = []
    for item in data.get("results", []):
        unique_id = str(item.get("unique_id", ""))
        models.append(NodeResult(
            unique_id=unique_id,
            name=unique_id.rsplit(".", 1)[-1],
            status=str(item.get("status", "")),
            message=item.get("message"),
            execution_time=float(item.get("execution_time") or 0.0),
        ))
    return tuple(models)


def resolve_dbt(dbt_executable: str, env: Mapping[str, str]) -> str:
    """Find ``dbt_executable`` on ``env``'s PATH (not ours): that is how the shim is picked up.

    A plain "dbt" missing from that PATH falls back to the dbt beside this interpreter (a venv
    used without activation has its dbt off PATH); the shim is never chosen by the fallback.
    """
    found = shutil.which(dbt_executable, path=env.get("PATH", os.defpath))
    if found is not None:
        return found
    if dbt_executable == "dbt":
        with contextlib.suppress(ClockError):
            return str(find_real_dbt(faketime_dir(), ""))
    raise DbtError(f"dbt executable {dbt_executable!r} not found on the given PATH")


def dbt_path_env(project_dir: Path, log_path: Path) -> dict[str, str]:
    """Variables that pin every dbt path into the workspace, whatever the subcommand.

    Environment variables rather than flags: every subcommand accepts them (``dbt deps`` has no
    ``--target-path``; ``dbt --version`` rejects most flags) and they override the project's
    own ``target-path``, so run_results.json is always where we read it.
    """
    return {
        "DBT_PROJECT_DIR": str(project_dir),
        "DBT_PROFILES_DIR": str(project_dir),
        "DBT_TARGET_PATH": str(project_dir / "target"),
        "DBT_LOG_PATH": str(log_path),
        "DBT_LOG_FORMAT": "json",
        **TELEMETRY_ENV,
    }


def forget_parse_cache_of_other_dates(target: Path, date: dt.date) -> None:
    """Delete dbt's partial-parse cache unless it was made on ``date``, then record ``date``.

    Partial parsing reuses what parse-time Jinja computed (a ``config(alias=...)`` reading
    ``modules.datetime``), and nothing dbt hashes to validate the cache (cli vars, profile and
    target names, connection keys, dbt_project.yml, env vars used there) changes with the clock,
    so dbt itself would reuse a cache made under another date. A cache without a stamp has an
    unknown date (a real-clock parse, or one shipped with the project): it goes too.
    """
    stamp = target / PARSE_DATE_STAMP
    try:
        recorded = stamp.read_text(encoding="utf-8").strip()
    except OSError:
        recorded = None
    if recorded != date.isoformat():
        (target / PARSE_CACHE).unlink(missing_ok=True)
        target.mkdir(parents=True, exist_ok=True)
        stamp.write_text(date.isoformat() + "\n", encoding="utf-8")


def _keep_logs(logs_dir: Path, subcommand: str, stdout: str, run_results: Path | None) -> None:
    """Store this invocation's console log (and run_results copy) under a fresh number."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    index = len(list(logs_dir.glob("dbt-*.jsonl"))) + 1
    stem = f"dbt-{index:03d}-{subcommand}"
    (logs_dir / f"{stem}.jsonl").write_text(stdout, encoding="utf-8")
    if run_results is not None:
        shutil.copyfile(run_results, logs_dir / f"{stem}.run_results.json")


def _date_seen(executable: str, env: Mapping[str, str]) -> dt.date:
    """The date the dbt started as ``executable`` with ``env`` lives in (for the parse cache):
    the shim's date when ``executable`` is the shim, else the preloaded clock, else today."""
    shim = faketime_dir() / "dbt"
    with contextlib.suppress(OSError):
        if Path(executable).samefile(shim):
            return env_date(env, through_shim=True) or dt.date.today()
    return env_date(env, through_shim=False) or dt.date.today()


def _prepare(project_dir: Path, logs_dir: Path | None) -> tuple[Path, Path, Path]:
    """Absolute project and log folders, and the run_results path with any stale copy removed."""
    project_dir = project_dir.resolve()
    log_path = logs_dir.resolve() if logs_dir is not None else project_dir / "logs"
    run_results = project_dir / "target" / "run_results.json"
    run_results.unlink(missing_ok=True)
    return project_dir, log_path, run_results


async def run_dbt(
    project_dir: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,  # noqa: ASYNC109 (same contract as run_process)
    logs_dir: Path | None = None,
    dbt_executable: str = "dbt",
) -> DbtResult:
    """Run ``dbt <args>`` in ``project_dir`` (cwd too: profiles use paths like ./x.duckdb).

    ``target/run_results.json`` is deleted first so a crash can never report the previous
    run's results. With ``logs_dir``, dbt's log file goes there and each invocation's console
    log and run_results are copied there; otherwise logs stay in ``project_dir/logs``.
    A timeout is a result (``timed_out=True``), not an exception; a missing dbt raises DbtError.
    """
    executable = resolve_dbt(dbt_executable, env)
    project_dir, log_path, run_results = _prepare(project_dir, logs_dir)
    forget_parse_cache_of_other_dates(run_results.parent, _date_seen(executable, env))
    command = [executable, *args]
    child_env = {**env, **dbt_path_env(project_dir, log_path)}
    if logs_dir is not None:  # kept here, numbered: the shim need not keep a second copy
        child_env.pop(RUNS_ENV, None)
    try:
        result = await run_process(command, cwd=project_dir, env=child_env, timeout=timeout)
    except OSError as exc:
        raise DbtError(f"cannot start {executable}: {exc}") from exc
    produced = run_results if run_results.is_file() else None
    if logs_dir is not None:
        subcommand = next((a for a in args if not a.startswith("-")), "dbt")
        _keep_logs(log_path, subcommand, result.stdout, produced)
    return DbtResult(
        args=tuple(args), returncode=result.returncode,
        models=parse_run_results(produced) if produced else (),
        duration=result.duration, timed_out=result.timed_out,
        stdout_tail=result.stdout, stderr_tail=result.stderr, run_results_path=produced,
    )

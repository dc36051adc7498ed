"""What the HTML report says about the run itself: versions, agent, limits, dataset, trials,
and each task's fake date with where it came from.

Only what the run recorded is shown: run.json's settings, versions, dataset and suite, and each
selected task's fake date (:class:`~spider2local.run.manifest.SelectedTask`). Where a date came
from (the task's own date in the suite file, or the suite's default: :meth:`Suite.run_date
<spider2local.suite.model.Suite.run_date>`) is not in run.json; it is read from the suite file
the run recorded, and only when that file still has the recorded hash and still gives the
recorded date. Otherwise the page says the source is not known rather than guess it.

A task that runs at the suite's default date (no date of its own, not marked
clock-independent) gets the warning ``run`` prints: if its SQL reads the clock, its graded
output may differ from gold, which was built on some other day.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.exceptions import UserError
from spider2local.run.folder import RunFolder
from spider2local.run.manifest import RunManifest
from spider2local.suite.load import load_suite
from spider2local.suite.model import DateMethod, DateSource, Suite

VERSIONS = ("spider2local", "python", "dbt-core", "dbt-duckdb", "duckdb", "pandas", "numpy",
            "claude-agent-sdk", "libfaketime")
"""The versions shown, in this order (run.json records them all)."""

Fact = tuple[str, str]


@dataclass(frozen=True)
class TaskDate:
    task_id: str
    date: str
    """The fake date the run recorded for the task (``""``: none recorded)."""
    source: str
    """Where it came from, for a person: ``its own date in tasks.toml (manual: ...)``."""
    default: bool = False
    """Whether the task ran at the suite's default date without being marked
    clock-independent: the date a warning is about."""


@dataclass(frozen=True)
class RunInfo:
    groups: tuple[tuple[str, tuple[Fact, ...]], ...] = ()
    """Titled groups of facts (``versions``, ``agent``, ``limits``, ``run``, ``dataset``)."""
    dates: tuple[TaskDate, ...] = ()
    warning: str | None = None
    """The default-date warning, or ``None`` when no task runs at the default date."""


def _text(value: Any, unit: str = "") -> str:
    if value is None or value == "" or value == [] or value == ():
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return f"{value}{unit}"


def _money(value: Any) -> str:
    return "-" if not isinstance(value, int | float) or isinstance(value, bool) \
        else f"${value:,.2f}"


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "-"


def _witness(record: Any) -> str:
    """One invocation's witness (run.json's session ``witness``) in a few words."""
    state = str(record.get("state") or "-")
    if state != "on":
        return f"{state} ({record.get('reason') or 'no reason recorded'})"
    watched, stray = record.get("watched") or [], record.get("unattributed") or []
    extra = f", {len(stray)} access(es) while no agent worked" if stray else ""
    return f"on ({len(watched)} file(s) watched{extra})"


def _groups(manifest: RunManifest, agent_command: str | None) -> tuple[
        tuple[str, tuple[Fact, ...]], ...]:
    setting = manifest.setting
    versions = tuple((name, manifest.versions.get(name) or "-") for name in VERSIONS
                     if name in manifest.versions)
    agent: list[Fact] = [("agent", _text(manifest.agent)), ("model", _text(manifest.model))]
    command = agent_command or setting("agent_command")
    if command:
        agent.append(("command", str(command)))
    agent += [(f"option {k}", v) for k, v in sorted(manifest.agent_options.items())]
    mode = manifest.isolation_mode
    reason = manifest.isolation.reason if manifest.isolation is not None else None
    agent.append(("isolation", mode + (f" ({reason})" if reason else "")))
    witnessed = [s.witness for s in manifest.sessions if s.witness is not None]
    if witnessed:  # --isolation none: each invocation's unsealed witness, on or off and why
        agent.append(("unsealed witness", "; ".join(_witness(w) for w in witnessed)))
    agent += [("skills", _text(setting("skills"))), ("prompts", _short(manifest.prompts_sha256)),
              ("skills files", _short(manifest.skills_sha256))]
    limits: tuple[Fact, ...] = (
        ("timeout per task", _text(setting("timeout"), " s")),
        ("stage timeout", _text(setting("stage_timeout"), " s")),
        ("max turns", _text(setting("max_turns"))),
        ("budget per task", _money(setting("max_budget_usd"))),
        ("budget of the run", _money(setting("max_cost_usd"))),
        ("verify rounds", _text(setting("verify_rounds"))),
        ("thinking budget", _text(setting("thinking_budget"), " tokens")),
        ("retries", _text(setting("retries"))))
    sessions = manifest.sessions
    first = sessions[0].argv if sessions else None
    run: list[Fact] = [
        ("run id", manifest.run_id or "-"), ("trials per task", str(manifest.trials)),
        ("jobs", _text(setting("jobs"))), ("started", _text(manifest.started_at)),
        ("finished", _text(manifest.finished_at) if not manifest.was_interrupted
         else "interrupted"),
        ("invocations", f"{len(sessions)}" + (" (resumed)" if len(sessions) > 1 else "")),
        ("spent", _money(manifest.spent_usd))]
    if first is not None:
        run.append(("command line", "spider2local " + " ".join(first)))
    if manifest.not_run_for_budget:
        run.append(("not run for the budget", str(manifest.not_run_for_budget)))
    selection = manifest.selection.options() if manifest.selection is not None else {}
    dataset: list[Fact] = [
        ("dataset", _text(manifest.dataset)),
        ("dataset files", _short(manifest.dataset_sha256)),
        ("suite", _text(manifest.suite_path)), ("suite file", _short(manifest.suite_sha256)),
        ("tasks selected", str(len(manifest.tasks)))]
    dataset += [(f"selected by {k}", _text(v)) for k, v in selection.items()
                if v not in (None, [], "")]
    if manifest.merged_at:
        dataset.append(("merged", f"{manifest.merged_at} from {len(manifest.merged_from)} runs"))
    return (("versions", versions), ("agent", tuple(agent)), ("limits", limits),
            ("run", tuple(run)), ("dataset", tuple(dataset)))


def _suite(manifest: RunManifest) -> tuple[Suite | None, str]:
    """The suite file the run recorded when it is still the same file, and else why not."""
    if not manifest.suite_path:
        return None, "run.json names no suite file"
    try:
        suite = load_suite(Path(manifest.suite_path))
    except (UserError, OSError, ValueError):
        return None, f"its suite file {manifest.suite_path} cannot be read now"
    if manifest.suite_sha256 and suite.sha256 != manifest.suite_sha256:
        return None, f"its suite file {manifest.suite_path} changed since the run"
    return suite, ""


def _dates(manifest: RunManifest) -> tuple[tuple[TaskDate, ...], str | None]:
    suite, why_not = _suite(manifest)
    dates = []
    for task in manifest.tasks:
        if not task.fake_date:
            dates.append(TaskDate(task.id, "", "not recorded"))
            continue
        if suite is None:
            dates.append(TaskDate(task.id, task.fake_date, f"source not known: {why_not}"))
            continue
        date, source = suite.run_date(task.id)
        settings = suite.settings(task.id)
        name = Path(str(suite.path)).name
        if date.isoformat() != task.fake_date:
            dates.append(TaskDate(task.id, task.fake_date, f"source not known: {name} now "
                                                           f"gives {date}"))
        elif source is DateSource.TASK:
            how = str(settings.date_method or "set")
            if settings.date_evidence:
                how += f": {settings.date_evidence}"
            dates.append(TaskDate(task.id, task.fake_date, f"its own date in {name} ({how})"))
        elif settings.date_method is DateMethod.CLOCK_INDEPENDENT:
            dates.append(TaskDate(task.id, task.fake_date,
                                  f"the suite default ([run] date in {name}); the task is "
                                  "marked clock-independent"))
        else:
            dates.append(TaskDate(task.id, task.fake_date,
                                  f"the suite default ([run] date in {name}): no date of its "
                                  "own", default=True))
    undated = [d.task_id for d in dates if d.default]
    warning = None
    if undated:
        shown = ", ".join(undated[:12]) + (f" (+{len(undated) - 12} more)"
                                           if len(undated) > 12 else "")
        warning = (f"{len(undated)} task(s) ran at the suite's default date, with no date of "
                   f"their own: {shown}. A task whose SQL reads the clock may be graded on "
                   "another day than its gold was built; record their dates with "
                   "`spider2local derive-dates` (or set [tasks.<id>] date by hand).")
    return tuple(dates), warning


def load_run_info(folder: RunFolder, agent_command: str | None = None) -> RunInfo:
    """What the run recorded about itself (see the module docstring); empty for a folder
    without run.json, never an exception for one whose suite file is gone or changed."""
    try:
        manifest = folder.read_manifest()
    except UserError:
        return RunInfo()
    if manifest is None:
        return RunInfo()
    dates, warning = _dates(manifest)
    return RunInfo(_groups(manifest, agent_command), dates, warning)

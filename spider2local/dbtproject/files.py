"""Check the YAML files dbt reads before it runs anything: dbt_project.yml, profiles.yml and
packages.yml (or dependencies.yml).

dbt refuses to start when any of them is missing or malformed, so a task whose files are broken
cannot run, however good the agent is. The loader must say so up front, naming the file, instead
of listing the task as runnable and letting every run fail the same way. Each check returns a
problem phrase (or nothing); none of them raises.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

PACKAGE_FILES = ("packages.yml", "dependencies.yml")
PACKAGE_KEYS = ("package", "git", "local", "tarball", "private")
"""The keys dbt accepts to name a package source; an entry with none of them is malformed."""


def load_yaml(path: Path) -> tuple[Any, str | None]:
    """The parsed file, or the reason it cannot be parsed (one line, with the YAML position)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except OSError as exc:
        return None, exc.strerror or "unreadable"
    try:
        return yaml.safe_load(text), None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return None, f"{where}{problem}"


def project_config(project: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The project's dbt_project.yml as a mapping, or the problem that makes it unusable."""
    path = project / "dbt_project.yml"
    if not path.is_file():
        return None, "dbt_project.yml missing"
    data, error = load_yaml(path)
    if error is None and not isinstance(data, dict):
        error = "not a mapping"
    return (None, f"dbt_project.yml unparsable ({error})") if error else (data, None)


PROFILE_FIX = "use a path relative to the project, such as ./<name>.duckdb"


def profile_target(project: Path, cfg: dict[str, Any]) -> tuple[Path | None, str | None]:
    """The DuckDB file the project's profile writes to, as a path inside the project, or the
    problem when profiles.yml names none or names one outside the project; ``(None, None)``
    when the project has no profiles.yml at all (then only a lone ``*.duckdb`` can stand in for
    it). The same (value, problem) shape as :func:`project_config`.

    profiles.yml is untrusted input: an absolute path (or ``~``, or ``../``) pointing at the
    dataset's own start database once let dbt in the workspace write into the dataset. A path
    leaving the project, in any duckdb output or ``attach`` of the profile, refuses the task;
    one that names a file inside the project in such a way is rewritten to the workspace copy
    by :func:`confine_profile`. Relative paths are relative to the project, where dbt runs."""
    path = project / "profiles.yml"
    if not path.is_file():
        return None, None
    profiles, error = load_yaml(path)
    if error is not None or not isinstance(profiles, dict):
        return None, f"profiles.yml unparsable ({error or 'not a mapping'})"
    name = cfg.get("profile")
    if not isinstance(name, str) or not name:
        return None, "dbt_project.yml names no profile"
    for value in _duckdb_paths(profiles.get(name)):
        if _templated(value):
            return None, (f"profiles.yml path {value!r} is made by Jinja, which dbt renders "
                          f"to a path no check here can see ({PROFILE_FIX})")
        if _inside(project, project, value) is None:
            return None, f"profiles.yml path {value!r} is outside the project ({PROFILE_FIX})"
    db = _output_path(profiles.get(name))
    if db is None:
        return None, f"profiles.yml has no duckdb path for profile {name}"
    return _inside(project, project, db), None


def confine_profile(copy: Path, original: Path) -> bool:
    """Rewrite the duckdb paths of ``copy``'s profiles.yml that name files of ``original`` (the
    dataset's project) absolutely, through ``~`` or through ``..``, to the same file relative
    to the copy, so dbt in the copy writes the copy. Returns whether the file changed.

    The loader has refused every project whose profile leads outside it
    (:func:`profile_target`); a path that still does raises :class:`ValueError`."""
    path = copy / "profiles.yml"
    if not path.is_file():
        return False
    profiles, error = load_yaml(path)
    if error is not None or not isinstance(profiles, dict):
        return False
    changed = False
    for holder in _path_holders(profiles):
        value = holder["path"]
        if _templated(value):
            raise ValueError(f"{path}: path {value!r} is made by Jinja")
        if Path(value).parts[:1] == (".",) or not _rewritten(value):
            continue
        inside = _inside(original, original, value)
        if inside is None:
            raise ValueError(f"{path}: path {value!r} leads outside the project")
        holder["path"] = "./" + inside.relative_to(original).as_posix()
        changed = True
    if changed:
        path.write_text(yaml.safe_dump(profiles, sort_keys=False), encoding="utf-8")
    return changed


def _templated(value: str) -> bool:
    """Whether dbt would render ``value`` as Jinja (``{{ env_var('X', '/abs/gold') }}``): what
    it names is known only to dbt, so it can be neither checked nor rewritten."""
    return "{{" in value or "{%" in value or "{#" in value


def _rewritten(value: str) -> bool:
    """Whether a duckdb path must be rewritten to stay in a copy of the project."""
    written = Path(value)
    return written.is_absolute() or value.startswith("~") or ".." in written.parts


def _inside(project: Path, base: Path, value: str | Path) -> Path | None:
    """``project / rel`` for the file ``value`` names (relative to ``base``, ``~`` expanded,
    symlinks followed) when it is inside ``project``; ``None`` when it leads outside."""
    try:
        real = (base / Path(value).expanduser()).resolve()
        return project / real.relative_to(project.resolve())
    except (ValueError, OSError, RuntimeError):
        return None


def _path_holders(profiles: dict[str, Any]) -> list[dict[str, Any]]:
    """Every duckdb output (and ``attach`` entry) of every profile that has a string path."""
    holders = []
    for profile in profiles.values():
        outputs = profile.get("outputs") if isinstance(profile, dict) else None
        for output in outputs.values() if isinstance(outputs, dict) else ():
            if not isinstance(output, dict) or output.get("type", "duckdb") != "duckdb":
                continue
            attach = output.get("attach")
            entries = [output, *(attach if isinstance(attach, list) else ())]
            holders += [e for e in entries if isinstance(e, dict) and _local(e.get("path"))]
    return holders


def _duckdb_paths(profile: Any) -> list[str]:
    return [h["path"] for h in _path_holders({"p": profile})]


def _local(value: Any) -> bool:
    """A string path of a local file (not ``:memory:``, not a MotherDuck or URL target)."""
    return isinstance(value, str) and bool(value) and value != ":memory:" and ":" not in value[:8]


def _output_path(profile: Any) -> Path | None:
    """The ``path`` of the profile's target output (else its first), if it is a duckdb one."""
    if not isinstance(profile, dict) or not isinstance(profile.get("outputs"), dict):
        return None
    outputs = profile["outputs"]
    output = outputs.get(profile.get("target")) or next(iter(outputs.values()), None)
    if not isinstance(output, dict) or output.get("type", "duckdb") != "duckdb":
        return None
    db = output.get("path")
    return Path(db) if isinstance(db, str) and db else None


def profile_db_path(project: Path) -> Path | None:
    """The DuckDB file named by the project's profile, if its files name one."""
    cfg, _ = project_config(project)
    return profile_target(project, cfg)[0] if cfg is not None else None


def package_file_problems(project: Path) -> list[str]:
    """One phrase per malformed packages.yml / dependencies.yml: dbt would refuse to start, yet
    the package check would skip what it cannot read and call the task runnable."""
    problems = []
    for name in PACKAGE_FILES:
        path = project / name
        if path.is_file():
            reason = _package_file_reason(path)
            if reason is not None:
                problems.append(f"{name} malformed ({reason})")
    return problems


def _package_file_reason(path: Path) -> str | None:
    data, error = load_yaml(path)
    if error is not None:
        return error
    if data is None:
        return None  # an empty file declares nothing
    if not isinstance(data, dict):
        return f"the top level must be a mapping, not {_kind(data)}"
    entries = data.get("packages")
    if entries is None:
        return None
    if not isinstance(entries, list):
        return f"packages must be a list, not {_kind(entries)}"
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not any(k in entry for k in PACKAGE_KEYS):
            return f"package entry {number} names no {', '.join(PACKAGE_KEYS)}"
    return None


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "a number",
            float: "a number", bool: "true/false"}.get(type(value), type(value).__name__)

"""Read a dbt project's declarations offline: its profile's DuckDB path and its packages.

``dbt deps`` needs the network, so spider2local never runs it; instead it checks that every
package listed in ``packages.yml`` (or ``dependencies.yml``) is already vendored in
``dbt_packages/``, which is what ``dbt run`` itself demands before it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True)
class PackageRequirement:
    """One entry of packages.yml, reduced to what identifies it offline."""

    source: str
    """``hub``, ``git`` or ``local``."""
    spec: str
    """What the file says: ``dbt-labs/dbt_utils``, a git URL or a local path."""
    name: str
    """The dbt project name we expect in dbt_packages (``dbt_utils``)."""
    version: str | None = None


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; ``None`` when it is absent or unparsable (callers report problems)."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def profile_db_path(project: Path) -> Path | None:
    """The DuckDB file named by the project's profile (target output ``path``), if readable."""
    project_cfg = read_yaml(project / "dbt_project.yml")
    profiles = read_yaml(project / "profiles.yml")
    if not isinstance(project_cfg, dict) or not isinstance(profiles, dict):
        return None
    profile = profiles.get(str(project_cfg.get("profile")))
    if not isinstance(profile, dict) or not isinstance(profile.get("outputs"), dict):
        return None
    outputs = profile["outputs"]
    output = outputs.get(profile.get("target")) or next(iter(outputs.values()), None)
    if not isinstance(output, dict) or not isinstance(output.get("path"), str):
        return None
    path = Path(output["path"])
    return path if path.is_absolute() else project / path


def requirements(project: Path) -> list[PackageRequirement]:
    """Every package the project declares, from packages.yml and dependencies.yml."""
    reqs: list[PackageRequirement] = []
    for name in ("packages.yml", "dependencies.yml"):
        data = read_yaml(project / name)
        entries = data.get("packages") if isinstance(data, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            req = _requirement(entry)
            if req is not None:
                reqs.append(req)
    return reqs


def _requirement(entry: Any) -> PackageRequirement | None:
    if not isinstance(entry, dict):
        return None
    version = entry.get("version", entry.get("revision"))
    version_text = None if version is None else str(version)
    if isinstance(entry.get("package"), str):
        spec = entry["package"]
        return PackageRequirement("hub", spec, _normalise(spec.rsplit("/", 1)[-1]), version_text)
    if isinstance(entry.get("git"), str):
        spec = entry["git"]
        repo = spec.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        return PackageRequirement("git", spec, _normalise(repo), version_text)
    if isinstance(entry.get("local"), str):
        spec = entry["local"]
        return PackageRequirement("local", spec, _normalise(Path(spec).name), None)
    return None


def installed(project: Path) -> dict[str, Path]:
    """Vendored packages: project name (and folder name) -> folder in dbt_packages."""
    found: dict[str, Path] = {}
    root = project / "dbt_packages"
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        cfg = read_yaml(folder / "dbt_project.yml")
        if not isinstance(cfg, dict):
            continue  # an empty or broken folder does not count as installed
        found[_normalise(folder.name)] = folder
        if isinstance(cfg.get("name"), str):
            found[_normalise(cfg["name"])] = folder
    return found


def missing_packages(project: Path) -> list[str]:
    """One problem phrase per declared package that is not usable offline."""
    have = installed(project)
    problems = []
    for req in requirements(project):
        if req.source == "local":
            if not (project / req.spec / "dbt_project.yml").is_file():
                problems.append(f"local package {req.spec} missing")
        elif req.name not in have:
            problems.append(f"package {req.spec} not in dbt_packages (dbt deps needs the network)")
    return problems


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")

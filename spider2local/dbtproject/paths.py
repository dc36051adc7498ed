"""Where a dbt project keeps its files: the one reading of ``dbt_project.yml``'s folder settings.

The model inventory, the clock-read scan and the package check all need the same answers
(which folders hold models, macros, snapshots and seeds; where the vendored packages are). When
each read them on its own they drifted: one forgot the pre-1.0 ``source-paths`` and scanned a
``models/`` folder that did not exist, others hard-coded ``dbt_packages``, so a project would be
called clock-independent, or its packages missing, for want of reading one setting. Everything
that asks where a project's files are asks :func:`project_paths`.

The rules are dbt's own (``dbt/config/project.py``): a ``model-paths`` key wins when present,
else the pre-1.0 ``source-paths``, else ``models``; likewise ``seed-paths`` / ``data-paths`` /
``seeds``; ``packages-install-path`` defaults to ``dbt_packages``. A setting of the wrong type
counts as absent; an empty list means no such folder, as in dbt. ``dbt_project.yml`` is
untrusted input, so a folder that leaves the project (``../x``, an absolute path, a symlink out)
is refused and named in ``problems`` (the default stands in when nothing else is left): no scan
reads, and no package supply writes, outside the project.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spider2local.dbtproject.files import project_config

PACKAGES_DEFAULT = "dbt_packages"
BUILD_DIRS = frozenset({"target", "logs", ".git"})
"""What dbt writes (``target-path``, ``log-path``) or git keeps, never sources, also when a
model folder is the project root."""


@dataclass(frozen=True)
class ProjectPaths:
    """The folders of one dbt project (or of one vendored package, which is a project too)."""

    root: Path
    config_problem: str | None
    """Why dbt_project.yml is unusable (missing, unparsable, not a mapping); None when it is
    fine. The folders are dbt's defaults then."""
    name: str | None
    """The project's ``name``, when it declares one."""
    models: tuple[Path, ...]
    macros: tuple[Path, ...]
    snapshots: tuple[Path, ...]
    seeds: tuple[Path, ...]
    packages_dir: Path
    """Where ``dbt deps`` installs packages and ``dbt run`` looks for them."""
    problems: tuple[str, ...] = ()
    docs: tuple[Path, ...] = ()
    """Where dbt looks for doc blocks (``.md`` files): ``docs-paths``, else every resource
    folder (models, seeds, tests, analyses, macros, snapshots), as dbt does."""
    """Settings refused because they leave the project (the default was used instead)."""

    @property
    def package_name(self) -> str:
        """The name other projects call it by: its declared name, else its folder's."""
        return self.name or self.root.name

    def packages(self) -> tuple[ProjectPaths, ...]:
        """The vendored packages, by folder name, as dbt loads them: every folder of
        :attr:`packages_dir` not starting with ``__``. A folder without a usable dbt_project.yml
        is left out: dbt refuses to start with it, so none of its files can matter, and an empty
        folder is not an installed package."""
        if not self.packages_dir.is_dir():
            return ()
        found = (project_paths(folder) for folder in sorted(self.packages_dir.iterdir())
                 if folder.is_dir() and not folder.name.startswith("__"))
        return tuple(p for p in found if p.config_problem is None)

    def files(self, folders: tuple[Path, ...], suffixes: tuple[str, ...]) -> Iterator[Path]:
        """The files with ``suffixes`` under ``folders``, sorted: the one walk of a project's
        files for every scan, the files dbt itself parses. Never inside :attr:`packages_dir`
        (a ``model-paths: ["."]`` would otherwise make the vendored packages the project's
        own; they are projects of their own, see :meth:`packages`), nor in build output
        (:data:`BUILD_DIRS`); a sub-folder called ``docs`` or ``tests`` holds models like any
        other, as ``dbt ls`` shows."""
        for folder in folders:
            if not folder.is_dir():
                continue
            for path in sorted(folder.rglob("*")):
                if (path.suffix in suffixes and path.is_file()
                        and not path.is_relative_to(self.packages_dir)
                        and not set(path.relative_to(folder).parts[:-1]) & BUILD_DIRS):
                    yield path


def project_paths(root: Path) -> ProjectPaths:
    """Read ``root/dbt_project.yml`` once and answer where the project's files are."""
    cfg, problem = project_config(root)
    settings: dict[str, Any] = cfg if cfg is not None else {}
    problems: list[str] = []

    def folders(keys: tuple[str, ...], default: str) -> tuple[Path, ...]:
        key = next((k for k in keys if k in settings), keys[0])
        value = settings.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return (root / default,)
        inside = tuple(p for v in value if (p := _confined(root, key, v, problems)))
        return inside if inside or not value else (root / default,)

    models = folders(("model-paths", "source-paths"), "models")
    macros = folders(("macro-paths",), "macros")
    snapshots = folders(("snapshot-paths",), "snapshots")
    seeds = folders(("seed-paths", "data-paths"), "seeds")
    install = settings.get("packages-install-path")
    packages_dir = (_confined(root, "packages-install-path", install, problems)
                    if isinstance(install, str) else None)
    tests = folders(("test-paths",), "tests")
    analyses = folders(("analysis-paths",), "analyses")
    docs = folders(("docs-paths",), "models") if "docs-paths" in settings \
        else tuple(dict.fromkeys((*models, *seeds, *tests, *analyses, *macros, *snapshots)))
    name = settings.get("name")
    return ProjectPaths(
        root=root, config_problem=problem, name=name if isinstance(name, str) and name else None,
        models=models, macros=macros, snapshots=snapshots, seeds=seeds,
        packages_dir=packages_dir or root / PACKAGES_DEFAULT, problems=tuple(problems),
        docs=docs,
    )


def _confined(root: Path, key: str, value: str, problems: list[str]) -> Path | None:
    """``root / value`` when it stays inside ``root`` (symlinks followed); else None, said.

    A plain relative value is kept as written, so reported paths read as the project names
    them; one with ``..`` or an absolute one is rewritten under ``root``, so callers can always
    take the result relative to ``root``."""
    try:
        inside = (root / value).resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):  # outside, unreadable, or a symlink loop
        problems.append(f"dbt_project.yml {key} {value!r} leaves the project (ignored)")
        return None
    written = Path(value)
    return root / (inside if written.is_absolute() or ".." in written.parts else written)

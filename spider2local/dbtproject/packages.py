"""Read a dbt project's package declarations offline and supply missing packages from siblings.

``dbt deps`` needs the network, so spider2local never runs it; instead it checks that every
package listed in ``packages.yml`` (or ``dependencies.yml``) is already vendored in the
project's package folder (``packages-install-path``, by default ``dbt_packages/``), which is what
``dbt run`` itself demands before it starts.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from spider2local.core import upstream
from spider2local.dbtproject.files import PACKAGE_FILES, load_yaml
from spider2local.dbtproject.paths import ProjectPaths, project_paths

SUPPLIED_MARKER = ".spider2local-supplied"
"""File written into a package folder that setup copied from a sibling task (names the source)."""


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
    constraints: tuple[str, ...] = ()
    """Hub version constraints as written (``("1.0.0",)``, ``(">=0.11.0", "<0.14.0")``)."""


def requirements(project: Path) -> list[PackageRequirement]:
    """Every package the project declares, from packages.yml and dependencies.yml."""
    reqs: list[PackageRequirement] = []
    for name in PACKAGE_FILES:
        data, _ = load_yaml(project / name)  # a broken file is reported by files.py
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
        raw = version if isinstance(version, list) else [] if version is None else [version]
        return PackageRequirement("hub", spec, _normalise(spec.rsplit("/", 1)[-1]), version_text,
                                  tuple(str(v).strip() for v in raw))
    if isinstance(entry.get("git"), str):
        spec = entry["git"]
        repo = spec.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        return PackageRequirement("git", spec, _normalise(repo), version_text)
    if isinstance(entry.get("local"), str):
        spec = entry["local"]
        return PackageRequirement("local", spec, _normalise(Path(spec).name), None)
    return None


def installed(project: Path) -> dict[str, Path]:
    """Vendored packages: project name (and folder name) -> folder in the package folder.

    An empty or broken folder does not count as installed (see :meth:`ProjectPaths.packages`).
    """
    return _installed(project_paths(project))


def _installed(paths: ProjectPaths) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in paths.packages():
        found[_normalise(package.root.name)] = package.root
        if package.name is not None:
            found[_normalise(package.name)] = package.root
    return found


def missing_packages(project: Path) -> list[str]:
    """One problem phrase per declared package that is not usable offline.

    Inside a dataset (the project sits in ``examples/``) the phrase also says when a sibling
    task vendors a compatible copy that ``spider2local setup`` can supply; without that hint the
    package is simply missing and the task cannot run offline.
    """
    paths = project_paths(project)
    have = _installed(paths)
    folder = paths.packages_dir.relative_to(paths.root).as_posix()
    problems = []
    for req in requirements(project):
        if req.source == "local":
            if not (project / req.spec / "dbt_project.yml").is_file():
                problems.append(f"local package {req.spec} missing")
        elif req.name not in have:
            problems.append(f"package {req.spec} not in {folder} "
                            f"(dbt deps needs the network){_sibling_hint(project, req)}")
    return problems


def _sibling_hint(project: Path, req: PackageRequirement) -> str:
    if project.parent.name != upstream.EXAMPLES:
        return ""
    supply = find_supply(project, req)
    if supply.sibling is None:
        return ""  # the plain phrase: missing, and nothing offline can supply it
    return f"; `spider2local setup` can supply it from sibling {supply.sibling} ({supply.note})"


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")


@dataclass(frozen=True)
class Supply:
    """Where a missing package can come from offline: a sibling task's vendored copy, or nowhere."""

    requirement: PackageRequirement
    sibling: str | None
    source: Path | None
    """The sibling's vendored ``<package folder>/<name>``."""
    version: str | None
    note: str
    """Why this copy fits (``exact 1.0.0``, ``1.1.1 within >=1.0.0,<2.0.0``) or why none does."""


def find_supply(project: Path, req: PackageRequirement) -> Supply:
    """The best sibling copy of ``req`` among the other projects next to ``project``.

    An exact version beats one that merely satisfies the constraints; ties go to the first
    sibling by name, so the choice is reproducible. The network is never used.
    """
    best: tuple[int, Supply] | None = None
    for sibling in sorted(project.parent.iterdir()):
        if sibling == project or not sibling.is_dir():
            continue
        folder = installed(sibling).get(req.name)
        if folder is None:
            continue
        rank, supply = _judge(req, sibling, folder)
        if rank > 0 and (best is None or rank > best[0]):
            best = (rank, supply)
    if best is None:
        return Supply(req, None, None, None,
                      f"no sibling task vendors a version matching {_wanted(req)}")
    return best[1]


def _judge(req: PackageRequirement, sibling: Path, folder: Path) -> tuple[int, Supply]:
    """Rank 2 = exact, 1 = compatible, 0 = unusable."""
    theirs = next((r for r in requirements(sibling) if r.name == req.name), None)
    if req.source == "git":
        same = (theirs is not None and theirs.source == "git"
                and _git_key(theirs.spec) == _git_key(req.spec) and theirs.version == req.version)
        note = f"same git revision {req.version}" if same else "different git source"
        return (2 if same else 0), Supply(req, sibling.name, folder, req.version, note)
    version = vendored_version(folder, theirs)
    if version is None:
        return 0, Supply(req, sibling.name, folder, None, "version unknown")
    pin, have = _pin(req.constraints), _version(version)
    if pin is not None and pin == have:
        return 2, Supply(req, sibling.name, folder, version, f"exact {version}")
    ok = satisfies(version, req.constraints)
    note = f"{version} within {_wanted(req)}"
    return (1 if ok else 0), Supply(req, sibling.name, folder, version, note)


def vendored_version(folder: Path, declared: PackageRequirement | None) -> str | None:
    """The version of a vendored package, from the best evidence available.

    Evidence in order: the exact pin its project declared (what ``dbt deps`` installed), the
    first released version heading of its CHANGELOG, the ``version`` of its dbt_project.yml
    (dbt_utils always says 0.1.0 there, hence last).
    """
    if declared is not None and _pin(declared.constraints) is not None:
        return declared.constraints[0]
    try:
        changelog = (folder / "CHANGELOG.md").read_text(encoding="utf-8", errors="replace")
    except OSError:
        changelog = ""
    heading = re.search(r"^#+ .*?v?(\d+\.\d+\.\d+)\b", changelog, re.MULTILINE)
    if heading:
        return heading.group(1)
    cfg, _ = load_yaml(folder / "dbt_project.yml")
    version = cfg.get("version") if isinstance(cfg, dict) else None
    return str(version) if version is not None else None


def satisfies(version: str, constraints: tuple[str, ...]) -> bool:
    """Whether a vendored ``version`` can stand in for a declaration with ``constraints``
    (the hub's ``version:``, one string or a list): the one rule setup uses.

    dbt's spellings are accepted: ``=`` is ``==``, a ``v`` prefix is allowed; a lone bare pin
    ``X.Y.Z`` also accepts semver-compatible releases (see :func:`_allowed`); no constraint
    accepts any version. Anything unparsable is unsatisfied, never an exception: a guess could
    supply a package whose macros the project does not expect.
    """
    have = _version(version)
    if have is None:
        return False
    if not constraints:
        return True
    allowed = _allowed(constraints)
    return allowed is not None and _contains(allowed, have)


def _allowed(constraints: tuple[str, ...]) -> SpecifierSet | None:
    """All ``constraints`` at once (None when one is nonsense). A lone bare pin ``X.Y.Z`` also
    accepts semver-compatible releases (same major, or same minor below 1.0): the macros a
    project calls do not change within such a range."""
    pin = _pin(constraints)
    if pin is not None:
        upper = f"{pin.major + 1}.0.0" if pin.major > 0 else f"0.{pin.minor + 1}.0"
        return SpecifierSet(f">={pin},<{upper}")
    allowed = SpecifierSet()
    for constraint in constraints:
        spec = _specifier(constraint)
        if spec is None:
            return None
        allowed &= spec
    return allowed


def _specifier(constraint: str) -> SpecifierSet | None:
    """PEP 440 spelling of a dbt hub constraint; None for nonsense (an empty one included, which
    packaging would read as "anything")."""
    text = constraint.strip()
    if _version(text) is not None:
        text = f"=={text}"
    elif text.startswith("=") and not text.startswith("=="):
        text = f"={text}"
    try:
        return SpecifierSet(text) if text else None
    except InvalidSpecifier:
        return None


def _contains(spec: SpecifierSet, version: Version | None) -> bool:
    """Pre-releases count only when a constraint names one (PEP 440's rule; packaging >= 25
    would otherwise let ``1.1.0rc1`` satisfy ``>=1.0.0``)."""
    return version is not None and spec.contains(version, prereleases=bool(spec.prereleases))


def _pin(constraints: tuple[str, ...]) -> Version | None:
    """The version when ``constraints`` is a single bare pin (``1.0.0``, ``v1.0.0``)."""
    return _version(constraints[0]) if len(constraints) == 1 else None


def _version(text: str | None) -> Version | None:
    try:
        return Version(text) if text is not None else None
    except InvalidVersion:
        return None


def _wanted(req: PackageRequirement) -> str:
    return ",".join(req.constraints) or req.version or "any version"


def _git_key(url: str) -> str:
    return url.strip().lower().rstrip("/").removesuffix(".git")


def supply_packages(project: Path) -> list[Supply]:
    """Copy every missing hub/git package from the best sibling into the project's package
    folder (where :func:`installed` and dbt look for it).

    An existing folder without a dbt_project.yml (an empty vendored folder) is replaced. Each
    copy gets a marker naming its source so later checks can say "supplied from sibling X".
    Returns one Supply per missing package, including those no sibling can provide.
    """
    paths = project_paths(project)
    have = _installed(paths)
    done = []
    for req in requirements(project):
        if req.source == "local" or req.name in have:
            continue
        supply = find_supply(project, req)
        done.append(supply)
        if supply.source is not None:
            target = paths.packages_dir / supply.source.name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(supply.source, target, symlinks=True)
            (target / SUPPLIED_MARKER).write_text(f"{supply.sibling} {supply.note}\n",
                                                  encoding="utf-8")
    return done


def supplied_packages(project: Path) -> dict[str, str]:
    """Packages setup copied from siblings: folder name -> marker text (sibling and why)."""
    root = project_paths(project).packages_dir
    return {marker.parent.name: marker.read_text(encoding="utf-8").strip()
            for marker in sorted(root.glob(f"*/{SUPPLIED_MARKER}"))} if root.is_dir() else {}

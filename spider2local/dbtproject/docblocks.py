"""dbt doc blocks: ``{% docs name %}...{% enddocs %}`` in a project's ``.md`` files, and the
``{{ doc('name') }}`` calls in YML descriptions that stand for them.

Why the scan resolves them: many Spider2-DBT projects (24 of 68) describe models and columns
only through doc blocks (definitions, the allowed values of a status column), so a scan that
passes ``{{ doc('orders_status') }}`` on as the description tells the agent nothing, where the
block's text is the specification. Resolving them turned two tasks in published real runs.

The files are the project's (and its vendored packages'), which are untrusted: a ``.md`` whose
real path leaves the project (a symlink to anywhere) is never read, so the runner's scan cannot
carry a file from outside the project into the agent's hands. Nothing here renders Jinja: a
block's text is kept as written, and a description's calls are replaced by plain matching.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from spider2local.dbtproject.paths import ProjectPaths
from spider2local.safepath import is_within

DOC_SUFFIXES = (".md",)
BLOCK_TEXT_MAX = 4000
"""Characters of one block kept (a long block is cut and says so): the scan is read by a model."""

_BLOCK = re.compile(r"\{%-?\s*docs\s+([A-Za-z_][\w.-]*)\s*-?%\}(.*?)\{%-?\s*enddocs\s*-?%\}",
                    re.DOTALL)
_CALL = re.compile(r"""\{\{-?\s*doc\s*\(\s*(['"])([^'"]+)\1\s*(?:,\s*(['"])([^'"]+)\3\s*)?\)"""
                   r"""\s*-?\}\}""")
"""``{{ doc('name') }}`` or ``{{ doc('package', 'name') }}`` (either quote, whitespace control)."""


@dataclass(frozen=True)
class DocBlock:
    name: str
    text: str
    path: str
    """The ``.md`` file holding it, relative to the project."""
    package: str | None = None
    """None for the project's own blocks."""


@dataclass(frozen=True)
class Resolved:
    """A description with its doc calls replaced, and the files the text came from."""

    text: str
    files: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    """Doc names no block defines (dbt itself stops on them); left as written in ``text``."""


class DocIndex:
    """The doc blocks of a project and its packages, by name."""

    def __init__(self, blocks: Iterable[DocBlock], project_name: str | None = None) -> None:
        self.blocks = tuple(blocks)
        self.project_name = project_name
        """The project's own name: ``doc('<it>', 'x')`` names the project's block ``x``."""
        self._own: dict[str, DocBlock] = {}
        self._by_package: dict[tuple[str, str], DocBlock] = {}
        self._any: dict[str, DocBlock] = {}
        for block in self.blocks:
            if block.package is None:
                self._own.setdefault(block.name, block)
            else:
                self._by_package.setdefault((block.package, block.name), block)
            self._any.setdefault(block.name, block)

    def find(self, name: str, package: str | None = None) -> DocBlock | None:
        """dbt's lookup: ``doc('pkg', 'name')`` in that package (or the project, named by its
        own name), ``doc('name')`` in the project first, then any package."""
        if package is not None:
            return self._by_package.get((package, name)) or self._own_named(package, name)
        return self._own.get(name) or self._any.get(name)

    def _own_named(self, package: str, name: str) -> DocBlock | None:
        own = self._own.get(name)
        return own if own is not None and self.project_name == package else None

    def resolve(self, text: str) -> Resolved:
        """``text`` with every doc call replaced by its block's text."""
        if "doc" not in text:
            return Resolved(text)
        files: list[str] = []
        missing: list[str] = []

        def swap(match: re.Match[str]) -> str:
            first, second = match.group(2), match.group(4)
            package, name = (first, second) if second is not None else (None, first)
            block = self.find(name, package)
            if block is None:
                missing.append(name if package is None else f"{package}.{name}")
                return match.group(0)
            files.append(block.path)
            return block.text

        resolved = _CALL.sub(swap, text)
        return Resolved(resolved, tuple(dict.fromkeys(files)), tuple(dict.fromkeys(missing)))


def doc_index(paths: ProjectPaths) -> DocIndex:
    """Every doc block of the project at ``paths`` and of its vendored packages."""
    root = paths.root
    blocks = list(_blocks(root, paths, None))
    for package in paths.packages():
        blocks += _blocks(root, package, package.package_name)
    return DocIndex(blocks, paths.name)


def _blocks(root: Path, paths: ProjectPaths, package: str | None) -> Iterable[DocBlock]:
    seen: set[Path] = set()
    for path in paths.files(paths.docs, DOC_SUFFIXES):
        if path in seen or not inside(path, root):
            continue
        seen.add(path)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
        for match in _BLOCK.finditer(text):
            yield DocBlock(match.group(1), _cut(match.group(2).strip()), rel, package)


def inside(path: Path, root: Path) -> bool:
    """Whether ``path``, symlinks followed, is a file inside ``root`` (the project): the
    condition for the scan to read it (:func:`spider2local.safepath.is_within` decides)."""
    try:
        return is_within(path.resolve(strict=True), root.resolve(strict=True))
    except (OSError, RuntimeError):  # gone, unreadable, or a symlink loop
        return False


def _cut(text: str) -> str:
    if len(text) <= BLOCK_TEXT_MAX:
        return text
    return text[:BLOCK_TEXT_MAX] + f"... [{len(text)} characters; read the .md file]"


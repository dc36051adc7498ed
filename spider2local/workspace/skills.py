"""Skills for an agent that reads them: names resolved before anything is copied, each
installed where that agent looks (its ``Capabilities.skills_dir``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from spider2local.exceptions import UserError
from spider2local.resources import skills_dir as bundled_skills
from spider2local.safepath import child, is_within
from spider2local.workspace.copy import copy_tree

_SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def skill_sources(names: Sequence[str], root: Path | None) -> dict[str, Path]:
    """Resolve skill names to folders before anything is copied; unknown names are an error."""
    if not names:
        return {}
    base = root if root is not None else bundled_skills()
    available = sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
    found: dict[str, Path] = {}
    for name in names:
        if not _SKILL_NAME.match(name) or not (base / name).is_dir():
            raise UserError(f"unknown skill {name!r}", path=base,
                            fix=f"choose from: {', '.join(available) or '(none)'}")
        found[name] = base / name
    return found


def install_skills(project: Path, skills_dir: str, sources: Mapping[str, Path]) -> None:
    """Copy each skill folder into ``project/<skills_dir>/<name>``: where the agent that reads
    them looks (declared by the agent, e.g. Claude Code's ``.claude/skills``), never outside
    the project."""
    if not sources:
        return
    rel = Path(skills_dir)
    if rel.is_absolute() or not rel.parts or any(p in ("", ".", "..") for p in rel.parts):
        raise UserError(f"skills folder {skills_dir!r} is not a folder inside the project",
                        fix="declare a relative path such as .claude/skills")
    target = project / rel
    target.mkdir(parents=True, exist_ok=True)
    if not is_within(target.resolve(), project.resolve()):  # a linked folder on the way
        raise UserError(f"skills folder {skills_dir!r} leads outside the project",
                        path=project, fix="remove the link from the task's project")
    for name, source in sources.items():
        copy_tree(source, child(target, name))

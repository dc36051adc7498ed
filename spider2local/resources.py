"""Where the repo-level resources (prompts/, skills/, faketime/, tasks.toml) live.

In a source checkout (editable install) they sit next to the package; in a wheel they are copied
into ``spider2local/_resources``. Everything that reads them goes through here so the two layouts
never leak into the rest of the code.
"""

from __future__ import annotations

from pathlib import Path

from spider2local.exceptions import ResourceMissing

_PACKAGE_DIR = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """Return the folder (or file) ``name`` from the wheel's copy or the source checkout.

    A missing resource means a broken installation, not a bug: :class:`ResourceMissing` is a
    :class:`UserError`, so the CLI prints one line with the fix instead of a traceback."""
    for candidate in (_PACKAGE_DIR / "_resources" / name, _PACKAGE_DIR.parent / name):
        if candidate.exists():
            return candidate
    raise ResourceMissing(f"resource {name!r} is missing from the spider2local installation",
                          path=_PACKAGE_DIR,
                          fix="reinstall spider2local: pip install --force-reinstall spider2local")


def prompts_dir() -> Path:
    return resource_dir("prompts")


def skills_dir() -> Path:
    return resource_dir("skills")


def faketime_dir() -> Path:
    return resource_dir("faketime")

"""The export formats and the optional packages each one needs.

Each format is written with its tool's own library, so that the tool reads what we write; those
libraries are heavy and only this command needs them, so they are an optional extra
(``pip install 'spider2local[export]'``). The command asks :func:`require` before importing a
writer: without the package it is one line naming the extra to install (exit 2), never an
ImportError's traceback.
"""

from __future__ import annotations

import importlib.util
import sys

from spider2local.exceptions import UserError

EXTRA = "export"
INSPECT = "inspect"
ATIF = "atif"
FORMATS = (ATIF, INSPECT)
NEEDS = {INSPECT: ("inspect_ai", "inspect-ai")}
"""Format -> (module to import, the PyPI package that provides it)."""


def require(fmt: str) -> None:
    """Raise :class:`UserError` unless ``fmt`` can be written here."""
    if fmt == ATIF:
        # harbor (the ATIF models) requires Python >= 3.12 in every release; a trajectory we
        # could not validate against its models is not offered.
        raise UserError(
            "--format atif is not available: it is written and checked with the ATIF models "
            "of the harbor package, which needs Python 3.12 or newer (this is Python "
            f"{sys.version_info.major}.{sys.version_info.minor})",
            fix="use --format inspect")
    module, package = NEEDS[fmt]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UserError(f"--format {fmt} needs the {package} package, which is not installed",
                        fix=f"pip install 'spider2local[{EXTRA}]'")

"""What this machine has used that an agent must never reach, remembered across commands.

A run hides its own runs folder, but an older one elsewhere (``/opt/old-runs``, with earlier
results and their gold diagnostics) is just as revealing; ``setup`` places the zips' files, but
``dbt_gold.zip`` stays wherever it was downloaded, and another copy of the dataset has the same
gold. None is named by the run at hand, so each is recorded when it is used: a small registry
in spider2local's cache folder (one real path a line, appended; two commands appending at once
each write whole lines), read by
:meth:`spider2local.integrity.guard.Watch.off_limits`, the one list of what the agent must not
reach. The cache folder itself is always hidden, so the registry is not a map for the agent.
"""

from __future__ import annotations

import logging
import os
from enum import StrEnum
from pathlib import Path

from spider2local.dataset.sample import default_cache_dir

log = logging.getLogger(__name__)
MAX_ENTRIES = 1000
"""Entries read per kind at most (the newest): a bound on a registry that only grows."""


class Kind(StrEnum):
    RUNS_FOLDER = "runs-folders"
    SETUP_ZIP = "setup-zips"
    GOLD_FOLDER = "gold-folders"
    """Each dataset's ``evaluation_suite/gold`` a run used: a second copy of Spider2-DBT on the
    same machine (``/opt/spider2``, a colleague's checkout) holds the same tasks' gold."""


def registry_file(kind: Kind, cache: Path | None = None) -> Path:
    return (cache or default_cache_dir()) / f"{kind.value}.txt"


def remember(kind: Kind, path: Path, cache: Path | None = None) -> None:
    """Record ``path`` (its real path) once. A cache that cannot be written is logged: the run
    goes on, hiding what it knows of this run."""
    real = os.path.realpath(path)
    if "\n" in real:
        return
    target = registry_file(kind, cache)
    if real in {str(p) for p in remembered(kind, cache)}:
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as fh:
            fh.write(real + "\n")
    except OSError as exc:
        log.warning("%s: not recorded: %s", target, exc.strerror or exc)


def remembered(kind: Kind, cache: Path | None = None) -> list[Path]:
    """Every recorded path of ``kind`` (existing or not: a folder may come back)."""
    try:
        lines = registry_file(kind, cache).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    found = [Path(line) for line in lines[-MAX_ENTRIES:] if line.startswith("/")]
    return list(dict.fromkeys(found))

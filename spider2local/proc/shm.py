"""Shared-memory files in ``/dev/shm`` that killed processes left behind.

libfaketime creates ``faketime_shm_<pid>`` and ``sem.faketime_sem_<pid>`` in every faked
process and removes them in its exit handler; Python's multiprocessing creates ``sem.mp-*``
semaphores that its resource tracker removes. A SIGKILL skips both, and /dev/shm is memory: a
run killed often enough fills it. :mod:`spider2local.proc.kill` removes the faketime files of
the pids it kills itself; this module removes those of processes nobody is left to kill (a
runner killed with ``kill -9``), at the next command that opens the run.

A file is removed only when it is certainly garbage: ours (same uid), of a name these
libraries use, older than :data:`MIN_AGE`, and neither mapped nor open by any live process.
The pid in a faketime name is not trusted: in another pid namespace the same number names
another process, so only "nobody uses it" counts.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from spider2local.proc.kill import SHM_DIR
from spider2local.proc.procfs import PROC, live_pids

PATTERNS = ("faketime_shm_*", "sem.faketime_sem_*", "sem.mp-*")
"""libfaketime's segment and semaphore; multiprocessing's named semaphores. ``psm_*``
(multiprocessing.shared_memory) is left alone: such a segment may rightly outlive every
process that maps it, waiting for another to open it by name."""
MIN_AGE = 1.0
"""Seconds. A process creates its file a moment (microseconds) before it maps it; a file
younger than this may be in that moment, so it is left for the next time."""


def _in_use(candidates: set[str]) -> set[str]:
    """The candidate paths some live process maps or holds open (one /proc walk)."""
    used: set[str] = set()
    for pid in live_pids():
        with contextlib.suppress(OSError):
            maps = (PROC / str(pid) / "maps").read_text(errors="replace")
            used.update(c for c in candidates if c in maps)
        with contextlib.suppress(OSError):
            for fd in (PROC / str(pid) / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = str(fd.readlink())
                    if target in candidates:
                        used.add(target)
    # Our own process is not in live_pids(): check it too.
    with contextlib.suppress(OSError):
        maps = (PROC / "self" / "maps").read_text(errors="replace")
        used.update(c for c in candidates if c in maps)
    return used


def remove_leftovers(shm_dir: Path = SHM_DIR, *, min_age: float = MIN_AGE) -> list[Path]:
    """Remove the files of :data:`PATTERNS` in ``shm_dir`` that no live process uses; returns
    those removed. Costs one /proc walk when there are candidates, nothing otherwise."""
    if not shm_dir.is_dir():
        return []
    now, uid = time.time(), os.getuid()
    candidates: dict[str, Path] = {}
    for pattern in PATTERNS:
        for path in shm_dir.glob(pattern):
            with contextlib.suppress(OSError):
                st = path.lstat()
                if st.st_uid == uid and now - st.st_mtime >= min_age and path.is_file():
                    candidates[str(path)] = path
    if not candidates:
        return []
    removed = []
    for name in sorted(set(candidates) - _in_use(set(candidates))):
        with contextlib.suppress(OSError):
            candidates[name].unlink()
            removed.append(candidates[name])
    return removed

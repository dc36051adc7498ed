"""Leftover /dev/shm files: removed only when nobody uses them (real mappings, real fds)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spider2local.proc.shm import remove_leftovers

_HOLD = """
import mmap, sys
mapped = open(sys.argv[1], "r+b")
m = mmap.mmap(mapped.fileno(), 0)
mapped.close()                      # only the mapping is left, as libfaketime's segment
held = open(sys.argv[2], "rb")      # only an open fd, not mapped
print("ready", flush=True)
sys.stdin.read()
"""


def _file(folder: Path, name: str, *, age: float) -> Path:
    path = folder / name
    path.write_bytes(b"\0" * 32)
    os.utime(path, (time.time() - age, time.time() - age))
    return path


@pytest.mark.process
def test_only_old_unused_files_of_known_names_are_removed(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    dead = [_file(shm, "faketime_shm_999999", age=60),
            _file(shm, "sem.faketime_sem_999999", age=60), _file(shm, "sem.mp-abc123", age=60)]
    mapped = _file(shm, "faketime_shm_1", age=60)  # a live process in another pid namespace
    opened = _file(shm, "sem.mp-inuse", age=60)
    young = _file(shm, "sem.faketime_sem_2", age=0)  # between shm_open and mmap, maybe
    other = [_file(shm, "psm_shared", age=60), _file(shm, "someone-else", age=60)]
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(mapped), str(opened)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        removed = remove_leftovers(shm)
    finally:
        holder.communicate("", timeout=30)
    assert sorted(removed) == sorted(dead)
    assert all(p.exists() for p in (mapped, opened, young, *other))
    assert not any(p.exists() for p in dead)


def test_nothing_to_do_without_the_folder(tmp_path: Path) -> None:
    assert remove_leftovers(tmp_path / "absent") == []

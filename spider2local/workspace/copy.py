"""Copy project trees quickly and safely: the file work behind workspaces and file-applying agents.

Dataset files are often read-only (the shared dataset is ``r--r--r--``), and dbt must write the
database, so copies never keep the source's permissions: they get ordinary writable modes.
Hard links are never used (dbt would write through them into the dataset). Large files (the
DuckDB databases) are cloned copy-on-write where the filesystem supports it and otherwise copied
in the kernel by ``shutil.copyfile``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Collection, Sequence
from pathlib import Path

FICLONE = 0x40049409
"""Linux ioctl: make ``dst`` a copy-on-write clone of ``src`` (btrfs, xfs, overlay on those)."""
CLONE_MIN_BYTES = 1 << 20


def fast_copy(src: Path, dst: Path) -> int:
    """Copy one file's content to ``dst`` (overwriting it); return its size in bytes."""
    size = src.stat().st_size
    if size >= CLONE_MIN_BYTES and _clone(src, dst):
        return size
    shutil.copyfile(src, dst)
    return size


def _clone(src: Path, dst: Path) -> bool:
    try:
        with src.open("rb") as fin, dst.open("wb") as fout:
            fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
        return True
    except OSError:
        with contextlib.suppress(OSError):
            dst.unlink()
        return False


def copy_tree(src: Path, dst: Path, *, skip: Collection[str] = (),
              forbidden: Sequence[Path] = ()) -> tuple[int, int]:
    """Copy ``src`` into ``dst`` (merged over whatever is there); return (files, bytes).

    ``skip`` names top-level entries of ``src`` left out. Entries that are, or resolve into, a
    ``forbidden`` path are left out too (a symlink to the gold must not smuggle it in).
    Symlinks are copied as the content they point at; a symlink loop is followed once.
    """
    counts = [0, 0]
    _copy_dir(src, dst, set(skip), tuple(p.resolve() for p in forbidden), set(), counts)
    return counts[0], counts[1]


def _copy_dir(src: Path, dst: Path, skip: set[str], forbidden: tuple[Path, ...],
              seen: set[Path], counts: list[int]) -> None:
    real = src.resolve()
    if real in seen or _is_forbidden(real, forbidden):
        return
    seen.add(real)
    dst.mkdir(parents=True, exist_ok=True)
    with os.scandir(src) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name in skip:
                continue
            source, target = Path(entry.path), dst / entry.name
            if entry.is_dir():
                _copy_dir(source, target, set(), forbidden, seen, counts)
            elif entry.is_file() and not _is_forbidden(source.resolve(), forbidden):
                if target.is_symlink() or target.is_dir():
                    _remove(target)
                counts[1] += fast_copy(source, target)
                counts[0] += 1


def _is_forbidden(path: Path, forbidden: tuple[Path, ...]) -> bool:
    return any(path == f or path.is_relative_to(f) for f in forbidden)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def remove_tree(root: Path) -> None:
    """Delete ``root`` even if something inside was made read-only (agents can chmod)."""
    if not root.exists():
        return
    root.chmod(0o755)
    for folder, dirs, _files in os.walk(root):
        for name in dirs:
            path = Path(folder) / name
            if not path.is_symlink():
                path.chmod(0o755)
    shutil.rmtree(root)

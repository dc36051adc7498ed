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

from spider2local.exceptions import DatasetError
from spider2local.safepath import links_outside
from spider2local.workspace import tree

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


class LinkOutside(DatasetError):
    """A symlink in a tree being copied leads outside it (or nowhere: a loop)."""


def copy_tree(src: Path, dst: Path, *, skip: Collection[str] = (),
              forbidden: Sequence[Path] = ()) -> tuple[int, int]:
    """Copy ``src`` into ``dst`` (merged over whatever is there); return (files, bytes).

    ``skip`` names top-level entries of ``src`` left out. Entries that are, or resolve into, a
    ``forbidden`` path are left out too (a symlink to the gold must not smuggle it in).
    A symlink that resolves inside ``src`` is copied as the content it points at (a folder
    reached twice, as through a link to an ancestor, is copied once); one that leads outside
    ``src``, or into a loop, raises :class:`LinkOutside` naming it, before anything is copied.
    """
    outside = links_outside(src, skip)
    if outside:
        raise LinkOutside(f"symlink leads outside the folder: {outside[0]}"
                          + (f" (+{len(outside) - 1} more)" if len(outside) > 1 else ""),
                          path=src, fix="replace the link with the file it points at")
    counts = [0, 0]
    _copy_dir(src, dst, set(skip), tuple(p.resolve() for p in forbidden), set(), counts)
    return counts[0], counts[1]


def _copy_dir(src: Path, dst: Path, skip: set[str], forbidden: tuple[Path, ...],
              seen: set[Path], counts: list[int]) -> None:
    """Iterative (a stack of folders, not recursion): a tree of any depth copies."""
    stack = [(src, dst, skip)]
    while stack:
        source_dir, target_dir, skipped = stack.pop()
        real = source_dir.resolve()
        if real in seen or _is_forbidden(real, forbidden):
            continue
        seen.add(real)
        target_dir.mkdir(parents=True, exist_ok=True)
        with os.scandir(source_dir) as it:
            entries = sorted(it, key=lambda e: e.name)
        subdirs = []
        for entry in entries:
            if entry.name in skipped:
                continue
            source, target = Path(entry.path), target_dir / entry.name
            if entry.is_dir():
                subdirs.append((source, target, set[str]()))
            elif entry.is_file() and not _is_forbidden(source.resolve(), forbidden):
                if target.is_symlink() or target.is_dir():
                    _remove(target)
                counts[1] += fast_copy(source, target)
                counts[0] += 1
        stack.extend(reversed(subdirs))  # depth-first in name order, as before


def _is_forbidden(path: Path, forbidden: tuple[Path, ...]) -> bool:
    return any(path == f or path.is_relative_to(f) for f in forbidden)


def _remove(path: Path) -> None:
    tree.remove_tree(path)


def remove_tree(root: Path) -> None:
    """Delete ``root`` even if something inside was made read-only (agents can chmod), at
    any depth (:func:`spider2local.workspace.tree.remove_tree`)."""
    tree.remove_tree(root)

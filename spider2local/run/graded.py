"""A trial's graded tables, kept in its run folder as ``graded.duckdb`` (on by default).

After the checkpoint (and the score) the runner copies the tables the scorer read into a small
DuckDB file of their own (:mod:`spider2local.sandbox.graded`, run in a reader sandbox: the
agent's views are its SQL), outside the agent's reach: the agent is gone, the file is built in
a scratch folder of the runner's and copied into the run folder, and its sha256 goes into the
trial's result.json (``graded_sha256``). ``spider2local regrade`` (:mod:`.regrade`) scores
these files again; it copies a file out of the run folder first and scores the copy only when
its hash is the one recorded, so a file changed since the run is refused, never scored.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from spider2local.core.layout import GRADED_DB
from spider2local.proc.tempdirs import make_owned_dir
from spider2local.sandbox import readers
from spider2local.sandbox.readers import ReaderFiles, bound
from spider2local.sandbox.reply import result_of
from spider2local.workspace.tree import open_regular

MODULE = "spider2local.sandbox.graded"


@dataclass(frozen=True)
class Kept:
    """What :func:`keep_graded` kept."""

    sha256: str
    size: int
    tables: Mapping[str, str | None] = field(default_factory=dict)
    """By graded name: ``None`` when copied, else why the scorer could not read it either."""

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "bytes": self.size, "tables": dict(self.tables)}


async def keep_graded(db: Path, out: Path, tables: Sequence[str], *,
                      hidden: Iterable[Path] = ()) -> Kept:
    """Copy ``tables`` of the checkpointed database ``db`` into ``out`` (in the run folder).

    The reader child sees ``db`` read-only and a fresh scratch folder read-write, nothing else
    (``hidden``: the run's off-limits list, as the scorer's sandbox hides it); the file it
    writes there is copied to ``out`` by the runner. Raises what the child raised
    (:class:`~spider2local.sandbox.graded.NotKeepable` for a name that cannot be kept) or
    :class:`~spider2local.sandbox.readers.ReaderFailed`; the caller's deadline cancels it."""
    scratch = await anyio.to_thread.run_sync(make_owned_dir, "graded")
    try:
        request, files = _reader_job(db, scratch, tables, hidden)
        found = result_of(await readers.ask_reader(MODULE, request, files, timeout=None))
        sha256, size = await anyio.to_thread.run_sync(copy_hashed, scratch / GRADED_DB, out)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(functools.partial(shutil.rmtree, scratch,
                                                             ignore_errors=True))
    tables_found = found.get("tables") if isinstance(found, dict) else None
    return Kept(sha256, size, {str(k): (None if v is None else str(v))
                               for k, v in (tables_found or {}).items()})


def _reader_job(db: Path, scratch: Path, tables: Sequence[str],
                hidden: Iterable[Path]) -> tuple[dict[str, Any], ReaderFiles]:
    """The child's request and files: the database by its absolute path, links not resolved
    (as the scorer's: :func:`~spider2local.sandbox.readers.bound` binds both names)."""
    request = {"result": os.path.abspath(db),  # noqa: PTH100
               "out": str(scratch / GRADED_DB), "tables": list(tables)}
    return request, ReaderFiles(read_only=bound([db]), writable=(scratch,),
                                hidden=tuple(hidden))


def copy_hashed(src: Path, dst: Path) -> tuple[str, int]:
    """Copy the regular file ``src`` to ``dst`` (atomically: a reader sees the old file or the
    whole new one) and return the sha256 and size of exactly the bytes copied. A link or a
    special file is refused (:func:`~spider2local.workspace.tree.open_regular`)."""
    digest, size = hashlib.sha256(), 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    try:
        with os.fdopen(open_regular(src), "rb") as fin, tmp.open("wb") as fout:
            while chunk := fin.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
                fout.write(chunk)
            fout.flush()
            os.fsync(fout.fileno())
        tmp.replace(dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return digest.hexdigest(), size


class GradedRefused(Exception):
    """A kept graded file that is not the one the run recorded: never scored."""


def checked_copy(kept: Path, sha256: str, into: Path) -> Path:
    """A private copy (in the folder ``into``) of the run's graded file ``kept``, returned only
    when its bytes hash to ``sha256``, the hash the trial's result.json recorded: the copy is
    what gets scored, so the file cannot change between the check and the score. Raises
    :class:`GradedRefused` saying what is wrong, :class:`FileNotFoundError` when it is gone."""
    copy = into / GRADED_DB
    try:
        found, _ = copy_hashed(kept, copy)
    except FileNotFoundError:
        raise
    except OSError as exc:  # a link, a FIFO, a folder: not the file the runner wrote
        raise GradedRefused(f"{kept.name} is not a plain file ({exc.strerror or exc})") from None
    if found != sha256:
        copy.unlink(missing_ok=True)
        raise GradedRefused(f"{kept.name} does not match the sha256 its result.json recorded "
                            f"(recorded {sha256[:12]}, found {found[:12]}): changed since the "
                            "run")
    return copy


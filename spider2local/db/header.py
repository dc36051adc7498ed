"""Check a DuckDB file from its header, without opening (and so locking) it.

Opening a file is the real test, but it takes a lock that a running ``dbt run`` would collide
with, and the loader checks every file of the dataset. The header tells most of the story: the
magic bytes say "DuckDB", and the storage version says whether the installed duckdb can read it.
A file written by duckdb 2.0 (storage version 69) would otherwise be listed as runnable and then
fail inside dbt with an error that does not name the real cause.

DuckDB's main header: an 8-byte checksum, the magic ``DUCK`` at bytes 8-12, then the storage
``version_number`` as a little-endian uint64 at bytes 12-20.
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path

import duckdb

from spider2local.proc.tempdirs import owned_tempdir

MAGIC = b"DUCK"
MIN_STORAGE_VERSION = 64
"""DuckDB 0.10 froze storage version 64 and every later release reads it; older files cannot be
opened by duckdb 1.x at all (they need an export from the DuckDB that wrote them)."""


def storage_version(header: bytes) -> int | None:
    """The storage version in a file's first bytes; ``None`` if they are not a DuckDB header."""
    if len(header) < 20 or header[8:12] != MAGIC:
        return None
    return int(struct.unpack_from("<Q", header, 12)[0])


@functools.cache
def max_storage_version() -> int:
    """The newest storage version the installed duckdb reads: the one it writes when asked for
    its latest format. Measured once per process (an empty file, a fraction of a second) so an
    upgrade of duckdb never leaves a stale constant behind."""
    with owned_tempdir("dbfile") as tmp:
        path = tmp / "probe.duckdb"
        duckdb.connect(str(path), config={"storage_compatibility_version": "latest"}).close()
        with path.open("rb") as fh:
            version = storage_version(fh.read(20))
    if version is None:  # pragma: no cover - only if DuckDB changed its header layout
        raise RuntimeError("duckdb wrote a file without the DuckDB header")
    return version


HEADER_BYTES = 3 * 4096
"""The main header and the two database headers that precede the first block."""
DEFAULT_BLOCK_BYTES = 262144
"""DuckDB's block allocation size; files of older versions leave the header field at 0."""


_BLOCK_ID_BITS = (1 << 56) - 1
"""A meta block pointer is a block id in its low 56 bits and a sub-block index in its top 8."""
_NO_BLOCK = (1 << 64) - 1
"""``INVALID_BLOCK`` (-1) as the header stores it: a file that was never checkpointed."""


def _current_header(header: bytes) -> tuple[int, ...] | None:
    """The fields of the current database header (the one with the higher iteration)."""
    if len(header) < HEADER_BYTES:
        return None
    return max((struct.unpack_from("<6Q", header, offset) for offset in (4096, 8192)),
               key=lambda fields: fields[1])


def expected_size(header: bytes) -> int | None:
    """The smallest size a complete file with these first :data:`HEADER_BYTES` can have, or
    ``None`` when the headers do not say (too short to tell, or values we do not recognise).

    Each database header (at 4096 and 8192) is a checksum, then uint64s: iteration, meta block,
    free list, block count, block allocation size. The one with the higher iteration is current.

    What the header really guarantees is less than its block count: after writing the header,
    DuckDB cuts the trailing *free* blocks off the file (duckdb 1.5.6: create a table, create
    and drop a 300k-row table, insert a row: 536,576 bytes on disk, a header counting 1,585,152),
    and which blocks are free is only known from the free list inside the file. What must be
    there is the catalog's meta block and the free list's block, which the header names: a file
    shorter than the later of the two is cut short for certain. A file cut short (a failed
    download, a full disk) otherwise opens and lists its tables, and only fails, as a plain
    "failed 0/1", when dbt or the scorer reads the missing blocks."""
    current = _current_header(header)
    size = block_size(header)
    if current is None or size is None or int(current[4]) > 1 << 40:
        return None
    blocks = int(current[4])
    used = [int(pointer) & _BLOCK_ID_BITS for pointer in (current[2], current[3])
            if pointer != _NO_BLOCK]
    if any(block >= blocks for block in used):
        return None  # a pointer past the block count: not a layout we know, so no claim
    return HEADER_BYTES + (max(used) + 1) * size if used else HEADER_BYTES


def block_size(header: bytes) -> int | None:
    """The block allocation size the current database header records, when it is plausible."""
    current = _current_header(header)
    if current is None:
        return None
    size = int(current[5]) or DEFAULT_BLOCK_BYTES
    return size if not size & (size - 1) and 4096 <= size <= 1 << 28 else None


def duckdb_file_problem(path: Path) -> str | None:
    """Why ``path`` is not a DuckDB file this installation can read, or ``None``.

    Checked from the first :data:`HEADER_BYTES` and the file size only: opening each file
    read-only to be sure costs 30-40 ms (measured on the real start databases), about 5 s for
    the loader on the whole dataset, and takes a lock a running dbt collides with."""
    try:
        with path.open("rb") as fh:
            header = fh.read(HEADER_BYTES)
        size = path.stat().st_size
    except OSError as exc:
        return f"{path.name} unreadable: {exc.strerror}"
    version = storage_version(header)
    if version is None:
        return f"{path.name} is not a DuckDB file"
    newest = max_storage_version()
    if version > newest:
        return (f"{path.name} was written by a newer DuckDB (storage version {version}); "
                f"this spider2local reads up to {newest}")
    if version < MIN_STORAGE_VERSION:
        return (f"{path.name} was written by an older DuckDB (storage version {version}); "
                f"this spider2local reads {MIN_STORAGE_VERSION} to {newest}")
    if size < HEADER_BYTES:
        return f"{path.name} is truncated ({size} bytes, shorter than DuckDB's headers)"
    expected = expected_size(header)
    if expected is not None and size < expected:
        return (f"{path.name} is truncated ({size} bytes; its header needs at least "
                f"{expected})")
    block = block_size(header)
    if block is not None and (size - HEADER_BYTES) % block:
        # DuckDB writes and cuts whole blocks only: a size between two blocks is a cut file.
        return (f"{path.name} is truncated ({size} bytes: not a whole number of its "
                f"{block}-byte blocks)")
    return None

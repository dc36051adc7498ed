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
import tempfile
from pathlib import Path

import duckdb

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
    with tempfile.TemporaryDirectory(prefix="spider2local-dbfile-") as tmp:
        path = Path(tmp) / "probe.duckdb"
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


def expected_size(header: bytes) -> int | None:
    """The smallest size a complete file with these first :data:`HEADER_BYTES` can have, or
    ``None`` when the headers do not say (too short to tell, or values we do not recognise).

    Each database header (at 4096 and 8192) is a checksum, then uint64s: iteration, meta block,
    free list, block count, block allocation size. The one with the higher iteration is current;
    every block it counts lies after the three headers. A file cut short (a failed download, a
    full disk) opens and lists its tables, and only fails, as a plain "failed 0/1", when dbt
    or the scorer reads the missing blocks."""
    if len(header) < HEADER_BYTES:
        return None
    current = max((struct.unpack_from("<6Q", header, offset) for offset in (4096, 8192)),
                  key=lambda fields: fields[1])
    blocks, block_size = int(current[4]), int(current[5]) or DEFAULT_BLOCK_BYTES
    if block_size & (block_size - 1) or not 4096 <= block_size <= 1 << 28 or blocks > 1 << 40:
        return None
    return HEADER_BYTES + blocks * block_size


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
        return f"{path.name} is truncated ({size} bytes; its header says {expected})"
    return None

"""What runs in a later Python process before any of our ``.py`` files: startup hooks and
bytecode. Fingerprinted beside the sources (:func:`spider2local.integrity.guard.source_hashes`).

Without isolation an agent can plant, in the environment the runner's venv shares with it:

- a ``.pth`` file in site-packages (any ``import`` line in it runs at every interpreter start),
  or a ``sitecustomize``/``usercustomize`` module: code in every later ``spider2local`` run;
- a poisoned ``__pycache__/<module>.cpython-311.pyc`` whose header claims the current source
  (its mtime and size are in the header, and readable): Python loads it instead of the ``.py``,
  whose hash stays the one recorded. Only the ``.py`` files used to be fingerprinted, so a later
  run passed whatever that bytecode said.

Startup hooks are hashed (``site:<path>`` keys). Bytecode is not hashed (Python rewrites it
legitimately whenever a module is first imported), it is checked: every ``.pyc`` Python would
load for a package source must hold the code object that source compiles to (code objects
compare by value; measured equal for all 113 cached modules of the package, 1.5 s for the
whole package cold, nothing once verified: results are kept per file state). A mismatch is a
``<module>.py (bytecode)`` key that no recorded fingerprint holds, so it reads as a change.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import site
import struct
import threading
from collections.abc import Iterable
from pathlib import Path

SITE_PREFIX = "site:"
BYTECODE_SUFFIX = " (bytecode)"
HOOK_MODULES = ("sitecustomize", "usercustomize")
_verified: dict[tuple[str, tuple[int, ...], tuple[int, ...]], bool] = {}
_lock = threading.Lock()


def site_dirs() -> list[Path]:
    """The folders whose ``.pth`` files every interpreter of this environment reads."""
    found = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        found.append(site.getusersitepackages())
    return list(dict.fromkeys(Path(p) for p in found))


def startup_hooks() -> dict[str, str]:
    """``site:<path> -> sha256`` of every ``.pth`` file and startup-hook module found."""
    paths: list[Path] = []
    for folder in site_dirs():
        try:
            paths += sorted(p for p in folder.glob("*.pth") if p.is_file())
        except OSError:
            continue
    for name in HOOK_MODULES:
        try:
            spec = importlib.util.find_spec(name)  # finds, never runs
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            paths.append(Path(spec.origin))
    found = {SITE_PREFIX: "startup hooks fingerprinted"}  # marks fingerprints that have them
    for path in paths:
        try:
            found[f"{SITE_PREFIX}{path}"] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            found[f"{SITE_PREFIX}{path}"] = "unreadable"
    return found


def bytecode_mismatches(sources: Iterable[Path], base: Path) -> dict[str, str]:
    """``<rel>.py (bytecode) -> why`` for each source whose cached bytecode, as Python would
    load it, is not what the source compiles to."""
    found = {}
    for py in sources:
        problem = _bytecode_problem(py)
        if problem is not None:
            found[py.relative_to(base).as_posix() + BYTECODE_SUFFIX] = problem
    return found


def _bytecode_problem(py: Path) -> str | None:
    pyc = Path(importlib.util.cache_from_source(str(py)))
    try:
        src, cached = py.stat(), pyc.stat()
    except OSError:
        return None  # no bytecode: the source is what loads
    key = (str(pyc), (cached.st_mtime_ns, cached.st_size, cached.st_ino),
           (src.st_mtime_ns, src.st_size, src.st_ino))
    with _lock:
        known = _verified.get(key)
    if known is None:
        known = _matches(py, pyc, src.st_mtime, src.st_size)
        with _lock:
            _verified[key] = known
    return None if known else "cached bytecode differs from its source"


def _matches(py: Path, pyc: Path, mtime: float, size: int) -> bool:
    try:
        data = pyc.read_bytes()
        if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
            return True  # not loadable by this interpreter: the source is compiled instead
        flags, stamp, length = struct.unpack("<III", data[4:16])
        if flags == 0 and (stamp != int(mtime) & 0xFFFFFFFF or length != size & 0xFFFFFFFF):
            return True  # stale: Python recompiles the source
        # hash-based (flags 1 or 3) bytecode is loaded as it stands when unchecked: compare too
        code = compile(py.read_bytes(), str(py), "exec", dont_inherit=True)
        return bool(marshal.loads(data[16:]) == code)
    except (OSError, ValueError, EOFError, TypeError, SyntaxError):
        return False

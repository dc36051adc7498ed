"""``project_scan`` at the time of the call: the project's files scanned in a reader child.

The scan reads files the agent wrote (YML, SQL, macros, doc ``.md`` files) and returns their
text, so it runs where a reader runs (:mod:`spider2local.sandbox.readers`): a child process
that sees the workspace read-only and nothing of the host, with the reader's environment (no
credentials). A symlink the agent planted towards a file of the runner's then resolves to
nothing; without namespaces, the scan itself never reads a file whose real path leaves the
project (:func:`spider2local.dbtproject.docblocks.inside`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from spider2local.dbtproject.inventory import scan_project

if TYPE_CHECKING:  # the child imports this module: it needs the scan only
    from spider2local.sandbox.readers import ReaderFiles

MODULE = "spider2local.dbtools.scanner"


class ScanFailed(Exception):
    """A fresh project scan gave no answer (its child failed, timed out or was cut)."""


async def scan_now(project: Path, files: ReaderFiles, timeout: float) -> str:  # noqa: ASYNC109
    """The scan of ``project`` as its files are now, as the JSON the stored scan has."""
    from spider2local.sandbox.readers import ReaderFailed, ask_reader

    try:
        answer = await ask_reader(MODULE, {"project": str(project)}, files, timeout=timeout)
    except ReaderFailed as exc:
        raise ScanFailed(str(exc)) from None
    scan = answer.get("scan")
    if not isinstance(scan, str):
        raise ScanFailed(str(answer.get("error") or "no scan in the answer"))
    return scan


def _main() -> None:
    request = json.loads(sys.stdin.read())
    try:
        answer = {"scan": scan_project(Path(request["project"])).to_json()}
    except Exception as exc:  # one line back to the tool, never a traceback to the agent
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _main()

"""The environment names the clock's three parts share agree.

The dbt shim (``faketime/dbt``, a shell script) and the warm server (``faketime/warmdbt.py``,
started with ``python -I -S`` inside the sandbox, where the spider2local package is hidden)
cannot import :mod:`spider2local.clock`, so each spells the names it reads; these tests are
what keeps the three spellings one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from spider2local.clock import faketime, warm

FAKETIME_DIR = Path(__file__).resolve().parents[2] / "faketime"
OWNED = {"LIBRARY_ENV": faketime.LIBRARY_ENV, "REAL_DBT_ENV": faketime.REAL_DBT_ENV,
         "RUNS_ENV": faketime.RUNS_ENV, "SOCKET_ENV": warm.SOCKET_ENV}
"""The warm server's constants, by name, and the clock's value for each."""


def module_constants(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {target.id: node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets if isinstance(target, ast.Name)}


def test_the_warm_server_reads_the_clocks_names() -> None:
    found = module_constants(FAKETIME_DIR / "warmdbt.py")
    assert {name: found.get(name) for name in OWNED} == OWNED


def test_the_shim_reads_the_clocks_names() -> None:
    shim = (FAKETIME_DIR / "dbt").read_text(encoding="utf-8")
    read = set(re.findall(r"\$\{?(SPIDER2LOCAL_[A-Z_]+)", shim))
    clock = {faketime.LIBRARY_ENV, faketime.FAKE_DATE_ENV, faketime.REAL_DBT_ENV,
             faketime.RUNS_ENV, warm.SOCKET_ENV, warm.PYTHON_ENV}
    assert read, "the check finds the names the shim reads"
    assert read <= clock, sorted(read - clock)
    assert {faketime.REAL_DBT_ENV, faketime.LIBRARY_ENV, faketime.FAKE_DATE_ENV} <= read


def test_the_check_can_fail(tmp_path: Path) -> None:
    path = tmp_path / "w.py"
    path.write_text('SOCKET_ENV = "SPIDER2LOCAL_WARM_DBT_OLD"\n')
    assert module_constants(path)["SOCKET_ENV"] != OWNED["SOCKET_ENV"]

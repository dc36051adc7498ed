"""What a warm dbt child reports to its server (faketime/warmdbt.py ``learned``): the child ran
the agent's project (dbt Python models are arbitrary code), so its report is untrusted data.
Only serialisers the server itself listed count, each once; anything else is ignored."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from spider2local.resources import faketime_dir


def warmdbt() -> ModuleType:
    spec = importlib.util.spec_from_file_location("warmdbt", faketime_dir() / "warmdbt.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("warmdbt", module)
    spec.loader.exec_module(module)
    return module


class Model:
    pass


def pending(names: list[str]) -> dict[str, tuple[type, str, object]]:
    calls: list[str] = []
    return {name: (Model, "from_dict", lambda *a, _n=name: calls.append(_n)) for name in names}


def test_only_listed_serialisers_are_compiled_each_once() -> None:
    w = warmdbt()
    listed = pending(["dbt.a:A:to_dict", "dbt.b:B:from_dict"])
    steps = w.learned(b"dbt.a:A:to_dict\ndbt.a:A:to_dict\nos:system:rm -rf /\n", listed)
    assert [kind for kind, _ in steps] == ["compile"]  # the repeat and the stranger are dropped
    assert list(listed) == ["dbt.b:B:from_dict"]  # taken out: never queued twice
    assert w.learned(b"dbt.a:A:to_dict\n", listed) == []


def test_garbage_huge_or_binary_reports_compile_nothing_and_raise_nothing() -> None:
    w = warmdbt()
    listed = pending(["dbt.a:A:to_dict"])
    for report in (b"\xff\xfe\x00" * 1000, b"x" * 10_000_000, b"", b"\n\n\n",
                   b"dbt.a:A:to_dict\x00", "dbt.a:A:to_dict\u202e".encode()):
        assert w.learned(report, listed) == [], report[:40]
    assert list(listed) == ["dbt.a:A:to_dict"]
    # past the size cap nothing is read, even a listed name
    assert w.learned(b"y" * w.MAX_LEARNED + b"\ndbt.a:A:to_dict\n", listed) == []

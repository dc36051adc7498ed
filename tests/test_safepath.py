"""The containment test every guard uses (the sandbox plan, the scan, the doctor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spider2local.safepath import is_within


@pytest.mark.parametrize(("path", "root", "inside"), [
    ("/a/b", "/a/b", True),
    ("/a/b/c", "/a/b", True),
    ("/a/bc", "/a/b", False),  # a sibling sharing a prefix is not inside
    ("/a", "/a/b", False),
    ("/anything", "/", True),
    ("/", "/", True),
    ("rel/x", "rel", True),
    ("/a/b/../c", "/a/b", True),  # by name, as Path.parents decides: callers pass real paths
])
def test_is_within_agrees_with_path_parents(path: str, root: str, inside: bool) -> None:
    p, r = Path(path), Path(root)
    assert is_within(p, r) is inside
    assert (p == r or r in p.parents) is inside

"""``score --gold`` options go through the dataset's own evaluation-config validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from spider2local.cli.scoreargs import params_from_options
from spider2local.exceptions import UserError


def test_options_become_eval_params() -> None:
    params = params_from_options(Path("/x/g.duckdb"), "a, b", "[[0, 1], []]", "true")
    assert (params.gold, params.condition_tabs, params.condition_cols, params.ignore_orders) == (
        "g.duckdb", ("a", "b"), ((0, 1), ()), (True, True))


@pytest.mark.parametrize(("cols", "ignore", "reason"), [
    ("[[0]]", None, "condition_tabs, condition_cols and ignore_orders have unequal lengths "
                    "(2, 1, 2)"),
    ('[["0"], []]', None, "condition_cols must be lists of integer column positions"),
    (None, '[1, 0]', "ignore_orders must be true or false"),
])
def test_bad_options_are_named_as_options(cols: str | None, ignore: str | None,
                                          reason: str) -> None:
    """The loader's reason, worded for the command line (never "evaluation config")."""
    with pytest.raises(UserError) as caught:
        params_from_options(Path("g.duckdb"), "a,b", cols, ignore)
    assert caught.value.message == f"bad score options: {reason}"
    assert "evaluation config" not in str(caught.value)

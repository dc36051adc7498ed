"""Resources are found in the source checkout; a missing one is a one-line user error."""

from __future__ import annotations

from pathlib import Path

import pytest

from spider2local import resources
from spider2local.exceptions import UserError


def test_checkout_resources_are_found() -> None:
    assert (resources.prompts_dir()).is_dir()
    assert resources.resource_dir("tasks.toml").is_file()


def test_missing_resource_is_a_user_error_with_the_fix(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "_PACKAGE_DIR", tmp_path / "site-packages" / "spider2local")
    with pytest.raises(UserError) as info:
        resources.skills_dir()
    message = str(info.value)
    assert "resource 'skills' is missing" in message and "reinstall spider2local" in message
    assert "\n" not in message


def test_missing_resource_is_still_a_file_not_found_for_optional_callers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "_PACKAGE_DIR", tmp_path)
    with pytest.raises(FileNotFoundError):
        resources.faketime_dir()

"""Choosing the isolation of a run: probe once, fall back or refuse, say why and how to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from spider2local.core.codec import dump
from spider2local.exceptions import UserError
from spider2local.sandbox import probe as probe_mod
from spider2local.sandbox.isolation import IsolationMode, choose_isolation
from spider2local.sandbox.probe import Probe
from spider2local.suite.options import Isolation

BROKEN = Probe(False, "AppArmor restricts unprivileged user namespaces",
               "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")


def test_auto_falls_back_to_none_with_a_one_line_warning() -> None:
    choice = choose_isolation(Isolation.AUTO, sandboxed=True, agent="claude",
                              check=lambda: BROKEN)
    assert choice.mode is IsolationMode.NONE and choice.reason == BROKEN.reason
    assert choice.warning is not None and "\n" not in choice.warning
    assert "apparmor_restrict_unprivileged_userns=0" in choice.warning
    assert dump(choice.record) == {"requested": "auto", "mode": "none", "reason": BROKEN.reason}
    ok = choose_isolation(Isolation.AUTO, sandboxed=True, agent="claude",
                          check=lambda: Probe(True))
    assert ok.mode is IsolationMode.NAMESPACE and ok.warning is None


def test_namespace_refuses_to_start_without_it() -> None:
    with pytest.raises(UserError) as info:
        choose_isolation(Isolation.NAMESPACE, sandboxed=True, agent="claude",
                         check=lambda: BROKEN)
    text = str(info.value)
    assert "\n" not in text and BROKEN.reason in text and BROKEN.fix in text


def test_none_and_agents_without_untrusted_code_never_probe() -> None:
    def boom() -> Probe:
        raise AssertionError("probed")

    assert choose_isolation(Isolation.NONE, sandboxed=True, agent="claude",
                            check=boom).mode is IsolationMode.NONE
    for requested in Isolation:
        choice = choose_isolation(requested, sandboxed=False, agent="reference", check=boom)
        assert choice.mode is IsolationMode.NOT_NEEDED and "reference" in choice.reason


@pytest.mark.parametrize(("sysctl", "value", "fix"), [
    ("APPARMOR_SYSCTL", "1", "kernel.apparmor_restrict_unprivileged_userns=0"),
    ("DEBIAN_SYSCTL", "0", "kernel.unprivileged_userns_clone=1"),
    ("MAX_USERNS", "0", "user.max_user_namespaces"),
])
def test_a_failed_probe_names_the_kernel_setting_to_change(
        sysctl: str, value: str, fix: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("APPARMOR_SYSCTL", "DEBIAN_SYSCTL", "MAX_USERNS"):
        monkeypatch.setattr(probe_mod, name, tmp_path / f"absent-{name}")
    (tmp_path / sysctl).write_text(value + "\n")
    monkeypatch.setattr(probe_mod, sysctl, tmp_path / sysctl)
    found = probe_mod._diagnose("unshare: write failed /proc/self/uid_map: Operation not permitted")
    assert not found.ok and fix in found.fix
    other = tmp_path / "other"
    monkeypatch.setattr(probe_mod, sysctl, other)
    generic = probe_mod._diagnose("unshare: unshare failed: Operation not permitted\n")
    assert "Operation not permitted" in generic.reason and "--isolation none" in generic.fix


def test_the_probe_is_asked_once_per_process() -> None:
    assert probe_mod.probe() is probe_mod.probe()

"""Does the sandbox work on this machine? Asked once per process, by building a real one.

Reading sysctls alone cannot answer it (containers, seccomp filters and kernels differ in what
they refuse), so :func:`probe` starts the real launcher around ``/bin/sh -c 'exit 0'``: if that
runs, the user, mount, PID and network namespaces, the mounts, ``pivot_root``, the nested
namespace and the network seal's relay all work. When it does not, the sysctls only serve to
name the cause and its fix.
"""

from __future__ import annotations

import functools
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from spider2local.proc.tempdirs import owned_tempdir
from spider2local.sandbox.launcher import Launcher, SandboxError, SandboxSpec
from spider2local.sandbox.network import NetworkSeal

PROBE_TIMEOUT = 20.0
APPARMOR_SYSCTL = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
DEBIAN_SYSCTL = Path("/proc/sys/kernel/unprivileged_userns_clone")
MAX_USERNS = Path("/proc/sys/user/max_user_namespaces")


@dataclass(frozen=True)
class Probe:
    """The answer: ``ok``, or the reason it does not work and how to fix it."""

    ok: bool
    reason: str = ""
    fix: str = ""


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _diagnose(stderr: str) -> Probe:
    """Name the cause of a failed probe from the kernel's settings and the tool's message."""
    first = next((line.strip() for line in stderr.splitlines() if line.strip()), "no message")
    if _read(APPARMOR_SYSCTL) == "1":
        return Probe(False, "AppArmor restricts unprivileged user namespaces "
                            "(kernel.apparmor_restrict_unprivileged_userns=1)",
                     "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0")
    if _read(DEBIAN_SYSCTL) == "0":
        return Probe(False, "unprivileged user namespaces are disabled "
                            "(kernel.unprivileged_userns_clone=0)",
                     "sudo sysctl -w kernel.unprivileged_userns_clone=1")
    if _read(MAX_USERNS) == "0":
        return Probe(False, "user namespaces are disabled (user.max_user_namespaces=0)",
                     "sudo sysctl -w user.max_user_namespaces=10000")
    return Probe(False, f"the namespace sandbox failed: {first}",
                 "run where unprivileged user namespaces are allowed (not inside a "
                 "restricted container), or use --isolation none")


def _try(spec: SandboxSpec) -> subprocess.CompletedProcess[str] | Probe:
    """Start the launcher of ``spec`` around ``exit 0``; a Probe when it could not start."""
    try:
        launcher = Launcher(spec)
    except SandboxError as exc:
        return Probe(False, str(exc), "install util-linux (unshare, mount, pivot_root)")
    try:
        return subprocess.run([*launcher.argv, "-c", "exit 0"], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT, check=False, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe(False, f"the namespace sandbox could not start: {exc}",
                     "use --isolation none")
    finally:
        launcher.remove()


def run_probe() -> Probe:
    """Build one sandbox around a no-op, network sealed (its own network namespace, loopback
    up, the relay listening, a Unix socket bound in), and report (uncached; see
    :func:`probe`). When only the seal fails, the plain sandbox is tried to say so."""
    if not sys.platform.startswith("linux"):
        return Probe(False, f"no Linux namespaces on {sys.platform}",
                     "run on Linux for isolation, or use --isolation none")
    # the folder named as the gateway's (the longest socket path a session binds: the
    # database tools' socket, spider2local.dbtools.endpoint, is no longer), so a TMPDIR that
    # passes here fits every socket of a session
    with owned_tempdir("gateway") as folder, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        try:
            listener.bind(str(Path(folder) / "api.sock"))
        except OSError as exc:  # a TMPDIR too long for a socket path (108 bytes on Linux)
            return Probe(False, f"cannot bind the model gateway's Unix socket in {folder}: "
                                f"{exc.strerror or exc}",
                         "set TMPDIR to a shorter folder (e.g. /tmp), or use --isolation none")
        listener.listen(1)
        sealed = _try(SandboxSpec(program=Path("/bin/sh"),
                                  network=NetworkSeal(Path(folder) / "api.sock")))
    if isinstance(sealed, Probe):
        return sealed
    if sealed.returncode == 0:
        return Probe(True)
    plain = _try(SandboxSpec(program=Path("/bin/sh")))
    if isinstance(plain, Probe) or plain.returncode != 0:
        return plain if isinstance(plain, Probe) else _diagnose(plain.stderr)
    first = next((line.strip() for line in sealed.stderr.splitlines() if line.strip()),
                 "no message")
    return Probe(False, f"the network seal failed (its own network namespace and a relay to "
                        f"the model gateway): {first}",
                 "run where network namespaces are allowed inside user namespaces, or use "
                 "--isolation none")


@functools.cache
def probe() -> Probe:
    """:func:`run_probe`, once per process: a run asks it once, ``doctor`` too."""
    return run_probe()

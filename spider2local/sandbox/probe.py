"""Does the sandbox work on this machine? Asked once per process, by building a real one.

Reading sysctls alone cannot answer it (containers, seccomp filters and kernels differ in what
they refuse), so :func:`probe` starts the real launcher around ``/bin/sh -c 'exit 0'``: if that
runs, the user, mount, PID and network namespaces, the mounts, ``pivot_root``, the nested
namespace and the network seal's relay all work. When it does not, the sysctls only serve to
name the cause and its fix.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spider2local.exceptions import Spider2LocalError
from spider2local.proc.tempdirs import owned_tempdir
from spider2local.sandbox.launcher import Launcher, SandboxError, SandboxSpec, decisive_line
from spider2local.sandbox.network import RELAY_PORT, NetworkSeal

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
    first = decisive_line(stderr) if stderr.strip() else "no message"
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
        done = subprocess.run([*launcher.argv, "-c", "exit 0"], capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT, check=False, cwd="/")
        if done.returncode != 0:  # the launcher's own messages (an outer unshare's too)
            done.stderr = (launcher.setup_messages() or "") + done.stderr
        return done
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
    first = decisive_line(sealed.stderr) if sealed.stderr.strip() else "no message"
    return Probe(False, f"the network seal failed (its own network namespace and a relay to "
                        f"the model gateway): {first}",
                 "run where network namespaces are allowed inside user namespaces, or use "
                 "--isolation none")


@functools.cache
def probe() -> Probe:
    """:func:`run_probe`, once per process: a run asks it once, ``doctor`` too."""
    return run_probe()


AGENT_CHECK_REPLY = b"spider2local-gateway-ok"
"""What the stand-in gateway of :func:`check_agent_sandbox` answers; the command inside prints
it back, so an answer proves the sealed network's one way out works."""
_AGENT_CHECK = r"""
import os, socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as s:
    s.sendall(b"ping")
    got = s.recv(64)
seen = [p for p in sys.argv[2:] if os.path.lexists(p)]
print(got.decode(errors="replace"), "visible:" + ",".join(seen))
"""


def check_agent_sandbox(hidden: Sequence[Path], start_dir: str) -> Probe:
    """Build the sandbox an agent gets (:func:`~spider2local.sandbox.spec.agent_spec`: the
    runtime, the system, a workspace laid out as a run lays one (``start_dir``: the folder of
    its start copy, hidden), ``hidden`` (what a run hides) and the always hidden paths, the
    network sealed to a gateway's socket) and run one command inside: it must
    reach the gateway through the relay and see nothing of what is hidden (the workspace's
    start copy, the spider2local package). ``doctor`` says ok only if this worked: the
    capability probe (:func:`probe`) builds a bare sandbox, which worked where every agent's
    failed (a wheel's layout, a non-root user: issue 27)."""
    from spider2local.sandbox.spec import agent_spec, installed_package

    if not sys.platform.startswith("linux"):
        return Probe(False, f"no Linux namespaces on {sys.platform}",
                     "run on Linux for isolation, or use --isolation none")
    with owned_tempdir("gateway") as gateway, owned_tempdir("doctor") as root, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        ws = Path(root)
        start = ws / start_dir
        start.mkdir()
        (start / "start.duckdb").write_bytes(b"not for the agent")
        (ws / "project").mkdir()
        try:
            listener.bind(str(Path(gateway) / "api.sock"))
        except OSError as exc:
            return Probe(False, f"cannot bind the model gateway's Unix socket in {gateway}: "
                                f"{exc.strerror or exc}",
                         "set TMPDIR to a shorter folder (e.g. /tmp), or use --isolation none")
        listener.listen(4)
        server = threading.Thread(target=_answer_once, args=(listener,), daemon=True)
        server.start()
        package = installed_package()  # its scorer; the dbt shim of a wheel stays visible
        secrets = [start / "start.duckdb", package / "__init__.py", package / "evaluation"]
        try:
            spec = agent_spec(Path(os.path.realpath("/bin/sh")), [ws],
                              hidden=(*hidden, start),
                              network=NetworkSeal(Path(gateway) / "api.sock"))
            launcher = Launcher(spec)
        except SandboxError as exc:
            return Probe(False, str(exc), "install util-linux (unshare, mount, pivot_root)")
        except Spider2LocalError as exc:  # the runtime it binds is incomplete (no libfaketime)
            return Probe(False, f"the agent's sandbox cannot be planned: {exc}",
                         "the fix named there")
        try:
            command = shlex.join([sys.executable, "-I", "-S", "-c", _AGENT_CHECK,
                                  str(RELAY_PORT), *map(str, secrets)])
            done = subprocess.run([*launcher.argv, "-c", command], capture_output=True,
                                  text=True, timeout=PROBE_TIMEOUT, check=False,
                                  cwd=ws / "project")
            failure = launcher.failure() if done.returncode != 0 else None
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Probe(False, f"the agent's sandbox could not start: {exc}",
                         "use --isolation none")
        finally:
            launcher.remove()
    if failure is not None:
        return Probe(False, failure, _REPORT)
    words = done.stdout.split()
    if done.returncode != 0 or not words or words[0] != AGENT_CHECK_REPLY.decode():
        last = decisive_line(done.stderr) if done.stderr.strip() else f"exit {done.returncode}"
        return Probe(False, f"the agent's sandbox did not reach its gateway: {last}", _REPORT)
    if words[-1] != "visible:":
        return Probe(False, f"the agent's sandbox shows what it must hide: {words[-1]}", _REPORT)
    return Probe(True)


_REPORT = ("a bug of spider2local's sandbox on this machine: report it with this line; "
           "meanwhile --isolation none runs agents unsealed")


def _answer_once(listener: socket.socket) -> None:
    """The stand-in gateway: answer the first connection with :data:`AGENT_CHECK_REPLY`."""
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    with conn:
        conn.settimeout(10)
        with contextlib.suppress(OSError):
            conn.recv(64)
            conn.sendall(AGENT_CHECK_REPLY)

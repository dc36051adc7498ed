"""The sandbox launcher: a small shell script, usable as the SDK's ``cli_path``, that starts a
program in new user, mount and PID namespaces with a new root holding only what it needs.

Why a new root and not "hide what is secret": a list of secrets is never complete (a second
runs folder, a copy of gold in a home folder); a list of what the agent needs is short and
checkable. So the script, inside ``unshare --user --map-root-user --mount --pid --fork``
(util-linux; no root, no setuid helper):

1. mounts an empty tmpfs as the new root, binds into it read-only the system folders, the
   Python environment, the CLI, the dbt shim and libfaketime, read-write the task workspace, a
   private ``/tmp``, ``/dev/shm`` and a minimal ``/dev``, and a fresh ``/proc`` (its ``sys``
   read-only); a path that must stay hidden but lies under a bound folder gets an empty tmpfs;
2. ``pivot_root``\\ s into it and detaches the old root (``chroot`` would be escapable by a
   root with CAP_SYS_CHROOT: nothing of the old tree stays reachable after pivot_root);
3. enters a NESTED user and mount namespace before exec'ing the program. The agent is uid 0
   with CAP_SYS_ADMIN over its own namespaces: in the first mount namespace it could unmount a
   tmpfs or remount a read-only bind read-write. Mounts copied into a mount namespace of a less
   privileged user namespace are MNT_LOCKED by the kernel: they cannot be unmounted, separated
   or have their read-only, nosuid or nodev flags cleared. New mounts it makes only cover things.

The program is PID 1 of the new PID namespace: when it dies, the kernel kills every process in
the namespace (``nohup`` and ``setsid`` children included), and ``--kill-child`` kills it when
the launcher itself is killed. Generated per session into a runner-private folder outside the
workspace (mode 0700; absent inside the sandbox), then removed.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import shlex
import shutil
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from spider2local.exceptions import Spider2LocalError
from spider2local.proc.run import pdeathsig_wrapper
from spider2local.proc.tempdirs import make_owned_dir
from spider2local.safepath import is_within
from spider2local.sandbox.network import NetworkSeal, start_relay, unshare_flags

INSIDE_FLAG = "--spider2local-inside"
"""The launcher re-runs itself with this first argument once inside the namespaces."""
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Read-only in every sandbox (those that exist; merged-usr symlinks are recreated as links).
Not ``/opt`` (where datasets, old runs and zips end up; the runtime's own folders are bound by
name when they lie there) and not ``/etc`` whole (see :data:`ETC_ALLOWED`)."""
ETC_ALLOWED = (
    # measured with strace (README, Isolation): the bundled Claude CLI and its Bash tool
    "passwd", "group", "nsswitch.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "localtime", "timezone", "machine-id", "gitconfig", "profile", "profile.d", "bash.bashrc",
    "inputrc", "environment", "alternatives", "terminfo", "claude-code", "os-release",
    # TLS and name resolution for the real API (unused against the loopback fake)
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "resolv.conf", "hosts",
    "host.conf", "gai.conf", "services", "protocols", "mime.types",
    # a Debian system Python's own configuration (sitecustomize)
    "python3*",
)
"""What of ``/etc`` a sandbox holds: what the CLI, its shell tools, Python and dbt open
(dbt and Python alone: ``ld.so.cache`` and ``localtime``). Not ``shadow``, ``ssh``, ``sudoers``
or any other host secret, nor anything a user may have put there."""
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
"""The only device nodes inside: what shells, Python and the CLI open. Not the host's /dev."""
TOOLS = ("unshare", "mount", "umount", "pivot_root")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LAUNCHER_NAME = "launch"
ROOT_NAME = "root"


class SandboxError(Spider2LocalError):
    """The sandbox cannot be built here (a util-linux tool is missing)."""


class Kind(StrEnum):
    READ_ONLY = "ro"
    WRITABLE = "rw"
    HIDDEN = "hide"
    """An empty tmpfs over a path that lies under a bound folder."""
    HIDDEN_FILE = "hidefile"
    """``/dev/null`` over a file that lies under a bound folder (a zip, a suite file): it reads
    as empty."""
    PRIVATE = "tmp"
    """A fresh, writable tmpfs (``/tmp``, ``/dev/shm``)."""


@dataclass(frozen=True)
class Mount:
    path: Path
    kind: Kind


@dataclass(frozen=True)
class SandboxSpec:
    """What one sandbox holds. Paths are absolute; the program sees each at its own path."""

    program: Path
    """What runs inside (the bundled Claude CLI)."""
    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()
    """Paths that must stay absent: only acted on when they lie under a bound folder."""
    unset_env: tuple[str, ...] = ()
    """Variables to remove before exec (the SDK can only blank inherited ones)."""
    extra_system: tuple[Path, ...] = field(default=())
    """Additional read-only folders of the system (found at build time, e.g. DNS config)."""
    network: NetworkSeal | None = None
    """Cut the network to a relay to the model gateway (:mod:`.network`); None: the host's."""
    services: tuple[Service, ...] = ()
    """Started in the background inside the sandbox, just before the program (the warm dbt
    server): they see exactly what the program sees and die with its PID namespace."""


@dataclass(frozen=True)
class Service:
    """A background process of the sandbox: its argv, environment and log file (stdout and
    stderr; stdin is /dev/null, so it never holds the program's pipes open)."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    log: Path
    pidfile: Path | None = None
    """Where its pid is written before the program starts: a caller of the service can then
    tell "still starting" from "not there" however soon the program calls it."""


def _tool(name: str) -> str:
    found = shutil.which(name) or next((f"{d}/{name}" for d in ("/usr/bin", "/usr/sbin",
                                                                "/bin", "/sbin")
                                        if os.access(f"{d}/{name}", os.X_OK)), None)
    if found is None:
        raise SandboxError(f"util-linux `{name}` not found on PATH")
    return found


def tools() -> dict[str, str]:
    """Absolute paths of the util-linux tools the launcher runs (raises SandboxError), and
    ``setpriv`` where it works (the death signal; see :func:`death_signal`)."""
    found = {name: _tool(name) for name in TOOLS}
    wrapper = pdeathsig_wrapper()
    if wrapper:
        found["setpriv"] = wrapper[0]
    return found


def _absolute(paths: Iterable[Path]) -> list[Path]:
    """Each path as given (made absolute, not resolved) and its real path when they differ:
    scripts name the venv through its own path (shebangs), the kernel binds the real one."""
    found: dict[Path, None] = {}  # ordered and O(1) per test: hidden lists run to hundreds
    for raw in paths:
        given = Path(os.path.abspath(raw))  # noqa: PTH100 (resolve() would follow links)
        real = Path(os.path.realpath(raw))
        for p in (given, real):
            if p != Path("/"):
                found.setdefault(p)
    return list(found)


def etc_paths(etc: Path = Path("/etc")) -> list[Path]:
    """The entries of ``/etc`` in :data:`ETC_ALLOWED` that exist. They are COPIED into the new
    root (``cp -a``: symlinks stay symlinks, ``localtime -> /usr/share/zoneinfo/...`` resolves
    inside), not bound: one bind and one remount per entry were some 40 more ``mount`` calls
    per sandbox, 1.7 s under a load average of 20 (measured); one ``cp`` is a few ms."""
    try:
        names = sorted(p.name for p in etc.iterdir())
    except OSError:
        return []
    return [etc / name for name in names
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in ETC_ALLOWED)]


def system_paths() -> tuple[list[Path], list[tuple[Path, str]]]:
    """The host's system folders to bind read-only, and the top-level symlinks to recreate
    (merged-usr systems have ``/bin -> usr/bin``); ``/etc`` is :func:`etc_paths`."""
    binds: list[Path] = []
    links: list[tuple[Path, str]] = []
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            links.append((path, str(path.readlink())))
        elif path.is_dir():
            binds.append(path)
    resolv = Path(os.path.realpath("/etc/resolv.conf"))
    if resolv.exists() and resolv.parent != Path("/etc") \
            and not any(is_within(resolv, b) for b in binds):
        binds.append(resolv.parent)  # e.g. /run/systemd/resolve: DNS for the real API
    return binds, links


def plan_mounts(spec: SandboxSpec, system: Sequence[Path] = ()) -> list[Mount]:
    """The bind and tmpfs mounts, parents before children.

    A read-only path already visible through a read-only parent is not bound twice, unless a
    hidden path between them covers it. A hidden path only needs a tmpfs when some bound path
    contains it; elsewhere it is simply not in the new root.
    """
    ro = _absolute([*system, *spec.extra_system, *spec.read_only])
    rw = _absolute(spec.writable)
    # Only what exists: a tmpfs needs a mount point, and a folder bound read-only cannot get
    # a new one (the launcher would stop).
    bound = [*ro, *rw]
    # A path that is not there hides nothing, nor does its real path (a missing path's real
    # path is missing too): one lstat in C each, before realpath's Python walk of every
    # component. The hidden list holds every runs folder this machine remembers (up to 1000,
    # x 3 variants, mostly deleted): their realpaths took ~1 s of each plan under load.
    present = [h for h in spec.hidden if os.path.lexists(h)]
    hidden = [h for h in _absolute(present)
              if any(is_within(h, b) and h != b for b in bound) and (h.is_dir() or h.is_file())]
    mounts = [Mount(Path("/tmp"), Kind.PRIVATE)]
    mounts += [Mount(p, Kind.HIDDEN if p.is_dir() else Kind.HIDDEN_FILE) for p in hidden]
    mounts += [Mount(p, Kind.WRITABLE) for p in rw]
    for path in ro:
        cover = [b for b in ro if b != path and is_within(path, b)]
        between = [h for h in hidden if any(is_within(h, b) for b in cover) and is_within(path, h)]
        if cover and not between:
            continue
        mounts.append(Mount(path, Kind.READ_ONLY))
    unique = {m.path: m for m in reversed(mounts)}  # the first entry of a path wins
    return sorted(unique.values(), key=lambda m: (len(m.path.parts), str(m.path)))


_PRELUDE = r"""#!/bin/sh
# spider2local sandbox launcher, generated for one agent session (see spider2local/sandbox).
set -eu
if [ "${1-}" != "%(flag)s" ]; then
    exec %(deathsig)s%(unshare)s --user --map-root-user --mount --pid --fork --kill-child=SIGKILL \
        --propagation private%(net)s -- /bin/sh "$0" %(flag)s "$@"
fi
shift
R=%(root)s
here=$(pwd)
MOUNT=%(mount)s
spot() { if [ -d "$1" ]; then mkdir -p "$R$1"; else mkdir -p "$(dirname "$R$1")"; : > "$R$1"; fi; }
ro() { spot "$1"; $MOUNT --bind "$1" "$R$1"; $MOUNT -o remount,bind,ro,nosuid,nodev "$R$1"; }
rw() { spot "$1"; $MOUNT --bind "$1" "$R$1"; $MOUNT -o remount,bind,nosuid,nodev "$R$1"; }
tmp() { mkdir -p "$R$1"; $MOUNT -t tmpfs -o mode=1777,nosuid,nodev spider2local-tmp "$R$1"; }
hide() { mkdir -p "$R$1"; $MOUNT -t tmpfs -o mode=0755,size=64k spider2local-hidden "$R$1"; }
hidefile() { $MOUNT --bind /dev/null "$R$1"; }
etc() { mkdir -p "$R/etc"; cp -a "$@" "$R/etc/" 2>/dev/null || :; }
link() { mkdir -p "$(dirname "$R$1")"; ln -s "$2" "$R$1"; }
dev() { if [ -e "/dev/$1" ]; then : > "$R/dev/$1"; $MOUNT --bind "/dev/$1" "$R/dev/$1"; fi; }
$MOUNT -t tmpfs -o mode=0755 spider2local-root "$R"
"""

_FINISH = r"""mkdir -p "$R/dev" "$R/proc" "$R/.old"
$MOUNT -t tmpfs -o mode=0755,nosuid spider2local-dev "$R/dev"
for d in %(devices)s; do dev "$d"; done
mkdir "$R/dev/shm"
$MOUNT -t tmpfs -o mode=1777,nosuid,nodev spider2local-shm "$R/dev/shm"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
$MOUNT -t proc -o nosuid,nodev,noexec proc "$R/proc"
$MOUNT --bind "$R/proc/sys" "$R/proc/sys"
$MOUNT -o remount,bind,ro,nosuid,nodev,noexec "$R/proc/sys"
%(hidden_ro)s
$MOUNT -o remount,bind,ro "$R"
cd "$R"
%(pivot_root)s . .old
cd /
%(umount)s -l /.old
cd "$here"
%(relay)s
%(unset)s
exec %(unshare)s --user --map-root-user --mount -- %(exec)s "$@"
"""


def services_exec(spec: SandboxSpec, program: str) -> str:
    """How the nested namespace starts: the program alone, or first the spec's services in the
    background (in the same, nested, user and mount namespaces as the program: what the
    program cannot unmount, neither can they) and then the program as the same process, so it
    stays PID 1 of the sandbox."""
    if not spec.services:
        return program
    q = shlex.quote
    lines = []
    for service in spec.services:
        assignments = " ".join(f"{name}={q(value)}" for name, value in service.env
                               if _ENV_NAME.fullmatch(name))
        lines.append(f"env -i {assignments} {' '.join(q(a) for a in service.argv)} "
                     f"</dev/null >>{q(str(service.log))} 2>&1 &")
        if service.pidfile is not None:
            lines.append(f"echo $! >{q(str(service.pidfile))}")
    script = "\n".join([*lines, 'exec "$0" "$@"'])
    return f"/bin/sh -c {q(script)} {program}"


def death_signal(paths: dict[str, str]) -> str:
    """``setpriv --pdeathsig KILL`` before the outer ``unshare`` (the process the SDK starts):
    the SDK starts its CLI without the death signal the runner gives its other children, and
    a CLI that outlived a killed runner went on calling the API (8 requests in 8.5 s,
    measured). With it, the runner's death kills ``unshare``, whose ``--kill-child`` kills the
    program (PID 1 of the sandbox), whose death ends every process inside."""
    wrapper = paths.get("setpriv")
    return f"{shlex.quote(wrapper)} --pdeathsig KILL " if wrapper else ""


def network_binds(seal: NetworkSeal | None) -> list[Path]:
    """What a network seal binds read-only: the gateway's socket and the relay's interpreter
    (the runtime's; an agent's sandbox binds it anyway, a probe's would not)."""
    if seal is None:
        return []
    prefixes = dict.fromkeys([sys.prefix, sys.exec_prefix, sys.base_prefix,
                              sys.base_exec_prefix])
    return [seal.socket, seal.python, *(Path(p) for p in prefixes)]


def launcher_script(spec: SandboxSpec, root: Path, paths: dict[str, str] | None = None) -> str:
    """The launcher's text for ``spec``, building the new root at ``root`` (an empty folder
    outside everything the sandbox shows)."""
    paths = paths or tools()
    system, links = system_paths()
    mounts = plan_mounts(spec, system)
    q = shlex.quote
    lines = [_PRELUDE % {"flag": INSIDE_FLAG, "unshare": q(paths["unshare"]), "root": q(str(root)),
                         "mount": q(paths["mount"]), "deathsig": death_signal(paths),
                         "net": unshare_flags(spec.network)}]
    lines += [f"link {q(str(link))} {q(target)}" for link, target in links]
    etc = etc_paths()
    if etc:
        lines.append("etc " + " ".join(q(str(p)) for p in etc))
    lines += [f"{m.kind.value} {q(str(m.path))}" for m in mounts]
    hidden = [m for m in mounts if m.kind is Kind.HIDDEN]
    names = [n for n in spec.unset_env if _ENV_NAME.fullmatch(n)]
    lines.append(_FINISH % {
        "devices": " ".join(DEVICES),
        "hidden_ro": "\n".join(f'$MOUNT -o remount,ro "$R"{q(str(m.path))}' for m in hidden),
        "pivot_root": q(paths["pivot_root"]), "umount": q(paths["umount"]),
        "relay": start_relay(spec.network),
        "unset": f"unset {' '.join(names)}" if names else ":",
        "unshare": q(paths["unshare"]), "exec": services_exec(spec, q(str(spec.program)))})
    return "\n".join(lines)


class Launcher:
    """A launcher written into a fresh runner-private folder; :meth:`remove` deletes it.

    ``path`` is what the SDK runs as its CLI: it takes the CLI's arguments unchanged.
    """

    def __init__(self, spec: SandboxSpec, parent: Path | None = None) -> None:
        extra_ro = [Path(paths) for paths in tools().values()] + network_binds(spec.network)
        self.spec = dataclasses.replace(spec, read_only=(*spec.read_only, *extra_ro))
        self.folder = make_owned_dir("sandbox", parent)
        try:
            (self.folder / ROOT_NAME).mkdir()
            self.path = self.folder / LAUNCHER_NAME
            self.path.write_text(launcher_script(self.spec, self.folder / ROOT_NAME),
                                 encoding="utf-8")
            self.path.chmod(stat.S_IRWXU)
        except BaseException:
            self.remove()
            raise

    @property
    def argv(self) -> tuple[str, str]:
        """How our own code starts it: ``/bin/sh <script>``, what its ``#!/bin/sh`` line makes
        the kernel run anyway, except that nothing executes the file just written. Exec-ing
        it failed under load with "Text file busy" (ETXTBSY): a child another thread forked
        while the script was open for writing holds that descriptor until its own exec. A
        shell that reads the script does not care. (The SDK can only exec a ``cli_path``;
        its start retries instead: :func:`spider2local.proc.run.text_file_busy`.)"""
        return ("/bin/sh", str(self.path))

    def remove(self) -> None:
        """Delete the folder (the new root was only ever mounted inside the namespace, so
        what is left on the host is an empty folder and the script)."""
        shutil.rmtree(self.folder, ignore_errors=True)


class DeathWrapper:
    """Without a sandbox, the program still dies with the runner: a script (usable as the
    SDK's ``cli_path``) that execs it under ``setpriv --pdeathsig KILL``. None of this is a
    boundary (the program's children do not inherit the signal; the sweep and the gateway's
    closing stop them), only the death signal the SDK does not give."""

    def __init__(self, program: Path, wrapper: str) -> None:
        self.folder = make_owned_dir("cli")
        self.path = self.folder / LAUNCHER_NAME
        self.path.write_text(f"#!/bin/sh\nexec {shlex.quote(wrapper)} --pdeathsig KILL "
                             f"{shlex.quote(str(program))} \"$@\"\n", encoding="utf-8")
        self.path.chmod(stat.S_IRWXU)

    @classmethod
    def around(cls, program: Path) -> DeathWrapper | None:
        """The wrapper, or None where ``setpriv --pdeathsig`` does not work (doctor says so)."""
        wrapper = pdeathsig_wrapper()
        return cls(program, wrapper[0]) if wrapper else None

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

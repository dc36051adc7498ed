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

import atexit
import dataclasses
import fnmatch
import functools
import os
import re
import shlex
import shutil
import stat
import subprocess
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
    # measured with strace (docs/isolation.md): the bundled Claude CLI and its Bash tool
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
    return dict(_found_tools())


@functools.cache
def _found_tools() -> tuple[tuple[str, str], ...]:
    """:func:`tools`, looked up once per process (PATH searches and the ``setpriv`` probe were
    some 60 ms of every launcher under load, measured); a missing tool is not cached."""
    found = {name: _tool(name) for name in TOOLS}
    wrapper = pdeathsig_wrapper()
    if wrapper:
        found["setpriv"] = wrapper[0]
    return tuple(found.items())


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
    """:func:`_etc_paths`, listed once per process (matching every entry of ``/etc`` against
    the patterns was 40 ms per launcher under load, measured; what /etc holds does not change
    during a run)."""
    return list(_etc_paths(etc))


@functools.cache
def _etc_paths(etc: Path) -> tuple[Path, ...]:
    """The entries of ``/etc`` in :data:`ETC_ALLOWED` that exist. They are COPIED
    (:func:`etc_copy`), not bound one by one: one bind and one remount per entry were some 40
    more ``mount`` calls per sandbox, 1.7 s under a load average of 20 (measured)."""
    try:
        names = sorted(p.name for p in etc.iterdir())
    except OSError:
        return ()
    return tuple(etc / name for name in names
                 if any(fnmatch.fnmatchcase(name, pattern) for pattern in ETC_ALLOWED))


@functools.cache
def etc_copy() -> Path | None:
    """This process's copy of :func:`etc_paths` (``cp -a``: symlinks stay symlinks, so
    ``localtime -> /usr/share/zoneinfo/...`` resolves inside), bound read-only as every
    sandbox's ``/etc``. Made once, on first use, in a runner-private folder (0700; a kill -9's
    leftover is recovered by name), removed at exit. Copying the ~700 entries into each
    sandbox's root took 50-190 ms per session under load (measured); one bind is a few ms.
    None when nothing of ``/etc`` is allowed."""
    entries = etc_paths()
    if not entries:
        return None
    folder = make_owned_dir("etc")
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:  # not in a forked child that exits
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)
    target = folder / "etc"
    target.mkdir(mode=0o755)
    # an entry that cannot be read is left out, as the per-session copy did
    subprocess.run([shutil.which("cp") or "/bin/cp", "-a", *map(str, entries), str(target)],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=False)
    return target


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


def _shown_by_a_bind(path: Path, bound: Sequence[Path], hidden: Sequence[Path]) -> bool:
    """Whether ``path`` would be visible without a mount of its own: its nearest enclosing
    mount of the plan is a bind, not another hidden path's tmpfs. One inside a hidden folder
    is already gone, and its mount point is not in that empty tmpfs: a wheel's bundled
    ``_resources/tasks.toml`` lies inside the hidden package, and ``mount --bind /dev/null``
    over it stopped every sandbox with "mount point does not exist" (issue 27)."""
    # (depth, 1 for a tmpfs): the deepest wins, and a path both bound and hidden is hidden,
    # as the plan's first-entry-wins rule makes it
    enclosing = [(len(b.parts), 0) for b in bound if is_within(path, b) and b != path]
    enclosing += [(len(h.parts), 1) for h in hidden if is_within(path, h) and h != path]
    return max(enclosing, default=(0, 1))[1] == 0


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
    candidates = [h for h in _absolute(present)
                  if any(is_within(h, b) and h != b for b in bound)
                  and (h.is_dir() or h.is_file())]
    hidden = [h for h in candidates if _shown_by_a_bind(h, bound, candidates)]
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
    exec 8>&2 2>%(log)s
    exec %(deathsig)s%(unshare)s --user --map-root-user --mount --pid --fork --kill-child=SIGKILL \
        --propagation private%(net)s -- /bin/sh "$0" %(flag)s "$@"
fi
shift
exec 7>%(ready)s
trap 'cat %(log)s >&8 2>/dev/null || :' EXIT
R=%(root)s
here=$PWD
MOUNT=%(mount)s
%(bind)s
made() { [ -d "$R$1" ] || mkdir -p "$R$1"; }
spot() { if [ -d "$1" ]; then made "$1"; else made "${1%%/*}"; : > "$R$1"; fi; }
ro() { spot "$1"; bind "$1" "$R$1" ro,nosuid,nodev; }
rw() { spot "$1"; bind "$1" "$R$1" nosuid,nodev; }
tmp() { made "$1"; $MOUNT -t tmpfs -o mode=1777,nosuid,nodev spider2local-tmp "$R$1"; }
hide() { { made "$1" && $MOUNT -t tmpfs -o mode=0755,size=64k spider2local-hidden "$R$1"; } \
    || [ ! -d "$R$1" ]; }
hidefile() { $MOUNT --bind /dev/null "$R$1"; }
etc() { made /etc; bind "$1" "$R/etc" ro,nosuid,nodev; }
link() { ln -s "$2" "$R$1"; }
dev() { if [ -e "/dev/$1" ]; then : > "$R/dev/$1"; $MOUNT --bind "/dev/$1" "$R/dev/$1"; fi; }
$MOUNT -t tmpfs -o mode=0755 spider2local-root "$R"
"""

_FINISH = r"""$MOUNT -t tmpfs -o mode=0755,nosuid spider2local-dev "$R/dev"
for d in %(devices)s; do dev "$d"; done
mkdir "$R/dev/shm"
$MOUNT -t tmpfs -o mode=1777,nosuid,nodev spider2local-shm "$R/dev/shm"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
$MOUNT -t proc -o nosuid,nodev,noexec proc "$R/proc"
bind "$R/proc/sys" "$R/proc/sys" ro,nosuid,nodev,noexec
%(hidden_ro)s
$MOUNT -o remount,bind,ro "$R"
cd "$R"
%(pivot_root)s . .old
cd /
%(umount)s -l /.old
cd "$here"
%(relay)s
%(unset)s
exec %(unshare)s --user --map-root-user --mount -- /bin/sh -c %(exec)s %(program)s "$@"
"""


BIND_IN_ONE = 'bind() { $MOUNT --bind -o "$3" "$1" "$2"; }'
"""A bind mount and its flags in one ``mount`` call: util-linux 2.27 and later remount the
new bind with the given flags itself (the same two mount(2) calls as :data:`BIND_IN_TWO`), in
one process instead of two: some 10 fewer per sandbox, each 5-20 ms under load (measured)."""
BIND_IN_TWO = 'bind() { $MOUNT --bind "$1" "$2"; $MOUNT -o "remount,bind,$3" "$2"; }'
"""Older util-linux ignores flags given with ``--bind``: there the remount is its own call."""
_UTIL_LINUX = re.compile(r"util-linux (\d+)\.(\d+)")


@functools.cache
def bind_function(mount: str) -> str:
    """The launcher's ``bind SRC DST FLAGS``: one ``mount`` call where ``mount --version``
    says util-linux 2.27 or later, else (or when it says anything else) two."""
    try:
        done = subprocess.run([mount, "--version"], capture_output=True, text=True,
                              timeout=10, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return BIND_IN_TWO
    found = _UTIL_LINUX.search(done.stdout)
    if found is None or (int(found.group(1)), int(found.group(2))) < (2, 27):
        return BIND_IN_TWO
    return BIND_IN_ONE


READY_WORD = "ready"
"""What the launcher writes to its ready file once the sandbox is built
(:meth:`Launcher.failure`)."""
SETUP_LOG = "setup.log"
READY_FILE = "ready"


def program_stage(spec: SandboxSpec) -> str:
    """The script of the last stage, run by ``/bin/sh -c`` in the nested namespace with the
    program as ``$0``: say the sandbox is built (fd 7, the ready file opened before
    ``pivot_root``), give the program the caller's stderr back (fd 8; the setup's messages
    went to the setup log) and close both, start the spec's services in the background (in
    the same, nested, user and mount namespaces as the program: what the program cannot
    unmount, neither can they), then exec the program as the same process, so it stays PID 1
    of the sandbox. Nothing the agent starts inherits a descriptor of a host file."""
    q = shlex.quote
    lines = [f"echo {READY_WORD} >&7", "exec 7>&- 2>&8 8>&-"]
    for service in spec.services:
        assignments = " ".join(f"{name}={q(value)}" for name, value in service.env
                               if _ENV_NAME.fullmatch(name))
        lines.append(f"env -i {assignments} {' '.join(q(a) for a in service.argv)} "
                     f"</dev/null >>{q(str(service.log))} 2>&1 &")
        if service.pidfile is not None:
            lines.append(f"echo $! >{q(str(service.pidfile))}")
    return q("\n".join([*lines, 'exec "$0" "$@"']))


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


def _make_dirs(mounts: Sequence[Mount], container: Path | None,
               extra: Sequence[str] = ()) -> str:
    """One ``mkdir -p`` for the mount points that lie directly in ``container`` (a tmpfs of
    the plan; None: the new root), instead of one process per mount (each 5-20 ms under load,
    measured): the launcher's ``made`` then finds them. Points under a bind exist already
    (the plan only hides what exists); those under another tmpfs are made after it."""
    q = shlex.quote
    wanted: dict[str, None] = dict.fromkeys(extra)
    for m in mounts:
        if m.kind is Kind.HIDDEN_FILE or m.path == container:
            continue
        inside = [o.path for o in mounts if o.path != m.path and is_within(m.path, o.path)]
        nearest = max(inside, key=lambda p: len(p.parts), default=None)
        if nearest != container:
            continue
        point = m.path if m.kind in (Kind.PRIVATE, Kind.HIDDEN) or m.path.is_dir() \
            else m.path.parent
        if point != container and point != Path("/"):
            wanted.setdefault(str(point))
    if not wanted:
        return ":"
    return "mkdir -p " + " ".join(f'"$R"{q(p)}' for p in wanted)


def launcher_script(spec: SandboxSpec, root: Path, paths: dict[str, str] | None = None) -> str:
    """The launcher's text for ``spec``, building the new root at ``root`` (an empty folder
    outside everything the sandbox shows). Its setup messages go to :data:`SETUP_LOG` beside
    ``root`` (and, if it stops, to stderr too), and :data:`READY_FILE` gets
    :data:`READY_WORD` just before the program starts: :meth:`Launcher.failure`."""
    paths = paths or tools()
    system, links = system_paths()
    mounts = plan_mounts(spec, system)
    q = shlex.quote
    lines = [_PRELUDE % {"flag": INSIDE_FLAG, "unshare": q(paths["unshare"]), "root": q(str(root)),
                         "log": q(str(root.parent / SETUP_LOG)),
                         "ready": q(str(root.parent / READY_FILE)),
                         "mount": q(paths["mount"]), "deathsig": death_signal(paths),
                         "bind": bind_function(paths["mount"]),
                         "net": unshare_flags(spec.network)}]
    lines += [f"link {q(str(link))} {q(target)}" for link, target in links]
    lines.append(_make_dirs(mounts, None, ["/etc", "/dev", "/proc", "/.old"]))
    etc = etc_copy()
    if etc is not None:
        lines.append(f"etc {q(str(etc))}")
    hidden = [m for m in mounts if m.kind is Kind.HIDDEN]
    for m in mounts:
        path = q(str(m.path))
        if m.kind is Kind.HIDDEN:  # gone since the plan (another run's folder deleted): there
            # is nothing to hide, and its mount point cannot be made in a read-only bind; gone
            # while it is being hidden: the same (``hide`` and its remount say so)
            lines.append(f'if [ -d "$R"{path} ]; then hide {path}; H{hidden.index(m)}=1; fi')
        elif m.kind is Kind.HIDDEN_FILE:
            lines.append(f'if [ -f "$R"{path} ]; then hidefile {path}; fi')
        else:
            lines.append(f"{m.kind.value} {path}")
        if m.kind is Kind.PRIVATE:  # its mount points, made once it is mounted
            lines.append(_make_dirs(mounts, m.path))
    names = [n for n in spec.unset_env if _ENV_NAME.fullmatch(n)]
    lines.append(_FINISH % {
        "devices": " ".join(DEVICES),
        # a hidden folder removed on the host meanwhile (another run's, deleted by its user or
        # test) takes its mount with it here too: nothing is left to hide, no failure
        "hidden_ro": "\n".join(f'if [ -n "${{H{i}-}}" ]; then $MOUNT -o remount,bind,ro '
                               f'"$R"{q(str(m.path))} || [ ! -d "$R"{q(str(m.path))} ]; fi'
                               for i, m in enumerate(hidden)),
        "pivot_root": q(paths["pivot_root"]), "umount": q(paths["umount"]),
        # the relay outlives this script: it keeps no descriptor of a host file
        "relay": start_relay(spec.network) + (" 7>&- 8>&-" if spec.network else ""),
        "unset": f"unset {' '.join(names)}" if names else ":",
        "unshare": q(paths["unshare"]), "exec": program_stage(spec),
        "program": q(str(spec.program))})
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

    def failure(self) -> str | None:
        """Why the sandbox could not be built, or None when it was (the program started) or
        the launcher has not finished building it. Ask after the program ended badly, before
        :meth:`remove`: a sandbox that cannot be built is the machine's (or our mount plan's)
        fault, never the agent's, and its exit status (32 from ``mount``) must not read as the
        program's (issue 27)."""
        try:
            if (self.folder / READY_FILE).read_text(encoding="utf-8").strip() == READY_WORD:
                return None
        except OSError:
            pass
        text = self.setup_messages()
        if text is None:
            return None  # never started: its caller's own error says why
        line = decisive_line(text)
        why = f"sandbox could not be built: {line}"
        found = root_override_needed((*self.spec.read_only, *self.spec.writable), named_in=line)
        return why if found is None else f"{why} ({found})"

    def setup_messages(self) -> str | None:
        """What the launcher's tools (``unshare``, ``mount``, ...) said while building the
        sandbox; None when it never started."""
        try:
            return (self.folder / SETUP_LOG).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def remove(self) -> None:
        """Delete the folder (the new root was only ever mounted inside the namespace, so
        what is left on the host is an empty folder and the script)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def root_override_needed(paths: Iterable[Path], *, named_in: str | None = None) -> str | None:
    """Why a sandbox of root's cannot reach one of ``paths``, when that is the cause, else None.

    Root reads another user's private files (a cache folder of mode 0700, a dataset unpacked by
    another account) through CAP_DAC_OVERRIDE, which a user namespace grants only over files
    whose owner and group are both mapped into it; ``--map-root-user`` maps root alone. So
    ``sudo -E spider2local run`` over the invoking user's cache (the sample suite's gold is
    there) built no reader sandbox, each trial ending as infrastructure with only mount's
    "cannot mount ... read-only" to go on. Each path is walked as given and by its real path
    (the plan binds both; a link may lead into the private folder), component by component,
    with the permission rules of uid 0 and root's groups but without the override. A
    component with an ACL is not judged (its entries may let root in): this says only what is
    sure. ``named_in``: a failed mount's message; only paths it names are looked at. Only for
    root: anyone else's sandbox reaches what they can."""
    if os.geteuid() != 0:
        return None
    groups = {os.getegid(), *os.getgroups()}
    for path in paths:
        # the real path first: a link's own component stats as its target, so the given
        # path's walk would name the link where the folder at fault is the target
        walks = dict.fromkeys((Path(os.path.realpath(path)),
                               Path(os.path.abspath(path))))  # noqa: PTH100 (links kept)
        if named_in is not None and not any(str(w) in named_in for w in walks):
            continue
        for walk in walks:
            blocked = _blocked_part(walk, groups)
            if blocked is not None:
                part, st = blocked
                return (f"{part} is reachable by root only through its override of file "
                        f"permissions (owner uid {st.st_uid}, mode "
                        f"{stat.S_IMODE(st.st_mode):04o}), which root does not keep in the "
                        f"sandbox's user namespace: run spider2local as uid {st.st_uid}, or let "
                        "root in without the override (for a cache in another user's HOME, "
                        "sudo -H gives root a HOME of its own)")
    return None


def _blocked_part(path: Path, groups: set[int]) -> tuple[Path, os.stat_result] | None:
    """The first component of ``path`` that uid 0 without the override may not pass (a folder)
    or read (the last one), with its status; None when all may be, or when it cannot tell."""
    for part in (*reversed(path.parents), path):
        try:
            st = part.stat()
        except OSError:
            return None  # gone or not ours to judge: mount's own message stands
        if st.st_uid == 0 and st.st_gid == 0:
            continue  # owner and group mapped: the override applies
        try:
            if "system.posix_acl_access" in os.listxattr(part):
                return None  # an ACL may let root in: not judged
        except OSError:
            pass
        need = stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else stat.S_IROTH
        if st.st_uid == 0:  # the owner class alone applies, as the kernel checks
            shift = 6
        elif st.st_gid in groups:
            shift = 3
        else:
            shift = 0
        if not st.st_mode & (need << shift):
            return part, st
    return None


_HINTS = ("dmesg(1) may have more information",)
"""Lines util-linux adds after the message that says what failed."""


def decisive_line(stderr: str) -> str:
    """The line of a launcher's messages that says what failed: the first non-empty one that
    is not a generic hint, with the new root's host prefix kept (it names the mount point)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    useful = [line for line in lines if not any(h in line for h in _HINTS)]
    return (useful or lines or ["the launcher stopped without a message"])[0]


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

"""The namespace sandbox, attacked from inside with a real shell: what it shows, what it hides,
and every way a uid-0-in-its-namespace process could try to undo it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spider2local.proc.run import pdeathsig_wrapper
from spider2local.sandbox.launcher import (
    ROOT_NAME,
    Kind,
    Launcher,
    Mount,
    SandboxSpec,
    Service,
    launcher_script,
    plan_mounts,
    root_override_needed,
    tools,
)
from spider2local.sandbox.network import RELAY_PORT, NetworkSeal
from spider2local.sandbox.probe import probe

needs_namespaces = pytest.mark.skipif(not probe().ok, reason=f"no namespace sandbox here: "
                                                              f"{probe().reason}")


def test_plan_binds_parents_first_and_hides_only_what_a_bind_would_show(tmp_path: Path) -> None:
    venv, ws = tmp_path / "venv", tmp_path / "ws"
    for folder in (venv / "lib", venv / "pkg" / "shim", ws, tmp_path / "gold"):
        folder.mkdir(parents=True)
    (venv / "dbt_gold.zip").write_bytes(b"PK")
    spec = SandboxSpec(program=Path("/bin/sh"),
                       read_only=(venv, venv / "lib", venv / "pkg" / "shim"),
                       writable=(ws,),
                       hidden=(venv / "pkg", tmp_path / "gold", venv, venv / "dbt_gold.zip",
                               venv / "not-there"))
    mounts = plan_mounts(spec, [Path("/usr")])
    assert mounts[0] == Mount(Path("/tmp"), Kind.PRIVATE)
    kinds = {m.path: m.kind for m in mounts}
    assert kinds[venv] is Kind.READ_ONLY and kinds[ws] is Kind.WRITABLE
    assert venv / "lib" not in kinds  # visible through the venv already
    assert kinds[venv / "pkg"] is Kind.HIDDEN  # under a bind: covered by an empty tmpfs
    assert kinds[venv / "pkg" / "shim"] is Kind.READ_ONLY  # needed again under the hidden one
    assert tmp_path / "gold" not in kinds  # under no bind: simply absent from the new root
    assert kinds[venv / "dbt_gold.zip"] is Kind.HIDDEN_FILE  # a file: /dev/null over it
    assert venv / "not-there" not in kinds  # nothing to cover (and no mount point for it)
    order = [m.path for m in mounts]
    assert order.index(venv) < order.index(venv / "pkg") < order.index(venv / "pkg" / "shim")


def test_a_symlinked_path_is_bound_under_both_names(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    mounts = plan_mounts(SandboxSpec(program=Path("/bin/sh"), read_only=(tmp_path / "link",)))
    assert {m.path for m in mounts} >= {tmp_path / "link", real}


def test_hidden_links_and_missing_paths_plan_as_when_each_was_resolved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Missing hidden paths are dropped before realpath (their real path is missing too): the
    plan equals the one that resolved every path, for links into a bind, dangling links, links
    through links and paths under a missing folder."""
    bound = tmp_path / "bound"
    (bound / "runs" / "old").mkdir(parents=True)
    (bound / "gold.duckdb").write_bytes(b"x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "to-runs").symlink_to(bound / "runs")
    (outside / "to-gold").symlink_to(bound / "gold.duckdb")
    (outside / "dangling").symlink_to(bound / "gone")
    (outside / "chain").symlink_to(outside / "to-runs")
    hidden = (outside / "to-runs", outside / "to-gold", outside / "dangling",
              outside / "chain" / "old", outside / "to-runs" / "missing" / "deeper",
              tmp_path / "nowhere" / "runs", bound / "runs" / "gone")
    spec = SandboxSpec(program=Path("/bin/sh"), read_only=(bound,), hidden=hidden)
    planned = plan_mounts(spec)
    monkeypatch.setattr(os.path, "lexists", lambda _p: True)  # resolve every path, as before
    assert plan_mounts(spec) == planned
    kinds = {m.path: m.kind for m in planned}
    assert kinds[bound / "runs"] is Kind.HIDDEN
    # inside the hidden runs folder: already gone, and its mount point is not in that tmpfs
    assert bound / "runs" / "old" not in kinds
    assert kinds[bound / "gold.duckdb"] is Kind.HIDDEN_FILE


@pytest.fixture
def box(tmp_path: Path) -> Iterator[tuple[Launcher, Path, Path, Path]]:
    """A sandbox around /bin/sh: ``ws`` writable, ``lib`` read-only with a hidden ``lib/secret``,
    and a ``gold`` file beside them that is bound nowhere."""
    ws, lib, gold = tmp_path / "ws", tmp_path / "lib", tmp_path / "gold.duckdb"
    ws.mkdir()
    (lib / "secret").mkdir(parents=True)
    (lib / "secret" / "key.txt").write_text("hidden under a bind")
    (lib / "tool.txt").write_text("readable\n")
    gold.write_bytes(b"GOLD")
    launcher = Launcher(SandboxSpec(program=Path("/bin/sh"), read_only=(lib,), writable=(ws,),
                                    hidden=(lib / "secret", gold), unset_env=("RUNNER_SECRET",)))
    yield launcher, ws, lib, gold
    launcher.remove()


def inside(launcher: Launcher, ws: Path, script: str,
           **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(launcher.path), "-c", script], cwd=ws, capture_output=True,
                          text=True, timeout=30, check=False,
                          env={"PATH": "/usr/bin:/bin", **env})


def run_once(spec: SandboxSpec, ws: Path,
             script: str) -> tuple[subprocess.CompletedProcess[str], str | None]:
    """``script`` in a sandbox of ``spec`` built for it, and why it could not be built
    (:meth:`Launcher.failure`, asked before the launcher's folder is removed)."""
    launcher = Launcher(spec)
    try:
        return inside(launcher, ws, script), launcher.failure()
    finally:
        launcher.remove()


@pytest.mark.process
@needs_namespaces
def test_shows_the_workspace_and_bound_files_and_nothing_else(
        box: tuple[Launcher, Path, Path, Path]) -> None:
    launcher, ws, lib, gold = box
    done = inside(launcher, ws, f"""
        echo made > made.txt && echo wrote-ws
        cat {lib}/tool.txt
        ls -A {lib}/secret | wc -l
        test -e {gold} || echo no-gold
        ls -A {ws.parent}
        ls -A /tmp
        echo ${{RUNNER_SECRET-unset}}
        pwd
        """, RUNNER_SECRET="s3cret")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split()
    assert lines[:4] == ["wrote-ws", "readable", "0", "no-gold"]
    assert set(lines[4:6]) == {"lib", "ws"}  # the folder around them shows only the binds
    assert lines[-2:] == ["unset", str(ws)]
    assert (ws / "made.txt").read_text() == "made\n"  # writes land in the real workspace
    assert gold.read_bytes() == b"GOLD"


ATTACKS = {
    "umount the private /tmp": "umount /tmp",
    "lazy umount of /tmp": "umount -l /tmp",
    "umount the read-only lib": "umount -l {lib}",
    "umount the hiding tmpfs": "umount -l {lib}/secret && cat {lib}/secret/key.txt",
    "remount the hiding tmpfs read-write": "mount -o remount,rw {lib}/secret && "
                                           "touch {lib}/secret/x",
    "remount bind the hiding tmpfs read-write": "mount -o remount,bind,rw {lib}/secret && "
                                                "touch {lib}/secret/x",
    "write into the hiding tmpfs": "touch {lib}/secret/x",
    "umount the root": "umount -l /",
    "remount lib read-write": "mount -o remount,rw {lib} && touch {lib}/x",
    "remount bind lib read-write": "mount -o remount,bind,rw {lib} && touch {lib}/x",
    "remount /usr read-write": "mount -o remount,bind,rw /usr && touch /usr/x",
    "remount the root read-write": "mount -o remount,rw / && touch /x",
    "remount /proc/sys read-write": "mount -o remount,bind,rw /proc/sys",
    "write a read-only file": "echo x >> {lib}/tool.txt",
    "write /proc/sys": "echo spider > /proc/sys/kernel/hostname",
    "write sysrq": "echo h > /proc/sysrq-trigger",
    "bind the gold in": "mkdir -p /tmp/g && mount --bind {gold} /tmp/g && cat /tmp/g",
    "fresh proc to reach the host": "mkdir -p /tmp/p && mount -t proc proc /tmp/p && "
                                    "cat /tmp/p/1/root{gold}",
    "proc root of pid 1": "cat /proc/1/root{gold}",
    "nested namespace then umount": "unshare -Urm sh -c 'umount -l {lib}/secret && "
                                    "cat {lib}/secret/key.txt'",
    "chroot escape": "python3 -c \"import os; os.makedirs('/tmp/c', exist_ok=True); "
                     "os.chroot('/tmp/c'); os.chdir('../../../..'); "
                     "print(open('{gold}').read())\"",
    "nsenter pid 1": "nsenter -t 1 -m cat {gold}",
    "mknod a disk": "mknod /tmp/disk b 254 0",
    "kill the outside": "kill -9 {outside}",
    "signal the outside": "kill -0 {outside}",
    "read the outside environ": "grep -l OUTSIDE_SECRET /proc/*/environ",
    "pivot_root out": "mkdir -p /tmp/n && mount -t tmpfs n /tmp/n && mkdir /tmp/n/old && "
                      "cd /tmp/n && pivot_root . old && cat old{gold}",
}


@pytest.mark.process
@needs_namespaces
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attacks_from_inside_fail(attack: str, box: tuple[Launcher, Path, Path, Path]) -> None:
    launcher, ws, lib, gold = box
    outside = subprocess.Popen(["sleep", "60"], env={"OUTSIDE_SECRET": "k3y"})
    try:
        command = ATTACKS[attack].format(lib=lib, gold=gold, outside=outside.pid)
        done = inside(launcher, ws, f"{command} && echo ESCAPED")
        assert "ESCAPED" not in done.stdout, (attack, done.stdout, done.stderr)
        assert "k3y" not in done.stdout and "GOLD" not in done.stdout
        assert outside.poll() is None  # still alive
    finally:
        outside.kill()
        outside.wait()
    assert gold.read_bytes() == b"GOLD"
    assert (lib / "tool.txt").read_text() == "readable\n"
    assert not (lib / "x").exists()


@pytest.mark.process
@needs_namespaces
def test_sees_only_its_own_processes_and_they_all_die_with_it(
        box: tuple[Launcher, Path, Path, Path]) -> None:
    launcher, ws, _, _ = box
    token = "4242.125"
    proc = subprocess.Popen([str(launcher.path), "-c",
                             f"nohup setsid sleep {token} >/dev/null 2>&1 & "
                             "ls /proc | grep -c '^[0-9]' ; sleep 60"],
                            cwd=ws, stdout=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin"})
    assert proc.stdout is not None
    count = int(proc.stdout.readline())
    assert count <= 5  # sh (pid 1), the sleeper, ls, grep: none of the host's
    assert _alive_with(token)
    proc.kill()  # the launcher (what the SDK holds): --kill-child takes PID 1, PID 1 takes all
    proc.wait()
    deadline = time.monotonic() + 5
    while _alive_with(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive_with(token)


def _alive_with(token: str) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if token.encode() in cmd and state != "Z" and int(entry.name) != os.getpid():
                return True
    return False


def test_the_launcher_is_private_and_removed(tmp_path: Path) -> None:
    launcher = Launcher(SandboxSpec(program=Path("/bin/sh")), parent=tmp_path)
    assert launcher.path.stat().st_mode & 0o777 == 0o700
    assert launcher.folder.stat().st_mode & 0o777 == 0o700
    launcher.remove()
    assert not launcher.folder.exists()


@pytest.mark.process
@needs_namespaces
def test_a_service_runs_inside_beside_the_program_and_dies_with_it(tmp_path: Path) -> None:
    """The warm dbt server's way in: started before the program, in the same (nested)
    namespaces, with exactly its own environment, its output in its log; the program stays
    PID 1, so the service dies with the sandbox."""
    ws = tmp_path / "ws"
    ws.mkdir()
    log = ws / "service.log"
    nap = f"300.{uuid.uuid4().int % 10**6:06d}"  # this test's own: other tests sleep 300 too
    service = Service(("/bin/sh", "-c", f'echo "pid=$$ env=$SERVICE_VAR:${{RUNNER_SECRET-}}"; '
                                        f'touch {ws}/started; exec sleep {nap}'),
                      (("SERVICE_VAR", "it's mine"), ("PATH", "/usr/bin:/bin")), log,
                      pidfile=ws / "service.pid")
    launcher = Launcher(SandboxSpec(program=Path("/bin/sh"), writable=(ws,),
                                    services=(service,)))
    try:
        done = inside(launcher, ws, f"""
            echo "pidfile=$(cat {ws}/service.pid)"
            while ! test -e {ws}/started; do sleep 0.05; done
            echo "me=$$"
            ps -o args= | grep -cxF 'sleep {nap}'
        """, RUNNER_SECRET="leaked")
    finally:
        launcher.remove()
    assert done.returncode == 0, done.stderr
    assert "me=1" in done.stdout and "\n1\n" in done.stdout
    assert log.read_text().startswith("pid=") and "env=it's mine:\n" in log.read_text()
    # its pid was on disk before the program ran (a caller can tell starting from absent)
    pid = log.read_text().split()[0].removeprefix("pid=")
    assert f"pidfile={pid}\n" in done.stdout, (done.stdout, log.read_text())
    assert not any(f"sleep\0{nap}\0".encode() in p.read_bytes()
                   for p in Path("/proc").glob("[0-9]*/cmdline")
                   if p.exists())  # died with the sandbox


@pytest.mark.process
@needs_namespaces
def test_etc_holds_the_allow_list_only_and_opt_is_absent(
        box: tuple[Launcher, Path, Path, Path]) -> None:
    """``/etc`` is a copy of the allowed entries (no shadow, no ssh keys), ``/opt`` not bound."""
    launcher, ws, _, _ = box
    done = inside(launcher, ws, """
        head -1 /etc/passwd | cut -d: -f1
        test -e /etc/shadow || echo no-shadow
        test -e /etc/ssh || echo no-ssh
        test -e /opt || echo no-opt
        echo x >> /etc/passwd 2>/dev/null || echo etc-read-only
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["root", "no-shadow", "no-ssh", "no-opt", "etc-read-only"]


@pytest.mark.process
@needs_namespaces
def test_every_bind_carries_its_flags(box: tuple[Launcher, Path, Path, Path]) -> None:
    """The binds and their flags (one ``mount --bind -o`` call each on util-linux 2.27+, two
    calls before): read-only binds are ro,nosuid,nodev, the workspace nosuid,nodev, /etc and
    /proc/sys read-only, as the kernel reports them inside."""
    launcher, ws, lib, _ = box
    done = inside(launcher, ws, "cat /proc/self/mountinfo")
    assert done.returncode == 0, done.stderr
    flags = {f[4]: set(f[5].split(",")) for f in (line.split() for line in
                                                  done.stdout.splitlines())}
    for path in (str(lib), "/usr", "/etc"):
        assert {"ro", "nosuid", "nodev"} <= flags[path], (path, flags[path])
    assert {"rw", "nosuid", "nodev"} <= flags[str(ws)]
    assert {"ro", "noexec"} <= flags["/proc/sys"]
    assert "ro" in flags["/"]


@pytest.mark.process
def test_bind_in_one_call_only_where_util_linux_says_so(tmp_path: Path) -> None:
    from spider2local.sandbox.launcher import BIND_IN_ONE, BIND_IN_TWO, bind_function

    for version, expected in (("2.38.1", BIND_IN_ONE), ("2.27", BIND_IN_ONE),
                              ("2.26.2", BIND_IN_TWO), ("", BIND_IN_TWO)):
        fake = tmp_path / f"mount-{version or 'other'}"
        fake.write_text(f"#!/bin/sh\necho 'mount from util-linux {version} (libmount)'\n"
                        if version else "#!/bin/sh\necho 'mount: BusyBox'\n")
        fake.chmod(0o755)
        assert bind_function(str(fake)) == expected, version
    assert bind_function(str(tmp_path / "absent")) == BIND_IN_TWO


def test_etc_paths_follow_the_allow_list(tmp_path: Path) -> None:
    from spider2local.sandbox.launcher import etc_paths

    for name in ("passwd", "shadow", "python3.11", "sudoers"):
        (tmp_path / name).write_text("x")
    (tmp_path / "ssl").mkdir()
    assert [p.name for p in etc_paths(tmp_path)] == ["passwd", "python3.11", "ssl"]


def _serve_unix(path: Path, answer: bytes) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)

    def loop() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            with client:
                client.recv(1024)
                client.sendall(answer)

    threading.Thread(target=loop, daemon=True).start()
    return server


CONNECT = """import socket, sys
for port in sys.argv[1:]:
    try:
        with socket.create_connection(("127.0.0.1", int(port)), timeout=3) as s:
            s.sendall(b"hello")
            print(port, "GOT", s.recv(100).decode() or "EOF")
    except OSError as exc:
        print(port, "ERR", type(exc).__name__)
"""


@pytest.mark.process
@needs_namespaces
def test_a_sealed_sandbox_reaches_the_gateway_socket_through_the_relay_and_nothing_else(
        tmp_path: Path) -> None:
    """Only ``lo`` inside; the relay's port leads to the gateway's Unix socket; a server on
    the host's 127.0.0.1 is unreachable; once the socket's server is gone, the relay gives
    nothing (the runner died: nothing more is served)."""
    sock = tmp_path / "gw" / "api.sock"
    sock.parent.mkdir()
    gateway = _serve_unix(sock, b"FROM-GATEWAY")
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    host_port = host.getsockname()[1]
    launcher = Launcher(SandboxSpec(program=Path("/bin/sh"), network=NetworkSeal(sock)))
    try:
        script = (f"cat /proc/net/dev | tail -n +3 | cut -d: -f1; "
                  f"{sys.executable} -I -c '{CONNECT}' {RELAY_PORT} {host_port}")
        first = subprocess.run([str(launcher.path), "-c", script], capture_output=True,
                               text=True, timeout=60, check=False, cwd="/")
        gateway.shutdown(socket.SHUT_RDWR)  # wakes its accept(): the socket stops listening
        gateway.close()  # as after a kill -9 of the runner: the socket file stays, unserved
        after = subprocess.run([str(launcher.path), "-c",
                                f"{sys.executable} -I -c '{CONNECT}' {RELAY_PORT}"],
                               capture_output=True, text=True, timeout=60, check=False, cwd="/")
    finally:
        launcher.remove()
        host.close()
    assert first.returncode == 0, first.stderr
    lines = first.stdout.split("\n")
    assert lines[0].strip() == "lo" and lines[1].startswith(str(RELAY_PORT)), first.stdout
    assert lines[1] == f"{RELAY_PORT} GOT FROM-GATEWAY"
    assert lines[2].startswith(f"{host_port} ERR"), first.stdout
    assert after.returncode == 0, after.stderr
    assert "FROM-GATEWAY" not in after.stdout
    assert "GOT EOF" in after.stdout or "ERR" in after.stdout, after.stdout


def test_the_launcher_has_a_death_signal_and_a_sealed_one_its_relay() -> None:
    seal = NetworkSeal(Path("/tmp/x/api.sock"))
    sealed = Launcher(SandboxSpec(program=Path("/bin/sh"), network=seal))
    plain = Launcher(SandboxSpec(program=Path("/bin/sh")))
    try:
        text, other = sealed.path.read_text(), plain.path.read_text()
    finally:
        sealed.remove()
        plain.remove()
    if pdeathsig_wrapper():
        assert "--pdeathsig KILL" in text.split("/bin/sh \"$0\"")[0]
    assert " --net " in text and " --net " not in other
    # the relay starts after pivot_root (not before: its /proc/<pid>/root would be the host's)
    assert text.index("pivot_root") < text.index(str(RELAY_PORT)) < text.rindex("exec ")
    assert str(RELAY_PORT) not in other


@pytest.mark.process
@needs_namespaces
def test_a_sealed_sandbox_starts_its_services_after_the_relay_in_the_sealed_network(
        tmp_path: Path) -> None:
    """The warm dbt server in a sealed sandbox: in the program's network namespace (not the
    host's: only ``lo``), started once the relay listens (it reaches the gateway through it
    too), and the program is still PID 1."""
    sock = tmp_path / "gw" / "api.sock"
    sock.parent.mkdir()
    gateway = _serve_unix(sock, b"FROM-GATEWAY")
    ws = tmp_path / "ws"
    ws.mkdir()
    log = ws / "service.log"
    service = Service(("/bin/sh", "-c", f"readlink /proc/self/ns/net; "
                                        f"tail -n +3 /proc/net/dev | cut -d: -f1; "
                                        f"{sys.executable} -I -c '{CONNECT}' {RELAY_PORT}; "
                                        f"touch {ws}/started; exec sleep 300"),
                      (("PATH", "/usr/bin:/bin"),), log)
    launcher = Launcher(SandboxSpec(program=Path("/bin/sh"), writable=(ws,),
                                    network=NetworkSeal(sock), services=(service,)))
    try:
        done = inside(launcher, ws, f"""
            while ! test -e {ws}/started; do sleep 0.05; done
            echo "me=$$"
            readlink /proc/self/ns/net
        """)
    finally:
        launcher.remove()
        gateway.close()
    assert done.returncode == 0, done.stderr
    me, program_net = done.stdout.split()
    service_net, *rest = log.read_text().split("\n")
    assert me == "me=1"
    assert service_net == program_net != os.readlink("/proc/self/ns/net")
    assert rest[0].strip() == "lo" and rest[1] == f"{RELAY_PORT} GOT FROM-GATEWAY", rest


@pytest.mark.process
@needs_namespaces
def test_install_layouts_build_and_hide_what_they_must(tmp_path: Path) -> None:
    """The layouts users have (issue 27): a wheel's bundled suite file inside the hidden
    package inside a bound venv, whose dbt shim folder inside the package stays visible; a
    ``--user`` site-packages inside the hidden home; the workspace's hidden start copy. Each
    built (the wheel's stopped every sandbox: "mount point does not exist") and each hides or
    shows what it should."""
    venv, home, ws = tmp_path / "venv", tmp_path / "home", tmp_path / "ws"
    package = venv / "site-packages" / "spider2local"
    (package / "_resources" / "faketime").mkdir(parents=True)
    (package / "_resources" / "faketime" / "dbt").write_text("shim\n")
    (package / "_resources" / "tasks.toml").write_text("suite\n")
    (package / "evaluation").mkdir()
    user_site = home / ".local" / "lib" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "dep.py").write_text("dep\n")
    (home / "secret.txt").write_text("home secret\n")
    (ws / ".start").mkdir(parents=True)
    (ws / ".start" / "start.duckdb").write_text("start\n")
    spec = SandboxSpec(program=Path("/bin/sh"),
                       read_only=(venv, package / "_resources" / "faketime", user_site),
                       writable=(ws,),
                       hidden=(home, package, package / "_resources" / "tasks.toml",
                               ws / ".start", ws / ".start" / "start.duckdb"))
    launcher = Launcher(spec)
    try:
        done = inside(launcher, ws, f"""
            cat {package}/_resources/faketime/dbt {user_site}/dep.py
            for p in {package}/_resources/tasks.toml {package}/evaluation {home}/secret.txt \
                     {ws}/.start/start.duckdb; do test -e "$p" && echo "SEEN $p"; done
            touch {ws}/.start/x 2>/dev/null && echo WROTE-START
            echo end""")
        assert launcher.failure() is None
    finally:
        launcher.remove()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["shim", "dep", "end"], done.stdout


@pytest.mark.process
@needs_namespaces
def test_a_mount_that_fails_is_named_and_the_program_never_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ``mount`` failing (sent to a point that does not exist): the launcher stops
    before the program, says why on stderr, and :meth:`Launcher.failure` gives the mount's own
    line, not util-linux's generic hint. A sandbox that was built reports no failure, whatever
    the program's own exit status."""
    from tests.sandbox.test_probe import broken_mount

    ws = tmp_path / "ws"
    (ws / ".start").mkdir(parents=True)
    broken_mount(tmp_path / "bin", monkeypatch)
    done, failure = run_once(SandboxSpec(program=Path("/bin/sh"), writable=(ws,),
                                         hidden=(ws / ".start",)), ws, f"touch {ws}/ran")
    assert done.returncode != 0 and not (ws / "ran").exists()
    assert failure is not None and failure.startswith("sandbox could not be built: mount: ")
    assert failure.endswith("/.start/missing: mount point does not exist."), failure
    assert "mount point does not exist" in done.stderr  # also where the caller's stderr goes
    ok = Launcher(SandboxSpec(program=Path("/bin/sh"), writable=(ws,)))
    try:  # a program posing as a failed sandbox buys no re-run: failure() is the runner's
        done = inside(ok, ws, "echo 'mount: /x: mount point does not exist.' >&2; "
                              "for fd in /proc/*/fd/*; do echo x > $fd; done 2>/dev/null; "
                              "exit 32")
        assert done.returncode == 32 and ok.failure() is None
    finally:
        ok.remove()


@pytest.mark.process
@needs_namespaces
def test_a_hidden_path_gone_since_the_plan_is_no_failure(tmp_path: Path) -> None:
    """Another run's folder on the hidden list, deleted between the plan and the launch (its
    test or its user removed it): nothing is left to hide, so the sandbox builds (it stopped on
    "cannot create directory ... Read-only file system" and the trial was lost), and what is
    still there stays hidden."""
    lib, ws = tmp_path / "lib", tmp_path / "ws"
    (lib / "gone").mkdir(parents=True)
    (lib / "kept").mkdir()
    (lib / "kept" / "secret.txt").write_text("s")
    (lib / "gone.toml").write_text("x")
    ws.mkdir()
    launcher = Launcher(SandboxSpec(program=Path("/bin/sh"), read_only=(lib,), writable=(ws,),
                                    hidden=(lib / "gone", lib / "gone.toml", lib / "kept")))
    try:
        (lib / "gone").rmdir()
        (lib / "gone.toml").unlink()
        done = inside(launcher, ws, f"ls -A {lib}; ls -A {lib}/kept | wc -l")
        assert launcher.failure() is None
    finally:
        launcher.remove()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["kept", "0"]


REMOVING_MOUNT = """#!/bin/sh
# mount, except that where the launcher hides {folder}/early (its tmpfs) or makes {folder}/late
# read-only (the remount), the test's own process first removes that folder on the host
case "$*" in
    *spider2local-hidden*/early) want=early ;;
    *remount,bind,ro*/late) want=late ;;
    *) want= ;;
esac
if [ -n "$want" ]; then
    : > {signals}/want-$want
    while [ ! -e {signals}/gone-$want ]; do sleep 0.01; done
fi
exec {mount} "$@"
"""


@pytest.mark.process
@needs_namespaces
def test_a_hidden_folder_removed_while_the_sandbox_is_built_is_no_failure(
        tmp_path: Path) -> None:
    """The windows after the check of :func:`test_a_hidden_path_gone_since_the_plan_is_no_
    failure`: a hidden folder removed on the host between the check and its tmpfs, and one
    removed after its tmpfs (the kernel detaches that mount in the sandbox too) before the
    read-only remount. Seen in CI: one test's old runs folder, removed by that test while
    another test's sandbox was being built, cost the other trial ("mount point does not
    exist", a fault of the machine). Each removal happens exactly there: a ``mount`` in front
    of the real one asks this test to remove the folder and waits until it has (the removal
    must come from outside: in the sandbox's own namespace a mount point cannot be removed)."""
    lib, ws, signals = tmp_path / "lib", tmp_path / "ws", tmp_path / "signals"
    for name in ("early", "late", "kept"):
        (lib / name).mkdir(parents=True)
    (lib / "kept" / "secret.txt").write_text("s")
    ws.mkdir()
    signals.mkdir()
    wrapper = tmp_path / "mount"
    wrapper.write_text(REMOVING_MOUNT.format(folder=lib, signals=signals,
                                             mount=tools()["mount"]))
    wrapper.chmod(0o755)
    launcher = Launcher(SandboxSpec(program=Path("/bin/sh"), read_only=(lib,), writable=(ws,),
                                    hidden=(lib / "early", lib / "late", lib / "kept")))
    launcher.path.write_text(launcher_script(launcher.spec, launcher.folder / ROOT_NAME,
                                             {**tools(), "mount": str(wrapper)}))
    stop = threading.Event()

    def remove_when_asked() -> None:
        pending = {"early", "late"}
        while pending and not stop.is_set():
            for name in sorted(pending):
                if (signals / f"want-{name}").exists():
                    (lib / name).rmdir()
                    (signals / f"gone-{name}").touch()
                    pending.discard(name)
            time.sleep(0.01)

    remover = threading.Thread(target=remove_when_asked, daemon=True)
    remover.start()
    try:
        done = inside(launcher, ws, f"ls -A {lib}; ls -A {lib}/kept | wc -l")
        failure = launcher.failure()
    finally:
        stop.set()
        remover.join()
        launcher.remove()
    assert sorted(p.name for p in signals.iterdir()) == [
        "gone-early", "gone-late", "want-early", "want-late"]  # both windows were reached
    assert failure is None, failure
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["kept", "0"]  # what stays is still hidden


@pytest.mark.process
@needs_namespaces
def test_the_program_holds_no_descriptor_of_the_launchers_files(tmp_path: Path) -> None:
    """The setup log and the ready file are the runner's: the program (and its services, and
    the relay) get only stdin, stdout and stderr, and its stderr is the caller's again."""
    ws = tmp_path / "ws"
    ws.mkdir()
    launcher = Launcher(SandboxSpec(program=Path("/bin/sh"), writable=(ws,)))
    try:
        done = inside(launcher, ws, "ls /proc/self/fd; echo to-stderr >&2")
    finally:
        launcher.remove()
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == ["0", "1", "2", "3"]  # 3: ls's own directory
    assert done.stderr.strip() == "to-stderr"


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user (chown)")
NOBODY = 65534


def foreign_private(tmp_path: Path) -> Path:
    """A gold file in another user's private folder (mode 0700), as ``sudo -E`` finds the
    invoking user's cache: root reads it through CAP_DAC_OVERRIDE alone."""
    folder = tmp_path / "alice-cache"
    folder.mkdir()
    gold = folder / "gold.duckdb"
    gold.write_bytes(b"gold")
    os.chown(gold, NOBODY, NOBODY)
    os.chown(folder, NOBODY, NOBODY)
    folder.chmod(0o700)
    return gold


@needs_root
def test_root_override_needed_names_the_private_folder_of_another_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gold = foreign_private(tmp_path)
    found = root_override_needed([tmp_path, gold])
    assert found is not None and found.startswith(f"{gold.parent} is reachable by root only")
    assert f"owner uid {NOBODY}, mode 0700" in found and "sudo -H" in found
    gold.parent.chmod(0o755)  # others may enter: the sandbox reaches it without the override
    assert root_override_needed([gold]) is None
    gold.chmod(0o600)  # ... but not read the file itself
    found = root_override_needed([gold])
    assert found is not None and found.startswith(f"{gold} is reachable by root only")
    os.chown(gold, NOBODY, 0)
    gold.chmod(0o640)  # root's group may read it: mapped, so the mode bits suffice
    assert root_override_needed([gold]) is None
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)  # root's own private folder: the override stays (root is mapped)
    assert root_override_needed([mine, tmp_path / "not-there" / "x"]) is None
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # anyone else reaches what they can
    gold.chmod(0o600)
    assert root_override_needed([gold]) is None


@needs_root
def test_root_override_needed_follows_links_and_spares_groups_acls_and_unnamed_paths(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What review found: a link into the private folder (the plan binds the real path too)
    was missed; a folder root may enter through a supplementary group, or that an ACL may
    open, was blamed; and a failed mount got the hint for a path it did not name."""
    gold = foreign_private(tmp_path)
    link = tmp_path / "dataset" / "evaluation_suite"
    link.parent.mkdir()
    link.symlink_to(gold.parent, target_is_directory=True)
    found = root_override_needed([link / gold.name])
    assert found is not None and found.startswith(f"{gold.parent} is reachable by root only")
    line = f"mount: /tmp/x/root{link}/gold.duckdb: cannot mount {link}/gold.duckdb read-only."
    assert root_override_needed([link / gold.name], named_in=line) == found
    assert root_override_needed([link / gold.name], named_in="mount: /elsewhere: no") is None
    os.chown(gold.parent, NOBODY, 4242)
    gold.parent.chmod(0o750)
    assert root_override_needed([gold]) is not None  # a group root is not in
    monkeypatch.setattr(os, "getgroups", lambda: [0, 4242])
    assert root_override_needed([gold]) is None  # root's supplementary group may enter
    monkeypatch.undo()
    gold.parent.chmod(0o700)
    real_listxattr = os.listxattr
    monkeypatch.setattr(os, "listxattr", lambda p, *a, **k: (
        ["system.posix_acl_access"] if Path(p) == gold.parent else real_listxattr(p, *a, **k)))
    assert root_override_needed([gold]) is None  # its ACL may let root in: not judged


@pytest.mark.process
@needs_namespaces
@needs_root
def test_a_root_sandbox_over_another_users_private_file_says_why_and_the_fix(
        tmp_path: Path) -> None:
    """The sandbox really cannot bind it (the kernel refuses root the override in the user
    namespace), and the failure says which folder, whose, and what to do, not only mount's
    "cannot mount ... read-only"."""
    gold = foreign_private(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    done, failure = run_once(SandboxSpec(program=Path("/bin/sh"), read_only=(gold,),
                                         writable=(ws,)), ws, f"cat {gold} > {ws}/read")
    assert done.returncode != 0 and not (ws / "read").exists()
    assert failure is not None and failure.startswith("sandbox could not be built: mount: ")
    assert f"({gold.parent} is reachable by root only" in failure
    assert f"run spider2local as uid {NOBODY}, or let root in" in failure

"""What an agent's sandbox holds: the Python runtime, the dbt shim and libfaketime read-only,
its workspace writable, and the runner's own secrets hidden wherever they lie under those.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import spider2local
from spider2local.clock import warm
from spider2local.clock.faketime import find_library, find_real_dbt
from spider2local.resources import faketime_dir
from spider2local.sandbox.launcher import SandboxSpec, Service
from spider2local.sandbox.network import NetworkSeal

CACHE_NAME = "spider2local"


def runtime_paths() -> list[Path]:
    """Read-only in every agent sandbox: the interpreter and its environment (the venv and its
    base prefix only, never the home folder around them), the dbt shim, the real dbt and
    libfaketime."""
    shim = faketime_dir()
    return [Path(p) for p in dict.fromkeys([sys.prefix, sys.exec_prefix, sys.base_prefix,
                                            sys.base_exec_prefix, *_site_packages()])] + [
        shim, find_library().parent, find_real_dbt(shim).parent]


def _site_packages() -> list[str]:
    """The real folders of the environment's site-packages: under the prefix as a rule, but a
    venv whose ``lib`` is a symlink keeps them elsewhere, and binding the prefix alone left
    that link dangling in the sandbox (no duckdb, no spider2local for a reader child); and
    the user's own site-packages when this interpreter reads it (``pip install --user``)."""
    import site

    found = list(site.getsitepackages())
    user = user_site()
    if user is not None:  # in the home folder, which stays hidden around it
        found.append(str(user))
    return [os.path.realpath(p) for p in found if Path(p).is_dir()]


def user_site() -> Path | None:
    """The user's own site-packages when this interpreter reads it (a ``pip install --user``
    of spider2local or of what it needs), else None. The one owner of that question: the
    sandbox binds it, and the agent's environment names its base (``PYTHONUSERBASE``),
    because the agent's HOME is moved into its workspace and Python finds the user site
    through HOME: dbt then failed with "No module named 'dbt'" (measured, issue 27)."""
    import site

    found = site.getusersitepackages()
    return Path(found) if site.ENABLE_USER_SITE and found in sys.path else None


def runtime_env() -> dict[str, str]:
    """Variables a process of the agent needs to find this runtime's packages wherever HOME
    points: ``PYTHONUSERBASE`` for a ``--user`` install (see :func:`user_site`)."""
    import site

    return {"PYTHONUSERBASE": site.getuserbase()} if user_site() is not None else {}


def always_hidden() -> list[Path]:
    """What no agent may see even where it lies under a bound folder: the home folder (its
    caches hold the sample suite's gold) and the installed spider2local package, whose
    ``evaluation`` is the scorer (a wheel installs it inside the venv)."""
    home = Path.home()
    return [home, home / ".cache" / CACHE_NAME, installed_package()]


def installed_package() -> Path:
    """The folder of the spider2local package this process runs (its scorer included)."""
    return Path(spider2local.__file__).resolve().parent


def agent_spec(program: Path, writable: Sequence[Path], *, hidden: Iterable[Path] = (),
               unset_env: Iterable[str] = (), read_only: Iterable[Path] = (),
               network: NetworkSeal | None = None,
               services: Iterable[Service] = ()) -> SandboxSpec:
    """The sandbox of one agent session running ``program`` (the CLI) with ``writable`` (its
    workspace) read-write and ``read_only`` (a command agent's own install) read-only."""
    return SandboxSpec(program=program,
                       read_only=(*runtime_paths(), program.parent, *read_only),
                       writable=tuple(writable),
                       hidden=(*always_hidden(), *hidden),
                       unset_env=tuple(unset_env), network=network,
                       services=tuple(services))


def warm_services(env: Mapping[str, str], root: Path) -> tuple[Service, ...]:
    """The workspace's warm dbt server (:mod:`spider2local.clock.warm`), for a sandbox to
    start beside its program: none unless ``env`` names the server's socket (the runner asked
    for one). ``env`` is what the program's dbt calls inherit, less what the server has no use
    for (the caller's API credentials: the launcher script would hold them); blank values
    count as unset, as the CLI blanks the runner's variables instead of removing them."""
    if warm.SOCKET_ENV not in env:
        return ()
    warm.prepare_dir(root)
    argv, server_env = warm.server_command({k: v for k, v in env.items() if v}, root)
    return (Service(tuple(argv), tuple(sorted(server_env.items())), warm.log_path(root),
                    pidfile=warm.starting_path(root)),)

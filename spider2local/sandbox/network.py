"""The network seal: a sandbox in its own network namespace whose only way out is a relay to
the runner's model gateway (:mod:`spider2local.gateway`).

The launcher adds ``--net`` to its outer ``unshare``: the namespace has only a loopback
interface, so nothing outside the machine, nor any service on the host's own loopback (a
database, another run's gateway, a test server) nor the host's abstract Unix sockets, can be
reached. The gateway's Unix socket is bound into the new root (read-only: connecting to a
socket needs no write access to the mount), and :mod:`.relay` listens on
``127.0.0.1:RELAY_PORT`` inside, pumping each connection to that socket. The agent's API base
URL points at the relay. Kept in its own module (and in its own functions of the launcher) so
the launcher's other concerns merge without touching it.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

RELAY_PORT = 48619
"""Any port works: the namespace is fresh and the relay binds it before the program starts."""
RELAY_HOST = "127.0.0.1"


@dataclass(frozen=True)
class NetworkSeal:
    """Cut the sandbox's network; ``socket`` (the gateway's Unix socket, on the host) is bound
    at the same path inside and served by the relay on ``RELAY_HOST:RELAY_PORT``."""

    socket: Path
    python: Path = Path(sys.executable)
    """The interpreter the relay runs with (the runtime's, bound read-only in every sandbox)."""


def relay_base_url() -> str:
    """The base URL a sealed program reaches the gateway at (plus a route prefix)."""
    return f"http://{RELAY_HOST}:{RELAY_PORT}"


def unshare_flags(seal: NetworkSeal | None) -> str:
    """Extra flags of the launcher's outer ``unshare``."""
    return " --net" if seal is not None else ""


def relay_source() -> str:
    return (Path(__file__).parent / "relay.py").read_text(encoding="utf-8")


def start_relay(seal: NetworkSeal | None) -> str:
    """The launcher's shell line that brings loopback up and starts the relay (after
    ``pivot_root``: a relay started before it would keep the host's root reachable through
    ``/proc/<relay>/root`` for a process of the same user). The relay's parent returns once
    the port listens; if it cannot, the launcher stops there (``set -e``)."""
    if seal is None:
        return ":"
    q = shlex.quote
    return (f"{q(str(seal.python))} -I -S -c {q(relay_source())} {q(str(seal.socket))} "
            f"{RELAY_PORT}")

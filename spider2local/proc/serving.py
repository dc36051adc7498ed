"""The lifetime of a runner-side server a sandbox reaches through a socket (the model gateway,
the database tools): its connection tasks run while a block runs, end with it, and the
listener is closed whatever happens."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc


@contextlib.asynccontextmanager
async def serving(listener: anyio.abc.Listener[Any],
                  start: Callable[[anyio.abc.TaskGroup], object]) -> AsyncIterator[None]:
    """Run what ``start`` schedules in a task group while the block runs; cancel it on
    leaving, then close ``listener`` (shielded). The block's own exception comes back as it
    was, not wrapped by the task group (the serving tasks never raise: each connection's
    errors end there)."""
    try:
        async with anyio.create_task_group() as tg:
            start(tg)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await listener.aclose()

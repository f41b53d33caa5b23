"""Reads whose result is wanted at once, for callers that cannot await.

:func:`read_now` runs a read to its end in the caller's frame when the read does not suspend,
which the file backend's reads never do; a read that would suspend (a network backend's)
raises :class:`~starquake.storage.position.StorageError` instead of blocking the loop. It is
for tests and tools over the file backend.

:func:`read_at_hand` is for the broker's synchronous paths (an acknowledgment whose order must
be kept, a producer's admission): the result when the read completes without suspending;
otherwise the read goes on in a task and hands its result over when it comes, and the caller
does without it meanwhile (as a cache would be filled).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from starquake.common.eager import start_eagerly

from .position import StorageError

__all__ = ["MAX_GOING_ON", "read_at_hand", "read_now", "reads_going_on"]

T = TypeVar("T")

log = logging.getLogger(__name__)

_going_on: set[asyncio.Task[None]] = set()
"""Reads that suspended and go on in tasks (the loop keeps only weak references to tasks)."""

MAX_GOING_ON = 1024
"""Reads going on in tasks at most; a read that suspends beyond is cancelled (its caller does
without it, as when it fails), so callers that keep asking cannot pile up tasks."""


def read_now(read: Coroutine[Any, Any, T]) -> T:
    """The result of ``read``, which must complete without suspending."""
    try:
        read.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    read.close()
    raise StorageError("this read would wait for remote storage; its caller must await it")


def read_at_hand(read: Coroutine[Any, Any, T], on_result: Callable[[T], None]) -> bool:
    """Run ``read`` until it completes or first suspends. Completed: hand its result to
    ``on_result`` and return True. Suspended: return False; the read goes on in a task on the
    running loop and ``on_result`` gets the result when it comes (a read that then fails is
    logged and dropped; with :data:`MAX_GOING_ON` reads already going on, it is cancelled at
    once). A read that fails without suspending raises here."""

    async def deliver() -> None:
        on_result(await read)

    task = start_eagerly(deliver())
    if task is None:
        return True
    if len(_going_on) >= MAX_GOING_ON:
        task.cancel()
        return False
    _going_on.add(task)
    task.add_done_callback(_finished)
    return False


def reads_going_on() -> int:
    """How many reads of :func:`read_at_hand` go on in tasks now."""
    return len(_going_on)


def _finished(task: asyncio.Task[None]) -> None:
    _going_on.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        log.debug("a read that went on in the background failed: %s", error)

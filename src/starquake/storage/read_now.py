"""Reads whose result is wanted at once: driving a read coroutine without an event loop turn.

:func:`read_now` runs a read to its end in the caller's frame when the read does not suspend,
which the file backend's reads never do. It is for callers that cannot await (a synchronous
command handler whose replies must keep their order, a check called from synchronous code);
each such caller is listed in the cluster design's step 3. A read that would suspend (a
network backend's) raises :class:`~starquake.storage.position.StorageError` instead of
blocking the loop.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from .position import StorageError

__all__ = ["read_now"]

T = TypeVar("T")


def read_now(read: Coroutine[Any, Any, T]) -> T:
    """The result of ``read``, which must complete without suspending."""
    try:
        read.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    read.close()
    raise StorageError("this read would wait for remote storage; its caller must await it")

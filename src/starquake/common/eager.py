"""Start a coroutine in the caller's frame and go on in a task only if it suspends.

A dispatcher's pass is a coroutine because its reads may wait (remote storage); with the file
backend they never do, and a pass must then cost what a plain call costs: no task, no extra
event-loop turn. :func:`start_eagerly` runs the coroutine's first step at once; if that
finishes it, nothing else happens (Python 3.12's eager tasks do the same, with a task object).
Otherwise the coroutine continues in a task: the object it suspended on (a future, or None for
a bare yield) is handed to that task's event loop as the coroutine's own await would.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["start_eagerly"]


def start_eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run ``coro`` until it finishes or first suspends; in the latter case return the task
    that runs the rest of it (on the running loop)."""
    try:
        suspended_on = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_rest(coro, suspended_on))


async def _rest(coro: Coroutine[Any, Any, None], suspended_on: Any) -> None:
    await _resume(coro, suspended_on)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, None], suspended_on: Any) -> Generator[Any, Any, None]:
    """Yield what ``coro`` suspended on to the task, and pass back what the task sends or
    throws, until ``coro`` returns."""
    while True:
        try:
            sent = yield suspended_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # cancellation and the like: into the coroutine
            try:
                suspended_on = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                suspended_on = coro.send(sent)
            except StopIteration:
                return

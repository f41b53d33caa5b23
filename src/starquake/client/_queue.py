"""The receiver queue: messages received from the broker and not yet taken by the app."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Iterator

from starquake.client._message import Message
from starquake.client.exceptions import AlreadyClosed, PulsarException, Timeout


class MessageQueue:
    """FIFO of messages with async waiters.

    Waiters are only woken up; they take the message themselves, so a receive that times out
    at the same moment can never lose one.
    """

    def __init__(self) -> None:
        self._items: collections.deque[Message] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._error: PulsarException | None = None

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Message]:
        return iter(list(self._items))

    def put(self, msg: Message) -> None:
        self._items.append(msg)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def get_nowait(self) -> Message | None:
        """The oldest message, or None."""
        if self._items:
            return self._items.popleft()
        if self._error is not None:
            raise self._error
        return None

    async def get(self, max_wait: float | None = None) -> Message:
        """Wait for a message; ``max_wait`` seconds raise :class:`Timeout` when it passes."""
        loop = asyncio.get_running_loop()
        deadline = None if max_wait is None else loop.time() + max_wait
        while True:
            msg = self.get_nowait()
            if msg is not None:
                if self._items:
                    self._wake()  # pass the turn on
                return msg
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                if deadline is None:
                    await waiter
                else:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise Timeout("no message within the timeout")
                    await asyncio.wait_for(asyncio.shield(waiter), remaining)
            except TimeoutError:
                raise Timeout("no message within the timeout") from None
            finally:
                if not waiter.done():
                    waiter.cancel()

    def remove_where(self, predicate: Callable[[Message], bool]) -> int:
        """Drop the messages matching ``predicate``; return how many were dropped."""
        kept = [m for m in self._items if not predicate(m)]
        removed = len(self._items) - len(kept)
        if removed:
            self._items = collections.deque(kept)
        return removed

    def close(self, error: PulsarException | None = None) -> None:
        """Fail current and future waits once the queue is empty."""
        self._error = error or AlreadyClosed("consumer is closed")
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

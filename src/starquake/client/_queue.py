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

    def _has_batch(self, max_messages: int, max_bytes: int) -> bool:
        if max_messages > 0 and len(self._items) >= max_messages:
            return True
        return max_bytes > 0 and sum(len(m._data) for m in self._items) >= max_bytes

    def _take_batch(self, max_messages: int, max_bytes: int) -> list[Message]:
        taken: list[Message] = []
        size = 0
        while self._items:
            if max_messages > 0 and len(taken) >= max_messages:
                break
            msg = self._items[0]
            if max_bytes > 0 and taken and size + len(msg._data) > max_bytes:
                break
            taken.append(self._items.popleft())
            size += len(msg._data)
        return taken

    async def get_batch(
        self, max_messages: int, max_bytes: int, max_wait: float | None
    ) -> list[Message]:
        """Wait until ``max_messages`` or ``max_bytes`` are queued (limits <= 0 are off), or
        ``max_wait`` seconds passed, then take at most that much (possibly nothing).

        The first message is always taken, even if alone it is larger than ``max_bytes``.
        """
        loop = asyncio.get_running_loop()
        deadline = None if max_wait is None else loop.time() + max_wait
        while not self._has_batch(max_messages, max_bytes):
            if self._error is not None and not self._items:
                raise self._error
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                if deadline is None:
                    await waiter
                else:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    await asyncio.wait_for(asyncio.shield(waiter), remaining)
            except TimeoutError:
                break
            finally:
                if not waiter.done():
                    waiter.cancel()
            if self._error is not None:
                break
        taken = self._take_batch(max_messages, max_bytes)
        if not taken and self._error is not None:
            raise self._error
        if self._items:
            self._wake()
        return taken

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

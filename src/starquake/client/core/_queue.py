"""The receiver queue: messages received from the broker and not yet taken by the app."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable, Iterator

from starquake.client.base._message import Message
from starquake.client.core._interrupts import acquire as acquire_interruptibly
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

    def put_many(self, messages: list[Message]) -> None:
        self._items.extend(messages)
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
            if not await self._wait(deadline):
                raise Timeout("no message within the timeout")

    async def _wait(self, deadline: float | None) -> bool:
        """Wait to be woken up, until ``deadline`` (loop time; None: no limit); False when
        it passed first."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        try:
            if deadline is None:
                await waiter
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait_for(asyncio.shield(waiter), remaining)
            return True
        except TimeoutError:
            return False
        finally:
            if not waiter.done():
                waiter.cancel()

    def _has_batch(self, max_messages: int, max_bytes: int) -> bool:
        if max_messages > 0 and len(self._items) >= max_messages:
            return True
        return max_bytes > 0 and sum(len(m.data()) for m in self._items) >= max_bytes

    def _take_batch(self, max_messages: int, max_bytes: int) -> list[Message]:
        taken: list[Message] = []
        size = 0
        while self._items:
            if max_messages > 0 and len(taken) >= max_messages:
                break
            msg = self._items[0]
            if max_bytes > 0 and taken and size + len(msg.data()) > max_bytes:
                break
            taken.append(self._items.popleft())
            size += len(msg.data())
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
            if not await self._wait(deadline):
                break
            if self._error is not None:
                break
        taken = self._take_batch(max_messages, max_bytes)
        if not taken and self._error is not None:
            raise self._error
        if self._items:
            self._wake()
        return taken

    def settle(self) -> None:
        """Hook: report messages taken by other threads to their consumers (see subclass)."""

    def remove_where(self, predicate: Callable[[Message], bool]) -> int:
        """Drop the messages matching ``predicate``; return how many were dropped."""
        kept = [m for m in self._items if not predicate(m)]
        removed = len(self._items) - len(kept)
        if removed:
            self._items.clear()  # in place: the blocking API's takers hold on to the deque
            self._items.extend(kept)
        return removed

    def close(self, error: PulsarException | None = None) -> None:
        """Fail current and future waits once the queue is empty."""
        self._error = error or AlreadyClosed("consumer is closed")
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)


class ThreadSafeQueue(MessageQueue):
    """The receiver queue of the blocking API: filled on the loop, taken by other threads.

    Every access to the items holds ``_lock``. A thread waiting for a message parks on a
    lock of its own that :meth:`put` releases. Messages taken by :meth:`take` or
    :meth:`take_batch` are kept in ``_taken`` until the loop calls :meth:`settle`, which hands
    them to their consumer's ``on_dequeued`` (permits, ack timeout, reader position) in bulk.
    The asyncio methods of :class:`MessageQueue` keep working on the loop.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._sleepers: collections.deque[threading.Lock] = collections.deque()
        self._taken: list[Message] = []

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __iter__(self) -> Iterator[Message]:
        with self._lock:
            return iter(list(self._items))

    @property
    def unsettled(self) -> int:
        """How many taken messages wait for :meth:`settle`."""
        return len(self._taken)

    def put(self, msg: Message) -> None:
        with self._lock:
            self._items.append(msg)
            if self._sleepers:
                self._sleepers.popleft().release()
        if self._waiters:
            self._wake()

    def put_many(self, messages: list[Message]) -> None:
        with self._lock:
            self._items.extend(messages)
            if self._sleepers:
                self._sleepers.popleft().release()
        if self._waiters:
            self._wake()

    def get_nowait(self) -> Message | None:
        with self._lock:
            if self._items:
                return self._items.popleft()
            if self._error is not None:
                raise self._error
            return None

    def settle(self) -> None:
        """(Loop) Report the messages taken since the last call to their consumers."""
        with self._lock:
            taken, self._taken = self._taken, []
        if not taken:
            return
        start = 0
        owner = taken[0].received_by
        for index, msg in enumerate(taken):  # runs of one consumer's messages, in order
            if msg.received_by is not owner:
                owner.on_dequeued_many(taken[start:index])
                start, owner = index, msg.received_by
        owner.on_dequeued_many(taken[start:])

    def remove_where(self, predicate: Callable[[Message], bool]) -> int:
        self.settle()
        with self._lock:
            return super().remove_where(predicate)

    def close(self, error: PulsarException | None = None) -> None:
        with self._lock:
            self._error = error or AlreadyClosed("consumer is closed")
            while self._sleepers:
                self._sleepers.popleft().release()
        super().close(self._error)

    def _sleep(self, sleeper: threading.Lock, deadline: float | None) -> None:
        """Wait (lock not held) until a put releases ``sleeper`` or ``deadline`` passes."""
        timeout = None if deadline is None else deadline - time.monotonic()
        try:
            woken = acquire_interruptibly(sleeper, timeout)
        except BaseException:  # interrupted (Ctrl-C): give up the place in line
            self._leave(sleeper)
            raise
        if not woken:
            self._leave(sleeper)

    def _leave(self, sleeper: threading.Lock) -> None:
        """Take ``sleeper`` out of line; if a put woke it meanwhile, pass the turn on."""
        with self._lock:
            try:
                self._sleepers.remove(sleeper)
            except ValueError:  # already released by a put
                if self._items and self._sleepers:
                    self._sleepers.popleft().release()

    def take(self, max_wait: float | None, before_wait: Callable[[], None]) -> Message:
        """(Any thread but the loop's) The next message; waits at most ``max_wait`` seconds,
        then raises :class:`Timeout`. ``before_wait`` runs (lock not held) once before the
        caller waits, for instance to hand the messages taken so far back to the loop.
        """
        lock = self._lock
        items = self._items
        with lock:
            if items:
                msg = items.popleft()
                self._taken.append(msg)
                return msg
            if self._error is not None:
                raise self._error
        deadline = None if max_wait is None else time.monotonic() + max_wait
        before_wait()
        while True:
            with lock:
                if items:
                    msg = items.popleft()
                    self._taken.append(msg)
                    if items and self._sleepers:
                        self._sleepers.popleft().release()  # pass the turn on
                    return msg
                if self._error is not None:
                    raise self._error
                if deadline is not None and deadline <= time.monotonic():
                    raise Timeout("no message within the timeout")
                sleeper = threading.Lock()
                sleeper.acquire()
                self._sleepers.append(sleeper)
            self._sleep(sleeper, deadline)

    def take_batch(
        self,
        max_messages: int,
        max_bytes: int,
        max_wait: float | None,
        before_wait: Callable[[], None],
    ) -> list[Message]:
        """(Any thread but the loop's) The blocking :meth:`get_batch`; ``before_wait`` runs
        first, as in :meth:`take`."""
        lock = self._lock
        deadline = None if max_wait is None else time.monotonic() + max_wait
        before_wait()
        while True:
            with lock:
                if (
                    self._error is not None
                    or self._has_batch(max_messages, max_bytes)
                    or (deadline is not None and deadline <= time.monotonic())
                ):
                    taken = self._take_batch(max_messages, max_bytes)
                    if not taken and self._error is not None:
                        raise self._error
                    self._taken.extend(taken)
                    if self._items and self._sleepers:
                        self._sleepers.popleft().release()
                    return taken
                sleeper = threading.Lock()
                sleeper.acquire()
                self._sleepers.append(sleeper)
            self._sleep(sleeper, deadline)

"""Blocking-API plumbing: the client's event-loop thread and the hand-offs to and from it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from starquake.client.base._enums import (
    Result,
)
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import MessageId
from starquake.client.core._interrupts import acquire as acquire_interruptibly
from starquake.client.core._interrupts import result as result_interruptibly
from starquake.client.exceptions import AlreadyClosed, Interrupted
from starquake.client.producer._outgoing import OutgoingMessage

log = logging.getLogger(CLIENT_LOGGER_NAME)
R = TypeVar("R")
SendCallback = Callable[[Result, MessageId | None], None]


class LoopThread:
    """An event loop running forever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="starquake-client-io", daemon=True
        )
        self._thread.start()

    def in_loop_thread(self) -> bool:
        """True when called from the loop's thread (a send callback, say)."""
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the loop and wait for its result (cancelled if we are interrupted)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(ON_LOOP)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop is closed: the client was closed or shut down
            coro.close()
            raise AlreadyClosed("the client is closed") from None
        try:
            return result_interruptibly(future)
        except KeyboardInterrupt:  # Ctrl-C while waiting: the official client's error
            future.cancel()
            raise Interrupted("interrupted while waiting for the client") from None
        except BaseException:
            future.cancel()
            raise

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        """Cancel what still runs on the loop (partition watchers, pattern discovery, timers
        of handles never closed), let it finish, then stop and close the loop."""
        if self.loop.is_closed():
            return
        if threading.current_thread() is not self._thread:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_tasks(), self.loop).result(_STOP_WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
            self.loop.close()


_STOP_WAIT = 5.0  # seconds the loop's remaining tasks get to end once cancelled


async def _cancel_tasks() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=_STOP_WAIT - 1)


ON_LOOP = "blocking client call made from a client callback thread"
# Acks and permits handed over without a blocking call reach the loop within this delay.
HAND_OVER_DELAY = 0.01


class Mailbox:
    """Runs ``process`` on the loop for work that caller threads queued, waking the loop once
    per burst rather than once per call.

    :meth:`wake` asks for a run soon, :meth:`wake_later` for one within ``delay`` seconds.
    Callers queue their work first and then test the flags; the loop clears a flag before it
    runs ``process``. So a caller that finds a flag set queued its work before that run
    started, and the run will see it. (Two callers may both schedule a run: harmless.)
    """

    __slots__ = ("_delay", "_later", "_loop", "_process", "_soon")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, process: Callable[[], None], delay: float
    ) -> None:
        self._loop = loop
        self._process = process
        self._delay = delay
        self._soon = False
        self._later = False

    def wake(self) -> None:
        if not self._soon:
            self._soon = True
            self._call(self._run_soon)

    def wake_later(self) -> None:
        if not (self._soon or self._later):
            self._later = True
            self._call(self._arm)

    def _call(self, fn: Callable[[], None]) -> None:
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed: the client was closed or shut down
            self._soon = self._later = False
            raise AlreadyClosed("the client is closed") from None

    def _run_soon(self) -> None:
        self._soon = False
        self._process()

    def _arm(self) -> None:
        self._loop.call_later(self._delay, self._run_later)

    def _run_later(self) -> None:
        self._later = False
        self._process()


class Waiter:
    """The caller's end of one blocking ``send``: a lock the loop releases with the result."""

    __slots__ = ("_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self._value: MessageId | None = None
        self._error: BaseException | None = None

    def set(self, value: MessageId | None, error: BaseException | None) -> None:
        self._value = value
        self._error = error
        self._done.release()

    def wait(self) -> MessageId:
        try:
            acquire_interruptibly(self._done)
        except KeyboardInterrupt:  # Ctrl-C while waiting: the send goes on, unwatched
            raise Interrupted("interrupted while waiting for the send receipt") from None
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


# A send handed to the loop: (message or None when refused for a full queue, callback, waiter).
PendingSend = tuple[OutgoingMessage | None, SendCallback | None, Waiter | None]

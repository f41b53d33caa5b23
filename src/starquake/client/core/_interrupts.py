"""Blocking waits of the blocking API that let the main thread take signals while they wait.

A signal raised by another thread (``signal.raise_signal`` there, or a process-directed signal
the kernel gives to another thread) does not interrupt a lock wait of the main thread: Python
runs the handler (``KeyboardInterrupt`` for SIGINT) only once the main thread runs Python code
again. So on the main thread these waits wake up every ``SIGNAL_CHECK_INTERVAL`` seconds, as
the official client checks for signals while it waits. Other threads wait in one piece.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import TypeVar

R = TypeVar("R")

SIGNAL_CHECK_INTERVAL = 0.1  # seconds


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def acquire(lock: threading.Lock | threading.Semaphore, timeout: float | None = None) -> bool:
    """``lock.acquire(timeout=...)`` (None: no limit) that takes signals on the main thread."""
    if not _on_main_thread():
        return lock.acquire() if timeout is None else lock.acquire(timeout=max(timeout, 0.0))
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if deadline is None:
            wait = SIGNAL_CHECK_INTERVAL
        else:
            wait = min(SIGNAL_CHECK_INTERVAL, max(deadline - time.monotonic(), 0.0))
        if lock.acquire(timeout=wait):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


def result(future: concurrent.futures.Future[R]) -> R:
    """``future.result()`` that takes signals on the main thread."""
    if not _on_main_thread():
        return future.result()
    while True:
        try:
            return future.result(timeout=SIGNAL_CHECK_INTERVAL)
        except concurrent.futures.TimeoutError:
            if future.done():  # the coroutine itself raised TimeoutError
                raise

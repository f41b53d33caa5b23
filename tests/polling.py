"""Waiting in tests for something the broker does in the background (a periodic check)."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Whether ``condition`` becomes true within ``timeout`` seconds (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Fail the test unless ``condition`` becomes true within ``timeout`` seconds."""
    assert eventually(condition, timeout), f"timed out waiting for {what}"

"""Helpers of the backlog quota tests (for either client): send outcomes, refused producers."""

from __future__ import annotations

import threading
import types
from typing import Any

import pulsar


class Sends:
    """Results of asynchronous sends, as their callbacks report them."""

    def __init__(self) -> None:
        self.results: list[Any] = []
        self._lock = threading.Lock()

    def callback(self, result: Any, _msg_id: Any) -> None:
        """The ``send_async`` callback: records ``result``."""
        with self._lock:
            self.results.append(result)

    def count(self) -> int:
        """How many sends have completed, successfully or not."""
        with self._lock:
            return len(self.results)


def refused(client: Any, topic: str, module: types.ModuleType = pulsar) -> bool:
    """Whether the broker refuses a new producer on ``topic`` for its backlog quota."""
    try:
        client.create_producer(topic).close()
    except module.ProducerBlockedQuotaExceededError:
        return True
    return False

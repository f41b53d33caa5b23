"""Helpers of the transaction tests: fresh topic names, and what a consumer receives."""

from __future__ import annotations

import time
import uuid

from starquake import client as pulsar


def new_topic() -> str:
    return f"persistent://public/default/txn-{uuid.uuid4().hex[:12]}"


def received(
    consumer: pulsar.Consumer, expected: int = 0, timeout_ms: int = 5000, quiet_ms: int = 200
) -> list[bytes]:
    """The messages the consumer gets (acknowledged): waiting up to ``timeout_ms`` for
    ``expected`` of them, then taking any more that come within ``quiet_ms``."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        if len(got) < expected:
            wait = max(1, int((deadline - time.monotonic()) * 1000))
        else:
            wait = quiet_ms
        try:
            msg = consumer.receive(wait)
        except pulsar.Timeout:
            if len(got) < expected and time.monotonic() < deadline:
                continue
            return got
        consumer.acknowledge(msg)
        got.append(msg.data())

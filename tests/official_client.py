"""The official ``pulsar-client`` connected to a test broker, the way every test configures it."""

from __future__ import annotations

import collections
import types
from collections.abc import Iterable
from typing import Any

import pulsar

from starquake.broker.embedded import EmbeddedBroker


def official_client(
    broker: EmbeddedBroker, level: pulsar.LoggerLevel = pulsar.LoggerLevel.Error
) -> pulsar.Client:
    """A client with a 10 s operation timeout that logs only at ``level`` and above."""
    return pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(level),
    )


def make_client(module: types.ModuleType, broker: EmbeddedBroker) -> Any:
    """A client of ``module`` (``pulsar`` or ``starquake.client``: the same API) with a 10 s
    operation timeout, logging warnings and above."""
    return module.Client(
        broker.service_url,
        operation_timeout_seconds=10,
        logger=module.ConsoleLogger(module.LoggerLevel.Warn),
    )


def subscribe_earliest(
    module: types.ModuleType, client: Any, topic: Any, name: str = "sub", **kw: Any
) -> Any:
    """A consumer of ``client`` (of ``module``) that starts at the earliest message unless told."""
    kw.setdefault("initial_position", module.InitialPosition.Earliest)
    return client.subscribe(topic, name, **kw)


def receive_count(
    consumer: Any, count: int, timeout_ms: int = 10_000, *, acknowledge: bool = False
) -> list[Any]:
    """Exactly ``count`` messages, each within ``timeout_ms`` (the client's Timeout otherwise)."""
    out = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=timeout_ms)
        if acknowledge:
            consumer.acknowledge(msg)
        out.append(msg)
    return out


def receive_until_quiet(
    consumer: Any,
    timeout_ms: int = 1500,
    *,
    first_within_ms: int | None = None,
    acknowledge: bool = False,
    module: types.ModuleType = pulsar,
) -> list[Any]:
    """Receive until nothing arrives for ``timeout_ms``; the messages.

    With ``first_within_ms``, the first message (one is expected) may take that long instead.
    ``module`` is the client module of ``consumer``, whose ``Timeout`` ends the wait.
    """
    out = []
    while True:
        wait = timeout_ms if out or first_within_ms is None else first_within_ms
        try:
            msg = consumer.receive(timeout_millis=wait)
        except module.Timeout:
            return out
        if acknowledge:
            consumer.acknowledge(msg)
        out.append(msg)


def drain(
    consumer: Any,
    timeout_ms: int = 1500,
    *,
    first_within_ms: int | None = None,
    acknowledge: bool = True,
    module: types.ModuleType = pulsar,
) -> list[bytes]:
    """Receive (and acknowledge, unless told) until nothing arrives for ``timeout_ms``; the
    payloads. ``first_within_ms`` and ``module`` as in :func:`receive_until_quiet`."""
    messages = receive_until_quiet(
        consumer,
        timeout_ms,
        first_within_ms=first_within_ms,
        acknowledge=acknowledge,
        module=module,
    )
    return [msg.data() for msg in messages]


def receive_covering(
    consumer: Any, wanted: Iterable[bytes], timeout_ms: int = 10_000, *, acknowledge: bool = False
) -> list[bytes]:
    """Receive until every payload of ``wanted`` arrived, or nothing arrived for ``timeout_ms``;
    the payloads received. For checks that ``wanted`` is delivered (a subset): no wait for
    quiet once it is."""
    missing = collections.Counter(wanted)
    out: list[bytes] = []
    while +missing:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            break
        if acknowledge:
            consumer.acknowledge(msg)
        out.append(msg.data())
        missing[msg.data()] -= 1
    return out

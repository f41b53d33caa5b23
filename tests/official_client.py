"""The official ``pulsar-client`` connected to a test broker, the way every test configures it."""

from __future__ import annotations

import types
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


def drain(consumer: pulsar.Consumer, timeout_ms: int = 1500) -> list[bytes]:
    """Receive and acknowledge until nothing arrives for ``timeout_ms``; the payloads."""
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return out
        out.append(msg.data())
        consumer.acknowledge(msg)

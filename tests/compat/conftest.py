"""Fixtures for tests that drive our broker with the official ``pulsar-client``."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest

from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=_quiet_logger())
    try:
        yield c
    finally:
        c.close()


def _quiet_logger() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)

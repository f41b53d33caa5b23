"""Fixtures for tests that drive our broker with the official ``pulsar-client``."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    c = official_client(broker, pulsar.LoggerLevel.Warn)
    try:
        yield c
    finally:
        c.close()

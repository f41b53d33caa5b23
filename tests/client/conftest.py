"""Fixtures: the same scenarios run with the official client and with ours."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from official_client import make_client

import starquake.client
from starquake.broker.embedded import EmbeddedBroker

MODULES: dict[str, types.ModuleType] = {"official": pulsar, "starquake": starquake.client}


@pytest.fixture(params=sorted(MODULES))
def mod(request: pytest.FixtureRequest) -> types.ModuleType:
    """The client module under test: ``pulsar`` or ``starquake.client``."""
    return MODULES[request.param]


@pytest.fixture
def client(mod: types.ModuleType, broker: EmbeddedBroker) -> Iterator[Any]:
    c = make_client(mod, broker)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def small_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker whose maxMessageSize is 10,000 bytes: larger messages must be chunked."""
    with EmbeddedBroker(tmp_path / "small", maxMessageSize=10_000) as running:
        yield running


@pytest.fixture
def ours(broker: EmbeddedBroker) -> Iterator[Any]:
    c = make_client(starquake.client, broker)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def official(broker: EmbeddedBroker) -> Iterator[Any]:
    c = make_client(pulsar, broker)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def topic_factory() -> Any:
    def make(prefix: str = "t") -> str:
        return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:12]}"

    return make

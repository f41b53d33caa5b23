"""Shared fixtures: a real broker on free ports, and the official client against it; the
hypothesis profile of every property test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from starquake.broker.embedded import EmbeddedBroker

# Property tests check behaviour, not speed: on a shared, busy machine input generation and
# examples may be slow, which must not fail a run.
settings.register_profile("starquake", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("starquake")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data") as running:
        yield running


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:12]}"

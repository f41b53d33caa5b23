"""A pytest plugin: the ``starquake_broker`` fixture, a real broker per test on free ports.

Installed with the package (entry point ``pytest11``), so in a project's tests::

    def test_orders(starquake_broker):
        client = pulsar.Client(starquake_broker.service_url)
        ...

The broker keeps its data in the test's ``tmp_path`` and stops when the test ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture
def starquake_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A running :class:`~starquake.broker.embedded.EmbeddedBroker` for one test."""
    with EmbeddedBroker(tmp_path / "starquake-data") as broker:
        yield broker

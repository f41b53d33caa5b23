"""``brokerDeduplicationEntriesInterval``: a deduplication snapshot every N persisted entries."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from dedup_helpers import ready_dedup

from starquake.broker.config import BrokerConfig, ConfigError, load_config
from starquake.broker.dedup import DEFAULT_SNAPSHOT_INTERVAL_ENTRIES, MessageDeduplication
from starquake.broker.embedded import EmbeddedBroker
from starquake.storage import Position

TOPIC = "persistent://public/default/dedup-interval"


def ready(interval: int) -> MessageDeduplication:
    return ready_dedup(TOPIC, snapshot_interval_entries=interval)


# ---------------------------------------------------------------------- configuration


def test_the_default_is_pulsars_1000() -> None:
    assert BrokerConfig().brokerDeduplicationEntriesInterval == 1000
    assert DEFAULT_SNAPSHOT_INTERVAL_ENTRIES == 1000
    assert MessageDeduplication(TOPIC, enabled=True).snapshot_interval_entries == 1000


def test_the_setting_is_read_from_defines_and_files(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerDeduplicationEntriesInterval=250\n")
    assert load_config(conf, environ={}).brokerDeduplicationEntriesInterval == 250
    config = load_config(overrides={"brokerDeduplicationEntriesInterval": "7"}, environ={})
    assert config.brokerDeduplicationEntriesInterval == 7


@pytest.mark.parametrize("value", ["0", "-5"])
def test_the_setting_must_be_positive(value: str) -> None:
    with pytest.raises(ConfigError, match="brokerDeduplicationEntriesInterval"):
        load_config(overrides={"brokerDeduplicationEntriesInterval": value}, environ={})
    with pytest.raises(ValueError, match="snapshot_interval_entries"):
        MessageDeduplication(TOPIC, enabled=True, snapshot_interval_entries=int(value))


def test_a_non_integer_is_refused() -> None:
    with pytest.raises(ConfigError, match="brokerDeduplicationEntriesInterval"):
        load_config(overrides={"brokerDeduplicationEntriesInterval": "ten"}, environ={})


# ---------------------------------------------------------------------- the model


@pytest.mark.parametrize("interval", [1, 2, 7])
def test_a_snapshot_is_due_after_n_entries_not_before(interval: int) -> None:
    dedup = ready(interval)
    entry_id = 0
    for _ in range(3):  # three rounds: the count restarts at each snapshot
        for _ in range(interval - 1):
            dedup.on_persisted("p", entry_id, 0, Position(1, entry_id))
            entry_id += 1
            assert not dedup.snapshot_due()
        dedup.on_persisted("p", entry_id, 0, Position(1, entry_id))
        assert dedup.snapshot_due()
        _, value = dedup.take_snapshot()
        assert json.loads(value)["position"] == [1, entry_id]
        assert not dedup.snapshot_due()
        entry_id += 1


def test_markers_and_chunks_count_as_entries() -> None:
    dedup = ready(3)
    dedup.on_persisted("p", 0, 0, Position(1, 0), is_marker=True)
    dedup.on_persisted("p", 1, 0, Position(1, 1), is_last_chunk=False)
    assert not dedup.snapshot_due()
    dedup.on_persisted("p", 1, 0, Position(1, 2))
    assert dedup.snapshot_due()
    assert dedup.persisted_state() == {"p": 1}


def test_no_snapshot_is_due_while_not_recovered() -> None:
    dedup = MessageDeduplication(TOPIC, enabled=True, snapshot_interval_entries=1)
    dedup.on_persisted("p", 0, 0, Position(1, 0))
    assert not dedup.snapshot_due()


# ---------------------------------------------------------------------- through a broker


def _stored_snapshot(broker: EmbeddedBroker, topic: str) -> dict[str, Any] | None:
    """The topic's stored deduplication snapshot, once every metadata write queued so far is
    done (a barrier key queued now is written after them, or with them)."""
    service = broker.service

    async def after_queued_writes() -> bytes | None:
        stored = asyncio.get_running_loop().create_future()
        service.store_metadata_later(
            "/starquake-test/barrier/" + uuid.uuid4().hex,
            b"",
            on_stored=lambda: stored.set_result(None),
        )
        await stored
        return service.metadata.get(MessageDeduplication.metadata_key(topic))

    data = broker.call(after_queued_writes())
    if data is None:
        return None
    snapshot: dict[str, Any] = json.loads(data)
    return snapshot


def test_the_broker_snapshots_every_n_entries(tmp_path: Path) -> None:
    interval = 5
    topic = f"persistent://public/default/interval-{uuid.uuid4().hex[:8]}"
    with EmbeddedBroker(
        tmp_path / "data",
        brokerDeduplicationEnabled=True,
        brokerDeduplicationEntriesInterval=interval,
    ) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            producer = client.create_producer(topic, producer_name="p", batching_enabled=False)
            # every send waits for its receipt: the broker counts one entry at a time
            ids = [producer.send(b"m", sequence_id=i) for i in range(interval - 1)]
            assert _stored_snapshot(broker, topic) is None
            ids.append(producer.send(b"m", sequence_id=interval - 1))
            first = _stored_snapshot(broker, topic)
            assert first is not None
            assert first["position"] == [ids[-1].ledger_id(), ids[-1].entry_id()]
            assert first["producers"] == [["p", interval - 1]]
            for i in range(interval, 2 * interval - 1):
                ids.append(producer.send(b"m", sequence_id=i))
            assert _stored_snapshot(broker, topic) == first
            ids.append(producer.send(b"m", sequence_id=2 * interval - 1))
            second = _stored_snapshot(broker, topic)
            assert second is not None
            assert second["position"] == [ids[-1].ledger_id(), ids[-1].entry_id()]
            assert second["producers"] == [["p", 2 * interval - 1]]
        finally:
            client.close()

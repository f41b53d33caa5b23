"""Batch-index acknowledgments, with both clients: a consumer with ``batch_index_ack_enabled``
acknowledges single messages of a batch, and

- with ``acknowledgmentAtBatchIndexLevelEnabled`` on the broker, the acknowledged ones are not
  delivered again after the consumer resubscribes;
- with it off (the default), the whole batch comes again (at-least-once): a partial
  acknowledgment never deletes the messages that were not acknowledged; once every message is
  acknowledged the batch is gone.
"""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from official_client import drain, make_client, receive_count

from starquake.broker.embedded import EmbeddedBroker

COUNT = 10


@pytest.fixture(params=[True, False], ids=["broker-batch-index-acks", "broker-default"])
def batch_index_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddedBroker]:
    settings = {"acknowledgmentAtBatchIndexLevelEnabled": request.param}
    with EmbeddedBroker(tmp_path / "data", **settings) as running:
        yield running


def _subscribe(client: Any, mod: types.ModuleType, topic: str) -> Any:
    return client.subscribe(
        topic,
        "sub",
        consumer_type=mod.ConsumerType.Shared,
        batch_index_ack_enabled=True,
        initial_position=mod.InitialPosition.Earliest,
    )


def _one_batch(client: Any, topic: str) -> None:
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=COUNT, batching_max_publish_delay_ms=500
    )
    for i in range(COUNT):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    producer.close()


@pytest.mark.parametrize("acked", [5, COUNT])
def test_acknowledged_messages_of_a_batch_after_resubscribing(
    mod: types.ModuleType, batch_index_broker: EmbeddedBroker, acked: int
) -> None:
    client = make_client(mod, batch_index_broker)
    try:
        topic = f"persistent://public/default/bia-{uuid.uuid4().hex[:10]}"
        consumer = _subscribe(client, mod, topic)
        _one_batch(client, topic)
        received = receive_count(consumer, COUNT, 5000)
        assert all(msg.message_id().batch_index() >= 0 for msg in received)  # one batch
        for msg in received[:acked]:
            consumer.acknowledge(msg)
        consumer.close()

        again = drain(_subscribe(client, mod, topic), 1000, acknowledge=False, module=mod)
        everything = [f"m{i}".encode() for i in range(COUNT)]
        if acked == COUNT:
            assert again == []
        elif batch_index_broker.config.acknowledgmentAtBatchIndexLevelEnabled:
            assert again == everything[acked:]
        else:
            assert again == everything
    finally:
        client.close()

"""Compaction of a topic written in transactions: only committed messages reach the view, and
never past the first open transaction; ``read_compacted`` readers read as consumers do."""

from __future__ import annotations

from compaction_helpers import compact
from txn_helpers import new_topic

from starquake import client as pulsar
from starquake.broker.embedded import EmbeddedBroker


def _compacted(client: pulsar.Client, topic: str) -> list[tuple[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    got = []
    while reader.has_message_available():
        msg = reader.read_next(2000)
        got.append((msg.partition_key(), msg.data()))
    reader.close()
    return got


def test_compaction_keeps_committed_messages_only(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    topic = new_topic()
    producer = txn_client.create_producer(topic, batching_enabled=False)
    producer.send(b"a1", partition_key="a")
    committed = txn_client.new_transaction()
    producer.send(b"a2", partition_key="a", txn=committed)
    committed.commit()
    aborted = txn_client.new_transaction()
    producer.send(b"a3", partition_key="a", txn=aborted)
    aborted.abort()
    producer.send(b"z", partition_key="z")
    open_ = txn_client.new_transaction()
    producer.send(b"b1", partition_key="b", txn=open_)
    producer.send(b"a4", partition_key="a")  # after the open transaction: held
    compact(txn_broker, topic)
    assert _compacted(txn_client, topic) == [("a", b"a2"), ("z", b"z")]
    open_.commit()
    compact(txn_broker, topic)
    assert _compacted(txn_client, topic) == [("z", b"z"), ("b", b"b1"), ("a", b"a4")]

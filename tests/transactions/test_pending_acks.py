"""Acknowledgments in transactions (pending acks), end to end: our client, a real broker."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
import uuid

import pytest
from raw_connection import RawConnection
from txn_helpers import new_topic, received

from starquake import client as pulsar
from starquake.broker.embedded import EmbeddedBroker
from starquake.client import asyncio as aio
from starquake.protocol import client_commands, txn_commands
from starquake.protocol.enums import AckType, SubType
from starquake.protocol.errors import ServerError
from starquake.protocol.wire import pb

EARLIEST = pulsar.InitialPosition.Earliest
SHARED = pulsar.ConsumerType.Shared


def _backlog(broker: EmbeddedBroker, topic: str, sub: str = "sub") -> int:
    path = urllib.parse.quote(topic.removeprefix("persistent://"))
    url = f"{broker.web_service_url}/admin/v2/persistent/{path}/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        stats = json.load(reply)
    return int(stats["subscriptions"][sub]["msgBacklog"])


def _backlog_becomes(broker: EmbeddedBroker, topic: str, expected: int) -> int:
    deadline = time.monotonic() + 5
    while (backlog := _backlog(broker, topic)) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return backlog


def _fill(client: pulsar.Client, topic: str, count: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(f"in-{i}".encode())
    producer.close()


def _transform(
    client: pulsar.Client, consumer: pulsar.Consumer, out: pulsar.Producer, count: int
) -> pulsar.Transaction:
    """Consume ``count`` messages and produce their transforms, all in one transaction."""
    txn = client.new_transaction()
    for _ in range(count):
        msg = consumer.receive(5000)
        out.send(msg.data().upper(), txn=txn)
        consumer.acknowledge(msg, txn=txn)
    return txn


def test_consume_transform_produce_commits_acks_and_sends_together(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    source, sink = new_topic(), new_topic()
    consumer = txn_client.subscribe(source, "sub", SHARED, initial_position=EARLIEST)
    _fill(txn_client, source, 3)
    outputs = txn_client.subscribe(sink, "out", initial_position=EARLIEST)
    txn = _transform(txn_client, consumer, txn_client.create_producer(sink), 3)
    # pending: not acknowledged (still in the backlog), but no consumer gets them again
    assert _backlog(txn_broker, source) == 3
    other = txn_client.subscribe(source, "sub", SHARED)
    assert received(other) == [] and received(outputs) == []
    txn.commit()
    assert received(outputs, 3) == [b"IN-0", b"IN-1", b"IN-2"]
    assert _backlog_becomes(txn_broker, source, 0) == 0
    consumer.close()
    other.close()
    again = txn_client.subscribe(source, "sub", SHARED)
    assert received(again) == []


def test_abort_redelivers_the_acknowledged_messages_and_drops_the_outputs(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    source, sink = new_topic(), new_topic()
    consumer = txn_client.subscribe(source, "sub", SHARED, initial_position=EARLIEST)
    _fill(txn_client, source, 3)
    outputs = txn_client.subscribe(sink, "out", initial_position=EARLIEST)
    txn = _transform(txn_client, consumer, txn_client.create_producer(sink), 3)
    txn.abort()
    again = sorted(received(consumer, 3))
    assert again == [b"in-0", b"in-1", b"in-2"]
    assert received(outputs) == []
    assert _backlog_becomes(txn_broker, source, 0) == 0


def test_conflicting_acks_are_refused(txn_client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = txn_client.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
    _fill(txn_client, topic, 2)
    first, second = consumer.receive(5000), consumer.receive(5000)
    a, b = txn_client.new_transaction(), txn_client.new_transaction()
    consumer.acknowledge(first, txn=a)
    with pytest.raises(pulsar.TransactionConflict, match="in pending ack status"):
        consumer.acknowledge(first, txn=b)  # pending in another transaction
    b.abort()
    with pytest.raises(pulsar.TransactionConflict, match="in pending ack status"):
        consumer.acknowledge(first, txn=a)  # and in its own (as Pulsar)
    # As the Java client: a transaction with a failed operation cannot commit; it aborts
    with pytest.raises(pulsar.TransactionConflict):
        a.commit()
    assert a.state == "ABORTED"
    assert received(consumer, 1) == [b"in-0"]  # released by the abort
    consumer.acknowledge(second)  # an ordinary ack (grouped, sent soon) wins, as in Pulsar
    deadline = time.monotonic() + 5
    while True:
        c = txn_client.new_transaction()
        try:
            consumer.acknowledge(second, txn=c)
        except pulsar.TransactionConflict as exc:
            assert "already acked before" in str(exc)
            break
        finally:
            c.abort()
        assert time.monotonic() < deadline, "the ordinary ack never arrived"
    consumer.close()
    assert received(txn_client.subscribe(topic, "sub", SHARED)) == []


def test_cumulative_ack_in_a_transaction_on_exclusive_and_failover(
    txn_client: pulsar.Client,
) -> None:
    for kind in (pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover):
        topic = new_topic()
        consumer = txn_client.subscribe(topic, "sub", kind, initial_position=EARLIEST)
        _fill(txn_client, topic, 5)
        messages = [consumer.receive(5000) for _ in range(5)]
        aborted = txn_client.new_transaction()
        consumer.acknowledge_cumulative(messages[2], txn=aborted)
        aborted.abort()  # released: delivered again from the first one
        consumer.close()
        consumer = txn_client.subscribe(topic, "sub", kind)
        messages = [consumer.receive(5000) for _ in range(5)]
        assert [m.data() for m in messages] == [f"in-{i}".encode() for i in range(5)]
        committed = txn_client.new_transaction()
        consumer.acknowledge_cumulative(messages[1], txn=committed)
        with pytest.raises(pulsar.TransactionConflict):
            consumer.acknowledge_cumulative(messages[3], txn=txn_client.new_transaction())
        committed.commit()
        consumer.close()
        again = txn_client.subscribe(topic, "sub", kind)
        assert received(again, 3) == [b"in-2", b"in-3", b"in-4"], kind


def _raw_txn_ack(
    broker: EmbeddedBroker, topic: str, kind: AckType, txn: tuple[int, int]
) -> pb.CommandAckResponse:
    """The broker's answer to an ACK in ``txn`` of the topic's first entry on a Shared
    subscription, sent on a raw connection."""
    with RawConnection(broker.broker_port) as cnx:
        cnx.handshake()
        cnx.send_command(
            client_commands.subscribe(
                topic,
                "sub",
                SubType.Shared,
                7,
                1,
                consumer_name="raw",
                durable=True,
                initial_position=1,
                read_compacted=False,
                metadata={},
            )
        )
        assert cnx.next().HasField("success")
        ack = client_commands.ack(7, kind, [])
        ack.ack.message_id.add(ledgerId=0, entryId=0)
        ack.ack.txnid_most_bits, ack.ack.txnid_least_bits = txn
        ack.ack.request_id = 2
        cnx.send_command(ack)
        reply = cnx.next()
        while not reply.HasField("ack_response"):
            reply = cnx.next()
        return reply.ack_response


def test_the_broker_refuses_a_cumulative_ack_in_a_transaction_on_shared(
    txn_broker: EmbeddedBroker,
) -> None:
    txn = (0, 123_456_789)  # refused before the transaction is even looked at
    reply = _raw_txn_ack(txn_broker, new_topic(), AckType.Cumulative, txn)
    assert reply.error == ServerError.NotAllowedError
    assert (reply.txnid_most_bits, reply.txnid_least_bits) == txn


def test_an_ack_in_an_unknown_transaction_or_with_transactions_off(
    txn_broker: EmbeddedBroker, broker: EmbeddedBroker
) -> None:
    unknown = _raw_txn_ack(txn_broker, new_topic(), AckType.Individual, (0, 123_456_789))
    assert unknown.error == ServerError.TransactionNotFound
    off = _raw_txn_ack(broker, new_topic(), AckType.Individual, (0, 1))
    assert (off.error, off.message) == (
        ServerError.NotAllowedError,
        "Server don't support transaction ack!",
    )


def test_the_coordinator_ends_acks_on_a_subscription_added_to_the_transaction(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    """END_TXN_ON_SUBSCRIPTION of a subscription that holds nothing answers success."""
    topic = new_topic()
    txn_client.subscribe(topic, "sub", initial_position=EARLIEST).close()
    txn = txn_client.new_transaction()
    with RawConnection(txn_broker.broker_port) as cnx:
        cnx.handshake()
        add = txn_commands.add_subscription_to_txn(1, *txn.txn_id, [(topic, "sub")])
        cnx.send_command(add)
        assert not cnx.next().add_subscription_to_txn_response.HasField("error")
    txn.commit()
    assert txn.state == "COMMITTED"


def test_the_asyncio_api_and_a_commit_waiting_for_the_acks_before_it(
    txn_broker: EmbeddedBroker,
) -> None:
    async def scenario() -> list[bytes]:
        client = aio.Client(txn_broker.service_url, enable_transaction=True)
        try:
            topic = new_topic()
            consumer = await client.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
            producer = await client.create_producer(topic, batching_enabled=False)
            for i in range(3):
                await producer.send(f"in-{i}".encode())
            messages = [await consumer.receive() for _ in range(3)]
            txn = await client.new_transaction()
            acks = [asyncio.ensure_future(consumer.acknowledge(m, txn=txn)) for m in messages]
            await asyncio.sleep(0)  # started, not answered yet: the commit waits for them
            await txn.commit()
            assert all(a.done() for a in acks) and txn.state == "COMMITTED"
            await consumer.close()
            again = await client.subscribe(topic, "sub", SHARED)
            await producer.send(b"after")
            return [(await again.receive()).data()]
        finally:
            await client.close()

    assert asyncio.run(scenario()) == [b"after"]


def test_batch_index_acks_in_transactions(txn_client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = txn_client.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
    producer = txn_client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=1000
    )
    for i in range(3):
        producer.send_async(f"b-{i}".encode(), None)
    producer.flush()
    messages = [consumer.receive(5000) for _ in range(3)]
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in messages}) == 1
    a, b = txn_client.new_transaction(), txn_client.new_transaction()
    consumer.acknowledge(messages[0], txn=a)
    consumer.acknowledge(messages[1], txn=b)  # another index of the same batch: no conflict
    c = txn_client.new_transaction()
    with pytest.raises(pulsar.TransactionConflict, match=r"batch message|pending ack"):
        consumer.acknowledge(messages[0], txn=c)
    c.abort()
    consumer.acknowledge(messages[2], txn=b)
    a.commit()
    b.commit()  # every index acknowledged: the entry is
    consumer.close()
    assert received(txn_client.subscribe(topic, "sub", SHARED)) == []


def test_a_topic_named_short_ends_its_acks_after_a_reload(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    """The subscription the client adds names its topic as the application did; the commit
    still reaches the acks, even once the topic was unloaded (its pending acks replayed)."""
    short = new_topic().removeprefix("persistent://public/default/")
    consumer = txn_client.subscribe(short, "sub", SHARED, initial_position=EARLIEST)
    _fill(txn_client, short, 2)
    txn = txn_client.new_transaction()
    for _ in range(2):
        consumer.acknowledge(consumer.receive(5000), txn=txn)
    full = f"persistent://public/default/{short}"
    path = urllib.parse.quote(full.removeprefix("persistent://"))
    unload = f"{txn_broker.web_service_url}/admin/v2/persistent/{path}/unload"
    urllib.request.urlopen(urllib.request.Request(unload, method="PUT"), timeout=10).close()
    assert _backlog(txn_broker, full) == 2
    assert received(consumer) == []  # reconnected: the replayed acks still hold them
    txn.commit()
    assert _backlog_becomes(txn_broker, full, 0) == 0


def test_a_deleted_subscription_takes_its_pending_ack_log_along(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    topic = new_topic()
    consumer = txn_client.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
    _fill(txn_client, topic, 2)
    txn = txn_client.new_transaction()
    consumer.acknowledge(consumer.receive(5000), txn=txn)
    log_name = f"{topic}-sub__transaction_pending_ack"
    assert txn_broker.service.storage.exists(log_name)
    consumer.unsubscribe()
    deadline = time.monotonic() + 5
    while txn_broker.service.storage.exists(log_name) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not txn_broker.service.storage.exists(log_name)
    txn.commit()  # nothing left to end there
    again = txn_client.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
    assert sorted(received(again, 2)) == [b"in-0", b"in-1"]


@pytest.mark.parametrize("unloaded", [False, True])
def test_a_deleted_topic_leaves_no_pending_ack_log_in_its_namespace(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client, unloaded: bool
) -> None:
    namespace = f"public/txn-{uuid.uuid4().hex[:8]}"
    txn_broker.create_namespace(namespace)
    topic = f"persistent://{namespace}/t"
    consumer = txn_client.subscribe(topic, "sub", initial_position=EARLIEST)
    _fill(txn_client, topic, 1)
    txn = txn_client.new_transaction()
    consumer.acknowledge(consumer.receive(5000), txn=txn)
    txn.commit()
    consumer.close()
    admin = txn_broker.web_service_url
    if unloaded:  # deleted while not loaded: its subscriptions are not known, their logs are
        unload = f"{admin}/admin/v2/persistent/{namespace}/t/unload"
        urllib.request.urlopen(urllib.request.Request(unload, method="PUT"), timeout=10).close()
    delete = urllib.request.Request(f"{admin}/admin/v2/persistent/{namespace}/t", method="DELETE")
    urllib.request.urlopen(delete, timeout=10).close()
    gone = urllib.request.Request(f"{admin}/admin/v2/namespaces/{namespace}", method="DELETE")
    with urllib.request.urlopen(gone, timeout=10) as reply:  # not held by a system topic
        assert reply.status == 204


def test_a_pending_cumulative_ack_keeps_the_exclusive_order_for_a_new_consumer(
    txn_client: pulsar.Client,
) -> None:
    """A consumer that acknowledged cumulatively in a transaction goes away (its job was
    killed) while the transaction is open: the next consumer gets the messages from the
    mark-delete position on, in order, those the open transaction covers included (acking
    them conflicts until it ends). Were they skipped, the new consumer would process and
    cumulatively acknowledge later messages; the transaction's abort then delivers the skipped
    ones again, but the later cumulative ack already covers them: lost (found by the
    consume-transform-produce kill campaign)."""
    for kind in (pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover):
        topic = new_topic()
        first = txn_client.subscribe(topic, "sub", kind, initial_position=EARLIEST)
        _fill(txn_client, topic, 3)
        messages = [first.receive(5000) for _ in range(3)]
        cut = txn_client.new_transaction()
        first.acknowledge_cumulative(messages[0], txn=cut)
        first.close()
        second = txn_client.subscribe(topic, "sub", kind)
        again = second.receive(10_000)
        assert again.data() == b"in-0", kind  # not in-1: nothing skipped
        later = txn_client.new_transaction()
        with pytest.raises(pulsar.TransactionConflict):  # the open transaction holds it
            second.acknowledge_cumulative(again, txn=later)
        later.abort()
        cut.abort()
        retry = txn_client.new_transaction()
        second.acknowledge_cumulative(again, txn=retry)  # free now
        retry.commit()
        second.close()
        third = txn_client.subscribe(topic, "sub", kind)
        assert received(third, 2) == [b"in-1", b"in-2"], kind


def test_an_abort_releases_a_message_not_yet_read_once(txn_client: pulsar.Client) -> None:
    """A transaction acknowledged a message the subscription had not read yet (a consumer may
    name any message id); its abort must not queue that message for redelivery as well: the
    reads reach it anyway, and it was delivered twice."""
    topic = new_topic()
    consumer = txn_client.subscribe(
        topic, "sub", SHARED, initial_position=EARLIEST, receiver_queue_size=1
    )
    producer = txn_client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"in-{i}".encode()) for i in range(3)]
    first = consumer.receive(5000)  # the one permit: the reads stop after in-0
    txn = txn_client.new_transaction()
    consumer.acknowledge(ids[2], txn=txn)
    txn.abort()
    consumer.acknowledge(first)
    assert sorted(received(consumer, 2)) == [b"in-1", b"in-2"]

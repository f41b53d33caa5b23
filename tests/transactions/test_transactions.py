"""Transactions end to end: our client, a broker with transactionCoordinatorEnabled."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from raw_connection import RawConnection, T
from txn_helpers import new_topic, received

from starquake import client as pulsar
from starquake.broker import inactive_topics
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.transactions.state import CoordinatorState, TxnStatus
from starquake.client import asyncio as aio
from starquake.common.topic_name import TopicName
from starquake.protocol import client_commands, txn_commands
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import encode_entry, encode_payload_command
from starquake.protocol.wire import pb

EARLIEST = pulsar.InitialPosition.Earliest


def _subscribe(
    client: pulsar.Client, topic: str, kind: pulsar.ConsumerType = pulsar.ConsumerType.Exclusive
) -> pulsar.Consumer:
    return client.subscribe(topic, "sub", kind, initial_position=EARLIEST)


def test_commit_shows_the_messages_of_three_topics_only_then(txn_client: pulsar.Client) -> None:
    topics = [new_topic() for _ in range(3)]
    consumers = [_subscribe(txn_client, t) for t in topics]
    producers = [txn_client.create_producer(t) for t in topics]
    txn = txn_client.new_transaction()
    for i, producer in enumerate(producers):
        producer.send(f"m{i}-a".encode(), txn=txn)
        producer.send_async(f"m{i}-b".encode(), None, txn=txn)
    assert [received(c) for c in consumers] == [[], [], []]
    txn.commit()
    assert txn.state == "COMMITTED"
    assert [received(c, 2) for c in consumers] == [
        [f"m{i}-a".encode(), f"m{i}-b".encode()] for i in range(3)
    ]


def test_aborted_messages_are_never_delivered(txn_client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = _subscribe(txn_client, topic)
    producer = txn_client.create_producer(topic)
    txn = txn_client.new_transaction()
    producer.send(b"aborted", txn=txn)
    txn.abort()
    producer.send(b"plain")
    assert received(consumer, 1) == [b"plain"]
    consumer.close()
    again = _subscribe(txn_client, topic)  # from the stored cursor: nothing left
    assert received(again) == []
    reader = txn_client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(2000).data()] == [b"plain"]
    assert not reader.has_message_available()


@pytest.mark.parametrize(
    ("first_ends", "kind"),
    [
        ("older", pulsar.ConsumerType.Exclusive),
        ("newer", pulsar.ConsumerType.Exclusive),
        ("older", pulsar.ConsumerType.Shared),
        ("newer", pulsar.ConsumerType.KeyShared),
    ],
)
def test_dispatch_stops_at_the_first_open_transaction(
    txn_client: pulsar.Client, first_ends: str, kind: pulsar.ConsumerType
) -> None:
    topic = new_topic()
    consumer = _subscribe(txn_client, topic, kind)
    producer = txn_client.create_producer(topic)
    older, newer = txn_client.new_transaction(), txn_client.new_transaction()
    producer.send(b"before")
    producer.send(b"older", txn=older)
    producer.send(b"between")
    producer.send(b"newer", txn=newer)
    producer.send(b"after")
    assert received(consumer, 1) == [b"before"]  # held at the older transaction's first entry
    if first_ends == "older":
        older.commit()
        assert received(consumer, 2) == [b"older", b"between"]  # held at the newer one
        newer.abort()
        assert received(consumer, 1) == [b"after"]
    else:
        newer.commit()
        assert received(consumer) == []  # the older one still holds everything after it
        older.abort()
        assert received(consumer, 3) == [b"between", b"newer", b"after"]


def test_readers_see_no_message_hidden_by_transactions(txn_client: pulsar.Client) -> None:
    topic = new_topic()
    producer = txn_client.create_producer(topic)
    producer.send(b"plain")
    aborted = txn_client.new_transaction()
    producer.send(b"aborted", txn=aborted)
    aborted.abort()  # the last entries: an aborted message and its marker
    reader = txn_client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(2000).data() == b"plain"
    assert not reader.has_message_available()
    open_ = txn_client.new_transaction()
    producer.send(b"open", txn=open_)
    producer.send(b"after")
    assert not reader.has_message_available()  # held at the open transaction
    open_.commit()
    assert [reader.read_next(2000).data() for _ in range(2)] == [b"open", b"after"]
    assert not reader.has_message_available()


def test_second_commit_is_refused_by_the_client(txn_client: pulsar.Client) -> None:
    txn = txn_client.new_transaction()
    txn.commit()
    with pytest.raises(pulsar.InvalidTxnStatusError):
        txn.commit()
    with pytest.raises(pulsar.InvalidTxnStatusError):
        txn.abort()


def _connected(broker: EmbeddedBroker) -> RawConnection:
    cnx = RawConnection(broker.broker_port)
    cnx.handshake()
    return cnx


def test_end_txn_of_unknown_and_ended_transactions(txn_broker: EmbeddedBroker) -> None:
    with _connected(txn_broker) as cnx:
        cnx.send_command(txn_commands.end_txn(1, 0, 987_654_321, txn_commands.COMMIT))
        unknown = cnx.next().end_txn_response
        assert (unknown.request_id, unknown.error) == (1, ServerError.TransactionNotFound)
        cnx.send_command(txn_commands.new_txn(2, 0, 60_000))
        least = cnx.next().new_txn_response.txnid_least_bits
        cnx.send_command(txn_commands.end_txn(3, 0, least, txn_commands.ABORT))
        assert not cnx.next().end_txn_response.HasField("error")
        # As Pulsar's coordinator: an ended transaction is forgotten.
        cnx.send_command(txn_commands.end_txn(4, 0, least, txn_commands.COMMIT))
        assert cnx.next().end_txn_response.error == ServerError.TransactionNotFound
        cnx.send_command(txn_commands.add_partition_to_txn(5, 0, least, [new_topic()]))
        assert cnx.next().add_partition_to_txn_response.error == ServerError.TransactionNotFound


def test_end_txn_on_a_transaction_being_ended_otherwise(txn_broker: EmbeddedBroker) -> None:
    with _connected(txn_broker) as cnx:
        cnx.send_command(txn_commands.new_txn(1, 0, 60_000))
        least = cnx.next().new_txn_response.txnid_least_bits
        cnx.send_command(txn_commands.end_txn(2, 0, least, txn_commands.COMMIT))
        cnx.send_command(txn_commands.end_txn(3, 0, least, txn_commands.ABORT))
        answers = [cnx.next().end_txn_response for _ in range(2)]
        replies = {r.request_id: r for r in answers}
        assert not replies[2].HasField("error")
        assert replies[3].error in (ServerError.InvalidTxnStatus, ServerError.TransactionNotFound)


def test_unknown_coordinator(txn_broker: EmbeddedBroker) -> None:
    with _connected(txn_broker) as cnx:
        cnx.send_command(txn_commands.tc_client_connect_request(1, 7))
        reply = cnx.next().tc_client_connect_response
        assert reply.error == ServerError.TransactionCoordinatorNotFound
        cnx.send_command(txn_commands.new_txn(2, 7, 1000))
        assert cnx.next().new_txn_response.error == ServerError.TransactionCoordinatorNotFound


def test_transactions_off_answer_not_allowed(broker: EmbeddedBroker, topic: str) -> None:
    with _connected(broker) as cnx:
        cnx.send_command(txn_commands.tc_client_connect_request(1, 0))
        cnx.send_command(txn_commands.new_txn(2, 0, 1000))
        cnx.send_command(txn_commands.end_txn(3, 0, 0, txn_commands.COMMIT))
        replies = [cnx.next() for _ in range(3)]
        assert [(r.type, r.error.request_id, r.error.error) for r in replies] == [
            (T.ERROR, n, ServerError.NotAllowedError) for n in (1, 2, 3)
        ]
        cnx.send_command(_raw_producer(topic))
        assert cnx.next().type == T.PRODUCER_SUCCESS
        cnx.send(_txn_send(1, 0, (0, 0)))
        refused = cnx.next().send_error
        assert (refused.error, refused.message) == (
            ServerError.NotAllowedError,
            "Transactions are not enabled.",
        )
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
    try:
        with pytest.raises(pulsar.InvalidConfiguration):
            client.new_transaction()
    finally:
        client.close()


def test_a_transaction_past_its_timeout_is_aborted(txn_client: pulsar.Client) -> None:
    topic = new_topic()
    consumer = _subscribe(txn_client, topic)
    producer = txn_client.create_producer(topic)
    txn = txn_client.new_transaction(timeout_ms=1500)
    producer.send(b"timed out", txn=txn)
    producer.send(b"plain")
    assert received(consumer, 1) == [b"plain"]  # held until the abort, then alone
    with pytest.raises(pulsar.TransactionNotFound):
        txn.commit()


def test_transaction_ids_never_repeat(txn_client: pulsar.Client) -> None:
    ids = {txn_client.new_transaction().txn_id for _ in range(5)}
    assert len(ids) == 5
    assert {most for most, _ in ids} == {0}


def test_send_of_an_ended_transaction_is_refused(txn_client: pulsar.Client) -> None:
    topic = new_topic()
    producer = txn_client.create_producer(topic, send_timeout_millis=2000)
    txn = txn_client.new_transaction()
    producer.send(b"in", txn=txn)
    txn.commit()
    with pytest.raises(pulsar.InvalidTxnStatusError):  # refused by the client first
        producer.send(b"late", txn=txn)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and txn.state != "COMMITTED":
        time.sleep(0.05)
    assert txn.state == "COMMITTED"


async def _inactive_deletion_and_trimming(broker: EmbeddedBroker) -> tuple[int, int]:
    service = broker.service
    deleted = await inactive_topics.delete_inactive_topics(service, now=time.monotonic() + 1e6)
    return deleted, service.trim_ledgers()


def test_the_coordinator_log_outlives_inactivity_rollover_and_trimming(tmp_path: Path) -> None:
    settings = {
        "transactionCoordinatorEnabled": True,
        "managedLedgerMaxEntriesPerLedger": 2,
        "brokerDeleteInactiveTopicsEnabled": True,
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": 1,
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        client = pulsar.Client(broker.service_url, enable_transaction=True)
        try:
            ids = [client.new_transaction().txn_id for _ in range(5)]
        finally:
            client.close()
        broker.call(_inactive_deletion_and_trimming(broker))
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        client = pulsar.Client(broker.service_url, enable_transaction=True)
        try:
            txn = client.new_transaction()
            assert txn.txn_id[1] > max(least for _, least in ids)
            txn.commit()  # its five predecessors were replayed as open, this one is known
        finally:
            client.close()


def _raw_producer(topic: str) -> T:
    return client_commands.producer(
        topic,
        1,
        1,
        producer_name="raw",
        user_provided_name=True,
        epoch=0,
        access_mode=0,
        metadata={},
    )


def _txn_send(producer_id: int, sequence_id: int, txn: tuple[int, int]) -> bytes:
    metadata = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1)
    metadata.txnid_most_bits, metadata.txnid_least_bits = txn
    cmd = client_commands.send(producer_id, sequence_id, 1, sequence_id)
    cmd.send.txnid_most_bits, cmd.send.txnid_least_bits = txn
    return encode_payload_command(cmd, encode_entry(metadata, b"late"))


def test_a_send_in_a_transaction_that_is_not_open_is_refused(txn_broker: EmbeddedBroker) -> None:
    # A late send (one the client had in flight when its transaction ended) would otherwise
    # open the transaction again on the topic and hold its dispatch back for ever.
    topic = new_topic()
    with _connected(txn_broker) as cnx:
        cnx.send_command(_raw_producer(topic))
        assert cnx.next().type == T.PRODUCER_SUCCESS
        cnx.send_command(txn_commands.new_txn(2, 0, 60_000))
        least = cnx.next().new_txn_response.txnid_least_bits
        cnx.send(_txn_send(1, 0, (0, least)))
        assert cnx.next().type == T.SEND_RECEIPT
        cnx.send_command(txn_commands.end_txn(3, 0, least, txn_commands.ABORT))
        assert not cnx.next().end_txn_response.HasField("error")
        cnx.send(_txn_send(1, 1, (0, least)))
        refused = cnx.next().send_error
        assert (refused.error, refused.message) == (
            ServerError.NotAllowedError,
            f"Transaction (0,{least}) already ended on {topic}",
        )
        cnx.send(_txn_send(1, 2, (0, 123_456_789)))
        refused = cnx.next().send_error
        assert (refused.error, refused.message) == (
            ServerError.NotAllowedError,
            "Transaction (0,123456789) not found",
        )


def test_a_partitioned_topic_in_a_transaction(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    topic = new_topic()
    txn_broker.create_partitioned_topic(topic, 2)
    consumer = _subscribe(txn_client, topic)
    producer = txn_client.create_producer(topic, batching_enabled=True)
    txn = txn_client.new_transaction()
    for i in range(4):  # round robin: both partitions take part
        producer.send(f"m{i}".encode(), txn=txn)
    assert received(consumer) == []
    txn.commit()
    assert sorted(received(consumer, 4)) == [b"m0", b"m1", b"m2", b"m3"]


def test_the_asyncio_api(txn_broker: EmbeddedBroker) -> None:
    async def scenario() -> list[bytes]:
        client = aio.Client(txn_broker.service_url, enable_transaction=True)
        try:
            topic = new_topic()
            consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
            producer = await client.create_producer(topic)
            aborted = await client.new_transaction()
            await producer.send(b"aborted", txn=aborted)
            await aborted.abort()
            committed = await client.new_transaction(timeout_ms=10_000)
            await producer.send(b"committed", txn=committed)
            await committed.commit()
            assert (aborted.state, committed.state) == ("ABORTED", "COMMITTED")
            msg = await consumer.receive()
            return [msg.data()]
        finally:
            await client.close()

    assert asyncio.run(scenario()) == [b"committed"]


def test_a_topic_sent_to_without_being_added_ends_with_the_transaction(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    topic = new_topic()
    consumer = _subscribe(txn_client, topic)
    with _connected(txn_broker) as cnx:
        cnx.send_command(_raw_producer(topic))
        assert cnx.next().type == T.PRODUCER_SUCCESS
        cnx.send_command(txn_commands.new_txn(2, 0, 60_000))
        least = cnx.next().new_txn_response.txnid_least_bits
        cnx.send(_txn_send(1, 0, (0, least)))  # no ADD_PARTITION_TO_TXN before
        assert cnx.next().type == T.SEND_RECEIPT
        assert received(consumer) == []
        cnx.send_command(txn_commands.end_txn(3, 0, least, txn_commands.COMMIT))
        assert not cnx.next().end_txn_response.HasField("error")
    assert received(consumer, 1) == [b"late"]


def test_a_transaction_logged_as_committing_is_committed_at_restart(tmp_path: Path) -> None:
    topics = [new_topic(), new_topic()]
    with EmbeddedBroker(tmp_path / "data", transactionCoordinatorEnabled=True) as broker:
        client = pulsar.Client(broker.service_url, enable_transaction=True)
        try:
            txn = client.new_transaction()
            for topic in topics:
                client.create_producer(topic).send(b"committing", txn=txn)
            # The broker stops after logging COMMITTING, before any partition ended it.
            coordinator = broker.service.transactions.coordinator(0)
            record = CoordinatorState.status_record(txn.txn_id[1], TxnStatus.COMMITTING)
            broker.call(coordinator._log(record))
        finally:
            client.close()
    with EmbeddedBroker(tmp_path / "data", transactionCoordinatorEnabled=True) as broker:
        client = pulsar.Client(broker.service_url, enable_transaction=True)
        try:
            consumers = [_subscribe(client, topic) for topic in topics]
            assert [received(c, 1) for c in consumers] == [[b"committing"], [b"committing"]]
            with _connected(broker) as cnx:  # ended, hence forgotten
                cnx.send_command(txn_commands.end_txn(1, *txn.txn_id, txn_commands.COMMIT))
                assert cnx.next().end_txn_response.error == ServerError.TransactionNotFound
        finally:
            client.close()


def test_end_txn_on_partition_and_subscription_requests(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    topic = new_topic()
    consumer = _subscribe(txn_client, topic)
    with _connected(txn_broker) as cnx:
        cnx.send_command(_raw_producer(topic))
        assert cnx.next().type == T.PRODUCER_SUCCESS
        cnx.send_command(txn_commands.new_txn(2, 0, 60_000))
        least = cnx.next().new_txn_response.txnid_least_bits
        cnx.send_command(txn_commands.add_subscription_to_txn(3, 0, least, [(topic, "sub")]))
        added = cnx.next().add_subscription_to_txn_response
        assert (added.request_id, added.HasField("error")) == (3, False)
        cnx.send(_txn_send(1, 0, (0, least)))
        assert cnx.next().type == T.SEND_RECEIPT
        # What a coordinator sends the broker of a partition: the topic shows the message.
        cnx.send_command(txn_commands.end_txn_on_partition(4, 0, least, topic, txn_commands.COMMIT))
        ended = cnx.next().end_txn_on_partition_response
        assert (ended.request_id, ended.HasField("error")) == (4, False)
        assert received(consumer, 1) == [b"late"]
        on_subscription = T(type=T.END_TXN_ON_SUBSCRIPTION)
        request = on_subscription.end_txn_on_subscription
        request.request_id, request.txnid_most_bits, request.txnid_least_bits = 5, 0, least
        request.subscription.topic, request.subscription.subscription = topic, "sub"
        cnx.send_command(on_subscription)
        assert cnx.next().end_txn_on_subscription_response.request_id == 5


def test_commit_waits_for_the_sends_queued_before_it(txn_client: pulsar.Client) -> None:
    topics = [new_topic(), new_topic()]
    consumers = [_subscribe(txn_client, t) for t in topics]
    producers = [txn_client.create_producer(t, block_if_queue_full=True) for t in topics]
    txn = txn_client.new_transaction()
    for i in range(300):
        for producer in producers:
            producer.send_async(b"%d" % i, None, txn=txn)
    txn.commit()  # at once: the queued sends are part of the transaction
    assert [len(received(c, 300)) for c in consumers] == [300, 300]


async def _trim(broker: EmbeddedBroker) -> int:
    return broker.service.trim_ledgers()


def test_trimmed_ledgers_leave_the_buffers_hidden_positions(tmp_path: Path) -> None:
    settings = {
        "transactionCoordinatorEnabled": True,
        "managedLedgerMaxEntriesPerLedger": 2,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        client = pulsar.Client(broker.service_url, enable_transaction=True)
        try:
            topic = new_topic()
            consumer = _subscribe(client, topic)
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(6):  # a message and a marker each: three ledgers
                txn = client.new_transaction()
                producer.send(b"%d" % i, txn=txn)
                txn.commit()
            assert received(consumer, 6) == [b"%d" % i for i in range(6)]
            buffer = broker.service.transactions.buffers[topic]
            ledger = broker.service.loaded_topic(TopicName.parse(topic)).ledger
            first = ledger.first_position()
            deadline = time.monotonic() + 10
            while ledger.first_position() == first and time.monotonic() < deadline:
                broker.call(_trim(broker))  # once the acks reached the cursor
                time.sleep(0.05)
            first = ledger.first_position()
            assert first is not None and min(buffer.hidden) < first  # trimmed, still known
            txn = client.new_transaction()
            producer.send(b"after", txn=txn)
            txn.commit()  # its end cuts the hidden positions to what is stored
            assert min(buffer.hidden) >= first
            assert received(consumer, 1) == [b"after"]
        finally:
            client.close()


def test_a_send_refused_as_not_allowed_fails_without_a_reconnect(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    """The broker refuses a message of a transaction that ended on the topic (here at its
    timeout, unknown to the client) with NotAllowedError: the send fails with it, as in the
    Java client, instead of the client reconnecting and sending it again until its send
    timeout (closing the connection of every other producer and consumer each time)."""
    topic = new_topic()
    consumer = _subscribe(txn_client, topic)
    producer = txn_client.create_producer(topic, send_timeout_millis=60_000)
    txn = txn_client.new_transaction(timeout_ms=500)
    producer.send(b"in time", txn=txn)  # registers the topic with the transaction
    coordinator = txn_broker.service.transactions.coordinators[txn.txn_id[0]]
    deadline = time.monotonic() + 30
    while txn.txn_id[1] in coordinator.state.txns and time.monotonic() < deadline:
        time.sleep(0.05)
    assert txn.txn_id[1] not in coordinator.state.txns  # aborted at its timeout
    assert txn.state == "OPEN"  # the client does not know
    with pytest.raises(pulsar.NotAllowedError, match="already ended"):
        producer.send(b"late", txn=txn)
    producer.send(b"plain")  # the producer goes on
    assert received(consumer, 1) == [b"plain"]

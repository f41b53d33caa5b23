"""Topic compaction with the official client: compacted readers and consumers, restarts,
trimmed ledgers, producers during a compaction, thresholds, partitioned topics, deletion."""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import quote

import pulsar
import pytest
from admin_http import admin_json
from compaction_helpers import (
    admin_path,
    compact,
    compaction_status,
    id_key,
    keyed_data,
    pairs,
    read_count,
    read_quiet,
    send_all,
    wait_compacted_automatically,
    wait_compaction,
)
from official_client import make_client, official_client
from polling import wait_for

import starquake.client
from starquake.broker.embedded import EmbeddedBroker


def _name() -> str:
    return f"persistent://public/default/c-{uuid.uuid4().hex[:10]}"


def _compacted_reader(client: pulsar.Client, topic: str, **kwargs: object) -> pulsar.Reader:
    start = kwargs.pop("start", pulsar.MessageId.earliest)
    return client.create_reader(topic, start, is_read_compacted=True, **kwargs)


def test_compacted_reader_gets_the_latest_value_of_each_key_also_after_a_restart(
    tmp_path: Path,
) -> None:
    topic = _name()
    messages, expected = keyed_data(10_000, keys=100, deleted=10)
    later = [("k0", b"k0:back"), ("k50", b"k50:new"), ("k51", b""), ("k99", b"k99:new")]
    with EmbeddedBroker(tmp_path / "data") as broker:
        client = official_client(broker)
        plain = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        send_all(plain, messages[:5000])
        batching = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=50,
            batching_max_publish_delay_ms=5,
            block_if_queue_full=True,
        )
        send_all(batching, messages[5000:])
        assert compaction_status(broker, topic) == {"status": "NOT_RUN", "lastError": ""}
        compact(broker, topic)

        reader = _compacted_reader(client, topic)
        got = read_count(reader, len(expected))
        assert pairs(got) == expected
        assert not {k for k, _ in pairs(got)} & {f"k{j}" for j in range(10)}  # deleted keys
        assert [id_key(m) for m in got] == sorted(id_key(m) for m in got)
        # messages produced after the compaction follow, as they are
        send_all(plain, later)
        assert pairs(read_count(reader, len(later))) == later

        full = read_count(
            client.create_reader(topic, pulsar.MessageId.earliest), len(messages) + len(later)
        )
        assert pairs(full) == messages + later

        internal = admin_json(broker, "GET", admin_path(topic, "internalStats"))[1]
        assert internal["compactedLedger"]["ledgerId"] >= 0
        assert internal["compactedLedger"]["entries"] > 0
        assert "__compaction" in internal["cursors"]
        stats = admin_json(broker, "GET", admin_path(topic, "stats"))[1]
        assert stats["compaction"]["lastCompactionRemovedEventCount"] == 10_000 - len(expected)
        assert stats["compaction"]["lastCompactionSucceedTimestamp"] > 0
        client.close()

    with EmbeddedBroker(tmp_path / "data") as broker:
        client = official_client(broker)
        got = read_count(_compacted_reader(client, topic), len(expected) + len(later))
        assert pairs(got) == expected + later
        # as Pulsar's, the status is that of compactions run since the topic was loaded
        assert compaction_status(broker, topic)["status"] == "NOT_RUN"
        compact(broker, topic)
        latest = dict(expected + later)
        latest.pop("k51")
        got = pairs(read_count(_compacted_reader(client, topic), len(latest)))
        assert dict(got) == latest
        # every message is still in the topic (read_count also checks that none follows)
        read_count(client.create_reader(topic, pulsar.MessageId.earliest), 10_004)
        client.close()


def test_compacted_entries_of_trimmed_ledgers_are_still_served(tmp_path: Path) -> None:
    """The view outlives the ledgers it was made from: they are trimmed once the compaction
    passed them, and a compacted reader from the earliest position still gets every key."""
    topic = _name()
    messages, expected = keyed_data(600, keys=30, deleted=3, seed=11)
    settings = {
        "managedLedgerMaxEntriesPerLedger": 50,
        "managedLedgerMinLedgerRolloverTimeMinutes": 0,
        "managedLedgerTrimIntervalSeconds": 0.1,
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        client = official_client(broker)
        # As in Pulsar, a topic without subscriptions keeps nothing (no retention here): its
        # sealed ledgers go at the next trim, and the __compaction cursor only exists from the
        # first compaction. A subscription holds the data until the compaction has run, then
        # goes, so that the trim is held by the __compaction cursor alone.
        holder = client.subscribe(
            topic, "holder", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=1
        )
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        send_all(producer, messages)
        compact(broker, topic)
        internal = admin_json(broker, "GET", admin_path(topic, "internalStats"))[1]
        assert internal["compactedLedger"]["entries"] == len(expected)
        holder.unsubscribe()
        wait_for(
            lambda: (
                len(admin_json(broker, "GET", admin_path(topic, "internalStats"))[1]["ledgers"])
                <= 2
            ),
            "ledgers trimmed",
        )
        assert len(read_quiet(client.create_reader(topic, pulsar.MessageId.earliest))) < 100

        got = read_count(_compacted_reader(client, topic), len(expected))
        assert pairs(got) == expected
        # a reader asking for a position inside a trimmed ledger starts there in the view
        fifth = got[4].message_id()
        from_fifth = read_quiet(_compacted_reader(client, topic, start=fifth))
        assert pairs(from_fifth) == expected[5:]
        # so does a durable subscription created at the earliest position now
        late = client.subscribe(
            topic,
            "late",
            is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        assert pairs(read_quiet(late)) == expected
        late.close()

        # the next compaction starts from the previous view (its ledgers are gone)
        more, _ = keyed_data(300, keys=30, deleted=0, seed=12)
        send_all(producer, more)
        compact(broker, topic)
        latest: dict[str, bytes] = {}
        for key, value in messages + more:
            latest[key] = value
        wanted = {k: v for k, v in latest.items() if v}
        got_all = pairs(read_quiet(_compacted_reader(client, topic)))
        assert dict(got_all) == wanted and len(got_all) == len(wanted)
        client.close()


def test_durable_exclusive_consumer_reads_compacted_and_gets_its_unacked_again(
    broker: EmbeddedBroker,
) -> None:
    topic = _name()
    client = official_client(broker)
    producer = client.create_producer(topic, batching_enabled=False)
    messages, expected = keyed_data(300, keys=20, deleted=2, seed=3)
    send_all(producer, messages)
    compact(broker, topic)

    def subscribe(kind: pulsar.ConsumerType = pulsar.ConsumerType.Exclusive) -> pulsar.Consumer:
        return client.subscribe(
            topic,
            "durable",
            consumer_type=kind,
            is_read_compacted=True,
            initial_position=pulsar.InitialPosition.Earliest,
        )

    consumer = subscribe()
    got = read_quiet(consumer)
    assert pairs(got) == expected
    for msg in got[:7]:
        consumer.acknowledge(msg)
    consumer.close()  # sends the pending acknowledgments first

    consumer = subscribe(pulsar.ConsumerType.Failover)
    again = read_quiet(consumer)
    assert pairs(again) == expected[7:]  # only what was not acknowledged
    producer.send(b"live", partition_key="k1")
    live = consumer.receive(5000)
    assert (live.partition_key(), live.data()) == ("k1", b"live")
    client.close()


@pytest.mark.parametrize("kind", ["Shared", "KeyShared"])
def test_read_compacted_is_refused_on_shared_subscriptions(
    broker: EmbeddedBroker, kind: str
) -> None:
    """The official client refuses the combination itself; a client that asks anyway (ours
    sends what it is given) is refused by the broker, with Pulsar's message."""
    topic = _name()
    client = official_client(broker)
    client.create_producer(topic).send(b"x", partition_key="k")
    with pytest.raises(pulsar.InvalidConfiguration):
        client.subscribe(
            topic,
            "shared",
            consumer_type=getattr(pulsar.ConsumerType, kind),
            is_read_compacted=True,
        )
    ours = make_client(starquake.client, broker)
    with pytest.raises(starquake.client.NotAllowedError, match="failover or exclusive"):
        ours.subscribe(
            topic,
            "shared",
            consumer_type=getattr(starquake.client.ConsumerType, kind),
            is_read_compacted=True,
        )
    ours.close()
    # nothing was created: the same name works as an exclusive compacted subscription
    consumer = client.subscribe(
        topic, "shared", is_read_compacted=True, initial_position=pulsar.InitialPosition.Earliest
    )
    assert consumer.receive(5000).data() == b"x"
    client.close()


def test_producers_are_not_held_while_a_compaction_runs(broker: EmbeddedBroker) -> None:
    topic = _name()
    client = official_client(broker)
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=100,
        batching_max_publish_delay_ms=5,
        block_if_queue_full=True,
    )
    for i in range(150_000):
        producer.send_async(f"v{i}".encode(), None, partition_key=f"k{i % 2000}")
    producer.flush()
    plain = client.create_producer(topic, batching_enabled=False)

    status, _ = admin_json(broker, "PUT", admin_path(topic, "compaction"))
    assert status == 204
    status, body = admin_json(broker, "PUT", admin_path(topic, "compaction"))
    assert status == 409 and "already in progress" in body["reason"]
    sent_while_running = []
    while compaction_status(broker, topic)["status"] == "RUNNING":
        value = f"during-{len(sent_while_running)}".encode()
        plain.send(value, partition_key="during")  # returns once the broker has stored it
        sent_while_running.append(value)
    assert wait_compaction(broker, topic)["status"] == "SUCCESS"
    assert sent_while_running, "the compaction ended before a send could be made"

    # what was sent during the compaction lies after its horizon: compacted readers get it all
    got = pairs(read_quiet(_compacted_reader(client, topic)))
    assert [v for k, v in got if k == "during"] == sent_while_running
    assert len({k for k, _ in got if k != "during"}) == 2000
    client.close()


def test_compaction_threshold_triggers_compactions(tmp_path: Path) -> None:
    settings = {
        "brokerServiceCompactionThresholdInBytes": 2000,
        "brokerServiceCompactionMonitorIntervalInSeconds": 0.1,
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        client = official_client(broker)
        topic = _name()
        producer = client.create_producer(topic, batching_enabled=False)
        messages, expected = keyed_data(200, keys=10, deleted=1)
        send_all(producer, messages)
        wait_compacted_automatically(broker, topic)
        wait_compaction(broker, topic)
        got = pairs(read_quiet(_compacted_reader(client, topic)))
        assert got[: len(expected)] == expected

        # a topic policy overrides the broker's threshold: never compact this one
        quiet = _name()
        client.create_producer(quiet).send(b"first", partition_key="k")
        status, _ = admin_json(broker, "POST", admin_path(quiet, "compactionThreshold"), 10**12)
        assert status == 204
        send_all(client.create_producer(quiet, batching_enabled=False), messages)
        # A topic without the policy, written after the quiet one, compacts: a threshold check
        # has looked at every topic since (one check covers all of them).
        control = _name()
        send_all(client.create_producer(control, batching_enabled=False), messages)
        wait_compacted_automatically(broker, control)
        assert compaction_status(broker, quiet)["status"] == "NOT_RUN"
        client.close()


def test_a_namespace_threshold_enables_automatic_compaction(tmp_path: Path) -> None:
    settings = {"brokerServiceCompactionMonitorIntervalInSeconds": 0.1}
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        client = official_client(broker)
        topic = _name()
        path = "/admin/v2/namespaces/public/default/compactionThreshold"
        messages, expected = keyed_data(100, keys=5, deleted=0)
        send_all(client.create_producer(topic, batching_enabled=False), messages)
        # The policy comes after the data: the one compaction it triggers covers all of it (set
        # before, a compaction could start midway and the view would hold only a prefix).
        assert admin_json(broker, "PUT", path, 1000)[0] == 204
        wait_compacted_automatically(broker, topic)
        got = pairs(read_quiet(_compacted_reader(client, topic)))
        assert got[: len(expected)] == expected
        client.close()


def test_partitioned_topic_compacts_every_partition(broker: EmbeddedBroker) -> None:
    topic = _name()
    broker.create_partitioned_topic(topic, 3)
    client = official_client(broker)
    messages, expected = keyed_data(900, keys=40, deleted=4)
    send_all(client.create_producer(topic, batching_enabled=False), messages)
    compact(broker, topic)
    for i in range(3):
        assert compaction_status(broker, f"{topic}-partition-{i}")["status"] == "SUCCESS"
    consumer = client.subscribe(
        topic,
        "compacted",
        is_read_compacted=True,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    got = pairs(read_quiet(consumer))
    assert sorted(got) == sorted(expected)
    client.close()


def test_compaction_of_an_unknown_topic_is_not_found(broker: EmbeddedBroker) -> None:
    unknown = _name()
    assert admin_json(broker, "PUT", admin_path(unknown, "compaction"))[0] == 404
    assert admin_json(broker, "GET", admin_path(unknown, "compaction"))[0] == 404


def test_empty_compacted_view_has_no_message_available(broker: EmbeddedBroker) -> None:
    """Every key deleted: a compacted reader has nothing to read, and says so (the broker
    answers its last-message-id request from the view)."""
    topic = _name()
    client = official_client(broker)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"value", partition_key="k")
    producer.send(b"", partition_key="k")
    compact(broker, topic)
    reader = _compacted_reader(client, topic)
    assert not reader.has_message_available()
    producer.send(b"again", partition_key="k")
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"again"
    client.close()


def test_deleting_a_topic_deletes_its_compacted_view(broker: EmbeddedBroker) -> None:
    topic = _name()
    client = official_client(broker)
    producer = client.create_producer(topic, batching_enabled=False)
    send_all(producer, [("a", b"1"), ("a", b"2"), ("b", b"3")])
    compact(broker, topic)
    service = broker.service
    key = "/compaction/" + quote(topic, safe="")
    directory = service.topics[topic].ledger.directory
    assert service.metadata.get(key) is not None
    assert list(directory.glob("*.compacted"))
    producer.close()
    status, _ = admin_json(broker, "DELETE", admin_path(topic, "").rstrip("/") + "?force=true")
    assert status == 204
    assert service.metadata.get(key) is None
    assert not directory.exists()

    client.create_producer(topic).send(b"fresh", partition_key="a")
    got = pairs(read_quiet(_compacted_reader(client, topic)))
    assert got == [("a", b"fresh")]
    client.close()

"""The operators' commands of ``starquake admin`` against a real broker, each checked by its
effect: brokers (list, leader, healthcheck, configuration), ``/status.html``, clusters get, topic
lookups, messages by id, time and position, truncate, expiry on every subscription, precise
backlogs, the internal stats of a partitioned topic, and namespace unload, clear-backlog and
topics."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pulsar
import pytest
from click.testing import CliRunner, Result
from polling import wait_for

from starquake.broker.admin.brokers import HEARTBEAT_KEY
from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli

SECRET = "data:;base64,c2VjcmV0LWtleS1ieXRlcw=="


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = tmp_path_factory.mktemp("admin-ops") / "data"
    with EmbeddedBroker(data, tokenSecretKey=SECRET) as running:
        yield running


@pytest.fixture(scope="module")
def client(cli_broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    made = pulsar.Client(cli_broker.service_url)
    yield made
    made.close()


def admin(broker: EmbeddedBroker, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(
        cli, ["admin", "--admin-url", broker.web_service_url, *args], input=stdin
    )


def ok(broker: EmbeddedBroker, *args: str) -> Any:
    """``admin --output json ARGS``: success expected, its JSON (None if it printed none)."""
    result = admin(broker, "--output", "json", *args)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return json.loads(result.stdout) if result.stdout.strip() else None


def name() -> str:
    return f"persistent://public/default/ops-{uuid.uuid4().hex[:8]}"


def produce(client: pulsar.Client, topic: str, count: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}) for i in range(count)]
    producer.close()
    return ids


def backlogs(broker: EmbeddedBroker, topic: str) -> dict[str, int]:
    stats = ok(broker, "topics", "stats", topic, "-gpb")
    return {sub: s["msgBacklog"] for sub, s in stats["subscriptions"].items()}


def test_status_health_brokers_and_clusters(cli_broker: EmbeddedBroker) -> None:
    with urllib.request.urlopen(cli_broker.web_service_url + "/status.html") as reply:
        assert (reply.status, reply.read()) == (200, b"OK")
    result = admin(cli_broker, "--output", "table", "brokers", "healthcheck")
    assert (result.exit_code, result.stdout) == (0, "ok\n")
    assert cli_broker.service.metadata.get(HEARTBEAT_KEY) is not None  # it wrote one

    host_port = cli_broker.web_service_url.split("://", 1)[1]
    assert ok(cli_broker, "brokers", "list") == [host_port]
    assert ok(cli_broker, "brokers", "list", "standalone") == [host_port]
    assert admin(cli_broker, "brokers", "list", "nowhere").exit_code == 1  # 404
    leader = {"serviceUrl": cli_broker.web_service_url, "brokerId": host_port}
    assert ok(cli_broker, "brokers", "leader-broker") == leader  # itself when standalone
    runtime = ok(cli_broker, "brokers", "get-runtime-config")
    assert runtime["bindAddress"] == "127.0.0.1"
    assert runtime["webServicePort"] == "0"  # as configured: any free port
    assert runtime["tokenSecretKey"] == "********"
    assert SECRET not in json.dumps(runtime)
    assert ok(cli_broker, "brokers", "list-dynamic-config") == []
    assert ok(cli_broker, "brokers", "get-all-dynamic-config") == {}

    cluster = ok(cli_broker, "clusters", "get", "standalone")
    assert cluster["serviceUrl"] == cli_broker.web_service_url
    assert cluster["brokerServiceUrl"] == cli_broker.service_url
    assert admin(cli_broker, "clusters", "get", "nowhere").exit_code == 1
    assert admin(cli_broker, "clusters", "create", "c2").exit_code == 2  # no --url


def test_lookups(cli_broker: EmbeddedBroker, client: pulsar.Client) -> None:
    topic = name()
    produce(client, topic, 1)
    shown = admin(cli_broker, "--output", "table", "topics", "lookup", topic)
    assert (shown.exit_code, shown.stdout) == (0, cli_broker.service_url + "\n")
    assert ok(cli_broker, "topics", "lookup", topic)["brokerUrl"] == cli_broker.service_url
    partitioned = name()
    ok(cli_broker, "topics", "create-partitioned-topic", partitioned, "-p", "3")
    assert ok(cli_broker, "topics", "partitioned-lookup", partitioned) == {
        f"{partitioned}-partition-{i}": cli_broker.service_url for i in range(3)
    }
    internal = ok(cli_broker, "topics", "partitioned-stats-internal", partitioned)
    assert internal["metadata"] == {"partitions": 3}
    assert sorted(internal["partitions"]) == [f"{partitioned}-partition-{i}" for i in range(3)]
    assert all("ledgers" in s for s in internal["partitions"].values())
    assert admin(cli_broker, "topics", "partitioned-stats-internal", topic).exit_code == 1


def test_messages_by_id_time_and_position(
    cli_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = name()
    ids = produce(client, topic, 5)
    third = ok(cli_broker, "topics", "get-message-by-id", topic, "-l", str(ids[2].ledger_id()),
               "-e", str(ids[2].entry_id()))  # fmt: skip
    assert (third["payload"], third["properties"]) == ("m2", {"i": "2"})
    assert third["messageId"] == f"{ids[2].ledger_id()}:{ids[2].entry_id()}"
    missing = admin(cli_broker, "topics", "get-message-by-id", topic, "-l", "999999", "-e", "0")
    assert missing.exit_code == 1

    assert ok(cli_broker, "topics", "examine-messages", topic)["payload"] == "m4"
    second = ok(cli_broker, "topics", "examine-messages", topic, "-i", "earliest", "-m", "2")
    assert second["payload"] == "m1"
    assert ok(cli_broker, "topics", "examine-messages", topic, "-m", "5")["payload"] == "m0"
    assert admin(cli_broker, "topics", "examine-messages", topic, "-m", "6").exit_code == 1

    # a later message, published after the first five: found by its publish time
    first_publish = _publish_time(client, topic, ids[0])
    wait_for(lambda: time.time() * 1000 > first_publish + 2, "the clock to move on")
    later = produce(client, topic, 1)[0]
    publish = _publish_time(client, topic, later)
    iso = datetime.fromtimestamp(publish / 1000, UTC).isoformat(timespec="milliseconds")
    found = ok(cli_broker, "topics", "get-message-id", topic, "-d", iso)
    assert (found["ledgerId"], found["entryId"]) == (later.ledger_id(), later.entry_id())
    at_start = datetime.fromtimestamp(first_publish / 1000, UTC).isoformat()
    found = ok(cli_broker, "topics", "get-message-id", topic, "-d", at_start)
    assert (found["ledgerId"], found["entryId"]) == (ids[0].ledger_id(), ids[0].entry_id())
    future = datetime.fromtimestamp(publish / 1000 + 3600, UTC).isoformat()
    assert admin(cli_broker, "topics", "get-message-id", topic, "-d", future).exit_code == 1
    assert admin(cli_broker, "topics", "get-message-id", topic, "-d", "yesterday").exit_code == 2


def _publish_time(client: pulsar.Client, topic: str, message_id: pulsar.MessageId) -> int:
    reader = client.create_reader(topic, message_id, start_message_id_inclusive=True)
    try:
        return int(reader.read_next(10_000).publish_timestamp())
    finally:
        reader.close()


def test_truncate_removes_what_subscriptions_could_read(
    cli_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = name()
    ok(cli_broker, "topics", "create-subscription", topic, "-s", "s", "-m", "earliest")
    produce(client, topic, 10)
    assert backlogs(cli_broker, topic) == {"s": 10}
    ok(cli_broker, "topics", "truncate", topic)
    assert backlogs(cli_broker, topic) == {"s": 0}
    internal = ok(cli_broker, "topics", "stats-internal", topic)
    assert internal["numberOfEntries"] == 0
    assert internal["totalSize"] == 0
    # nothing old is left to read, from the subscription or from the earliest position
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    reader.close()
    produce(client, topic, 1)
    consumer = client.subscribe(topic, "s")
    first = consumer.receive(10_000)
    assert first.data() == b"m0"  # the new message, none of the ten before it
    consumer.acknowledge(first)
    consumer.close()
    assert ok(cli_broker, "topics", "examine-messages", topic, "-i", "earliest")["payload"] == "m0"


def _compact(broker: EmbeddedBroker, topic: str) -> None:
    ok(broker, "topics", "compact", topic)
    assert ok(broker, "topics", "compaction-status", topic, "-w")["status"] == "SUCCESS"


def _compacted_pairs(client: pulsar.Client, topic: str) -> list[tuple[str, bytes]]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    got = []
    try:
        while True:
            try:
                message = reader.read_next(1500)
            except pulsar.Timeout:
                return got
            got.append((message.partition_key(), message.data()))
    finally:
        reader.close()


def test_truncate_moves_the_compaction_cursor_and_keeps_the_compacted_view(
    cli_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    """As Pulsar's truncate: every cursor, ``__compaction`` included, moves to the end and the
    ledgers go; the compacted ledger stays, and later compactions build on it."""
    topic = name()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
    _compact(cli_broker, topic)
    for i in range(4):  # after the compaction horizon: the __compaction cursor holds them
        last = producer.send(f"w{i}".encode(), partition_key=f"k{i % 2}")
    ok(cli_broker, "topics", "truncate", topic)
    internal = ok(cli_broker, "topics", "stats-internal", topic)
    assert internal["numberOfEntries"] == 0
    cursor = internal["cursors"]["__compaction"]
    assert cursor["markDeletePosition"] == f"{last.ledger_id()}:{last.entry_id()}"
    assert internal["compactedLedger"]["entries"] == 3
    assert _compacted_pairs(client, topic) == [("k0", b"v3"), ("k1", b"v4"), ("k2", b"v5")]
    # the compacted reader's last message id is the view's last one, the log being empty
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    assert reader.has_message_available()
    reader.close()
    producer.send(b"x", partition_key="k2")
    _compact(cli_broker, topic)
    assert _compacted_pairs(client, topic) == [("k0", b"v3"), ("k1", b"v4"), ("k2", b"x")]
    producer.close()


def test_expire_messages_on_all_subscriptions(
    cli_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = name()
    for sub in ("a", "b", "c"):
        ok(cli_broker, "topics", "create-subscription", topic, "-s", sub, "-m", "earliest")
    ids = produce(client, topic, 4)
    published = _publish_time(client, topic, ids[-1])
    wait_for(lambda: time.time() * 1000 > published + 1, "the clock to move on")
    ok(cli_broker, "topics", "expire-messages-all-subscriptions", topic, "-t", "1h")
    assert backlogs(cli_broker, topic) == {"a": 4, "b": 4, "c": 4}  # younger than an hour
    ok(cli_broker, "topics", "expire-messages-all-subscriptions", topic, "-t", "0")
    assert backlogs(cli_broker, topic) == {"a": 0, "b": 0, "c": 0}


def test_stats_precise_backlog_and_earliest_time_in_backlog(
    cli_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = name()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    produce(client, topic, 10)
    received = [consumer.receive(10_000) for _ in range(10)]
    for index in (2, 5, 7):
        consumer.acknowledge(received[index])
    wait_for(lambda: backlogs(cli_broker, topic) == {"s": 7}, "the acknowledgements")

    def earliest() -> tuple[int, int]:
        stats = ok(cli_broker, "topics", "stats", topic, "-etb")
        sub = stats["subscriptions"]["s"]["earliestMsgPublishTimeInBacklog"]
        return sub, stats["earliestMsgPublishTimeInBacklogs"]

    first = received[0].publish_timestamp()
    assert earliest() == (first, first)
    for index in (0, 1):
        consumer.acknowledge(received[index])
    wait_for(lambda: backlogs(cli_broker, topic) == {"s": 5}, "the acknowledgements")
    fourth = received[3].publish_timestamp()  # the third (index 2) was acknowledged before
    assert earliest() == (fourth, fourth)
    consumer.close()


def test_namespace_topics_unload_and_clear_backlog(
    cli_broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    namespace = f"public/ops-{uuid.uuid4().hex[:6]}"
    ok(cli_broker, "namespaces", "create", namespace)
    topics = [f"persistent://{namespace}/t{i}" for i in range(2)]
    for topic in topics:
        for sub in ("a", "b"):
            ok(cli_broker, "topics", "create-subscription", topic, "-s", sub, "-m", "earliest")
        produce(client, topic, 3)
    assert ok(cli_broker, "namespaces", "topics", namespace) == topics

    refused = admin(cli_broker, "namespaces", "clear-backlog", namespace, stdin="n\n")
    assert refused.exit_code == 1
    assert backlogs(cli_broker, topics[0]) == {"a": 3, "b": 3}
    ok(cli_broker, "namespaces", "clear-backlog", namespace, "-s", "a", "-force")
    assert [backlogs(cli_broker, t) for t in topics] == [{"a": 0, "b": 3}] * 2
    ok(cli_broker, "namespaces", "clear-backlog", namespace, "-force")
    assert [backlogs(cli_broker, t) for t in topics] == [{"a": 0, "b": 0}] * 2

    producer = client.create_producer(topics[0])
    loaded = cli_broker.service.topics[topics[0]]
    ok(cli_broker, "namespaces", "unload", namespace)
    assert loaded.closed
    assert all(t.name.namespace_name != namespace or t is not loaded
               for t in list(cli_broker.service.topics.values()))  # fmt: skip
    producer.send(b"after unload")  # the producer reconnects; the topic loads again
    producer.close()
    assert backlogs(cli_broker, topics[0]) == {"a": 1, "b": 1}
    assert admin(cli_broker, "namespaces", "unload", "public/nowhere").exit_code == 1

    # one bundle: only its topics unload
    bundles = cli_broker.service.placement.bundles(namespace)
    in_bundle = {t: bundles.find(t).name for t in topics}
    for topic in topics:
        client.create_producer(topic).close()  # loaded
    first = in_bundle[topics[0]]
    loaded = {t: cli_broker.service.topics[t] for t in topics}
    ok(cli_broker, "namespaces", "unload", namespace, "--bundle", first)
    for topic in topics:
        assert loaded[topic].closed == (in_bundle[topic] == first), topic
    other = next(b.name for b in bundles.bundles if b.name != first)
    ok(cli_broker, "namespaces", "unload", namespace, "-b", other)
    bad = admin(cli_broker, "namespaces", "unload", namespace, "-b", "0x00000000_0x00000001")
    assert bad.exit_code == 1  # 404: not a bundle of the namespace

    # split a bundle in two at the middle of its range
    ok(cli_broker, "namespaces", "split-bundle", namespace, "-b", "0x40000000_0x80000000")
    split = cli_broker.service.placement.bundles(namespace)
    halves = ["0x40000000_0x60000000", "0x60000000_0x80000000"]
    assert [b.name for b in split.bundles][1:3] == halves
    policies = ok(cli_broker, "namespaces", "policies", namespace)
    assert policies["bundles"]["numBundles"] == 5
    for refused in (["-b", "0x40000000_0x80000000"], ["-b", first, "-san", "topic_count"]):
        assert admin(cli_broker, "namespaces", "split-bundle", namespace, *refused).exit_code == 1

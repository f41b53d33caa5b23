"""``GET /metrics`` over real HTTP, after producing and consuming with the official client:
Pulsar's topic and subscription metrics, the storage histograms and the process metrics,
parsed with prometheus_client's own parser."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
from metrics_scrape import Scrape, produce, wait_for_scrape
from official_client import official_client
from prometheus_client import CONTENT_TYPE_LATEST

from starquake.broker.embedded import EmbeddedBroker

CLUSTER = "standalone"
NAMESPACE = "public/default"


def test_metrics_are_served_in_prometheus_text_format(broker: EmbeddedBroker) -> None:
    for path in ("/metrics", "/metrics/"):
        scrape = Scrape(broker, path)
        assert scrape.status == 200
        assert scrape.content_type == CONTENT_TYPE_LATEST
        # process and platform metrics share the broker's registry
        assert scrape.total("process_cpu_seconds_total") > 0
        assert scrape.total("process_resident_memory_bytes") > 0
        assert "python_info" in scrape.families
        for family in (
            "pulsar_topics_count",
            "pulsar_rate_in",
            "pulsar_subscription_back_log",
            "starquake_storage_fsync_latency_seconds",
            "starquake_storage_group_commit_entries",
            "starquake_storage_group_commit_bytes",
        ):
            assert family in scrape.families
        assert scrape.families["pulsar_in_messages"].type == "counter"
        assert scrape.families["pulsar_rate_in"].type == "gauge"
        assert scrape.families["starquake_storage_fsync_latency_seconds"].type == "histogram"


def test_topic_and_subscription_metrics_follow_what_the_clients_did(
    broker: EmbeddedBroker, topic: str
) -> None:
    total = 3000
    acked = 1200
    payloads = [f"message-{i:05d}".encode() * 4 for i in range(total)]
    before = Scrape(broker)
    client = official_client(broker)
    try:
        # subscriptions made before producing see every message
        client.subscribe(topic, "idle").close()
        pending = client.subscribe(
            topic, "pending", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=10
        )
        half = client.subscribe(topic, "half")
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=500
        )
        produce(producer, payloads)

        # while the load is fresh, the rates show it
        under_load = Scrape(broker)
        labels = {"cluster": CLUSTER, "namespace": NAMESPACE, "topic": topic}
        assert under_load.value("pulsar_rate_in", **labels) > 0
        assert under_load.value("pulsar_throughput_in", **labels) > 0

        for _ in range(acked):
            half.acknowledge(half.receive(timeout_millis=10_000))

        def settled(scrape: Scrape) -> bool:
            samples = scrape.samples.get("pulsar_subscription_back_log", [])
            backlog = {s.labels.get("subscription"): s.value for s in samples}
            unacked = scrape.samples.get("pulsar_subscription_unacked_messages", [])
            return backlog.get("half") == total - acked and any(
                s.labels.get("subscription") == "pending" and s.value == 10 for s in unacked
            )

        after = wait_for_scrape(broker, settled)

        # topic metrics, with Pulsar's labels
        assert after.value("pulsar_in_messages_total", **labels) == total
        assert after.value("pulsar_in_bytes_total", **labels) >= sum(map(len, payloads))
        assert after.value("pulsar_producers_count", **labels) == 1
        assert after.value("pulsar_consumers_count", **labels) == 2
        assert after.value("pulsar_subscriptions_count", **labels) == 3
        assert after.value("pulsar_storage_size", **labels) >= sum(map(len, payloads))
        assert after.value("pulsar_msg_backlog", **labels) == total + total + (total - acked)
        assert after.value("pulsar_rate_out", **labels) > 0
        # dispatched: what "half" acknowledged and prefetched, and the 10 that "pending" holds
        assert after.value("pulsar_out_messages_total", **labels) >= acked + 10
        assert after.value("pulsar_out_bytes_total", **labels) > 0
        assert after.value("pulsar_topics_count", cluster=CLUSTER, namespace=NAMESPACE) == 1

        # subscription metrics
        def sub(name: str, subscription: str) -> float:
            return after.value(name, subscription=subscription, **labels)

        assert sub("pulsar_subscription_back_log", "idle") == total
        assert sub("pulsar_subscription_back_log", "pending") == total
        assert sub("pulsar_subscription_back_log", "half") == total - acked
        assert sub("pulsar_subscription_unacked_messages", "pending") == 10
        assert sub("pulsar_subscription_consumers_count", "idle") == 0
        assert sub("pulsar_subscription_consumers_count", "pending") == 1
        assert sub("pulsar_subscription_consumers_count", "half") == 1
        assert sub("pulsar_subscription_msg_rate_out", "half") > 0
        assert sub("pulsar_subscription_msg_throughput_out", "half") > 0
        assert sub("pulsar_subscription_msg_rate_out", "idle") == 0
        pending.close()
    finally:
        client.close()

    # storage: every entry went through exactly one group commit, each commit fsynced (the
    # commits written during an fsync share the next one: one sample per fsync of a file)
    def grew(name: str) -> float:
        return after.total(name) - before.total(name)

    commits = grew("starquake_storage_group_commit_entries_count")
    assert grew("starquake_storage_group_commit_entries_sum") == total
    assert 0 < commits <= total
    assert grew("starquake_storage_fsync_latency_seconds_count") > 0
    assert grew("starquake_storage_fsync_latency_seconds_sum") > 0
    assert grew("starquake_storage_group_commit_bytes_sum") >= sum(map(len, payloads))
    assert grew("starquake_storage_group_commit_bytes_count") == commits
    assert after.total("starquake_storage_group_commit_failures_total") == 0
    buckets = after.samples["starquake_storage_fsync_latency_seconds_bucket"]
    assert {s.labels["le"] for s in buckets} >= {"0.001", "+Inf"}


def test_non_persistent_topics_are_counted_too(broker: EmbeddedBroker) -> None:
    topic = f"non-persistent://public/default/np-{uuid.uuid4().hex[:10]}"
    client = official_client(broker)
    try:
        consumer = client.subscribe(topic, "np-sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(25):
            producer.send(f"np-{i}".encode())
        for _ in range(25):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        labels = {"cluster": CLUSTER, "namespace": NAMESPACE, "topic": topic}
        scrape = Scrape(broker)
        assert scrape.value("pulsar_in_messages_total", **labels) == 25
        assert scrape.value("pulsar_producers_count", **labels) == 1
        assert (
            scrape.value("pulsar_subscription_consumers_count", subscription="np-sub", **labels)
            == 1
        )
        assert scrape.value("pulsar_topics_count", cluster=CLUSTER, namespace=NAMESPACE) == 1
    finally:
        client.close()


def test_each_broker_has_its_own_registry(
    broker: EmbeddedBroker, tmp_path: Path, topic: str
) -> None:
    with EmbeddedBroker(tmp_path / "other") as other:
        client = official_client(broker)
        try:
            client.create_producer(topic).send(b"only on the first broker")
        finally:
            client.close()
        mine = Scrape(broker)
        theirs = Scrape(other)
    assert mine.value("pulsar_in_messages_total", topic=topic) == 1
    assert not [
        s for s in theirs.samples.get("pulsar_in_messages_total", []) if s.labels["topic"] == topic
    ]
    assert theirs.total("starquake_storage_group_commit_entries_sum") == 0
    assert mine.total("starquake_storage_group_commit_entries_sum") == 1

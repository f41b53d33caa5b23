"""``/metrics`` after real traffic from the official client: publish and storage-write latency
and entry sizes (Pulsar's buckets), redelivery rates, broker totals, connections, and
``exposeTopicLevelMetricsInPrometheus``."""

from __future__ import annotations

import base64
import json
import math
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import jwt
import pulsar
import pytest
from admin_http import http_call
from metrics_scrape import Scrape, produce, wait_for_scrape
from official_client import official_client
from polling import wait_for

from starquake.broker.embedded import EmbeddedBroker

CLUSTER = "standalone"
NAMESPACE = "public/default"
LATENCY_BUCKETS = ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000", "overflow")
SIZE_BUCKETS = ("128", "512", "1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb", "overflow")


@pytest.fixture
def ticking(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker whose stats interval is one second (rates and buckets roll over quickly)."""
    with EmbeddedBroker(tmp_path / "data", statsUpdateFrequencyInSecs=1) as running:
        yield running


def _topic(prefix: str) -> str:
    return f"persistent://{NAMESPACE}/{prefix}-{uuid.uuid4().hex[:10]}"


def test_publish_latency_and_entry_sizes_count_every_entry(ticking: EmbeddedBroker) -> None:
    topic = _topic("latency")
    total = 300
    payloads = [bytes([i % 251]) * 600 for i in range(total)]  # entries of 600-1024 bytes
    client = official_client(ticking)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        produce(producer, payloads)
    finally:
        client.close()
    labels = {"cluster": CLUSTER, "namespace": NAMESPACE, "topic": topic}

    # the broker's summary counts every entry since start; its quantiles cover the last interval
    def summary_done(scrape: Scrape) -> bool:
        return scrape.value("pulsar_broker_publish_latency_count", cluster=CLUSTER) == total

    scrape = wait_for_scrape(ticking, summary_done)
    assert scrape.value("pulsar_broker_publish_latency_count", cluster=CLUSTER) == total
    assert scrape.value("pulsar_broker_publish_latency_sum", cluster=CLUSTER) > 0
    assert scrape.families["pulsar_broker_publish_latency"].type == "summary"

    # the topic's buckets cover the last completed interval: some of the entries
    def topic_window(scrape: Scrape) -> bool:
        return scrape.value("pulsar_storage_write_latency_count", **labels) > 0

    scrape = wait_for_scrape(ticking, topic_window)
    count = scrape.value("pulsar_storage_write_latency_count", **labels)
    assert 0 < count <= total
    by_bucket = [
        scrape.value(f"pulsar_storage_write_latency_le_{b}", **labels) for b in LATENCY_BUCKETS
    ]
    assert sum(by_bucket) == count
    assert scrape.value("pulsar_storage_write_latency_sum", **labels) > 0
    sizes = {b: scrape.value(f"pulsar_entry_size_le_{b}", **labels) for b in SIZE_BUCKETS}
    assert scrape.value("pulsar_entry_size_count", **labels) == sizes["1_kb"] > 0
    assert sum(sizes.values()) == sizes["1_kb"]
    mean = scrape.value("pulsar_entry_size_sum", **labels) / sizes["1_kb"]
    assert 600 < mean <= 1024

    # quantiles of an interval with entries: ordered, finite, positive
    quantiles = {
        s.labels["quantile"]: s.value
        for s in scrape.samples["pulsar_broker_publish_latency"]
        if "quantile" in s.labels
    }
    assert set(quantiles) == {"0.0", "0.5", "0.95", "0.99", "0.999", "0.9999", "1.0"}

    # with no traffic, the next intervals are empty: the gauges go back to 0, the quantiles NaN
    def idle(scrape: Scrape) -> bool:
        return scrape.value("pulsar_storage_write_latency_count", **labels) == 0

    scrape = wait_for_scrape(ticking, idle)
    assert scrape.value("pulsar_storage_write_latency_count", **labels) == 0
    assert scrape.value("pulsar_entry_size_le_1_kb", **labels) == 0
    assert math.isnan(scrape.value("pulsar_broker_publish_latency", quantile="0.5"))
    assert scrape.value("pulsar_broker_publish_latency_count", cluster=CLUSTER) == total


def test_publish_latency_quantiles_follow_the_entries(ticking: EmbeddedBroker) -> None:
    topic = _topic("quantiles")
    client = official_client(ticking)
    try:
        producer = client.create_producer(topic, batching_enabled=False)

        def window(scrape: Scrape) -> bool:
            produce(producer, [b"q" * 100] * 20)  # keep every interval busy
            value = scrape.value("pulsar_broker_publish_latency", quantile="0.5")
            return not math.isnan(value)

        scrape = wait_for_scrape(ticking, window)
    finally:
        client.close()
    quantiles = [
        scrape.value("pulsar_broker_publish_latency", quantile=q)
        for q in ("0.0", "0.5", "0.95", "0.99", "0.999", "0.9999", "1.0")
    ]
    assert all(0 < q < math.inf for q in quantiles), quantiles
    assert quantiles == sorted(quantiles)


def test_redelivery_rate_of_a_subscription(ticking: EmbeddedBroker) -> None:
    topic = _topic("redeliver")
    labels = {"cluster": CLUSTER, "namespace": NAMESPACE, "topic": topic, "subscription": "s"}
    client = official_client(ticking)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(f"r-{i}".encode())

        def redelivering(scrape: Scrape) -> bool:
            for _ in range(10):
                consumer.receive(timeout_millis=10_000)
            consumer.redeliver_unacknowledged_messages()
            return scrape.value("pulsar_subscription_msg_rate_redeliver", **labels) > 0

        scrape = wait_for_scrape(ticking, redelivering)
        assert scrape.value("pulsar_subscription_msg_rate_redeliver", **labels) > 0
        # the admin API's stats carry the same rate, for the subscription and its consumer
        path = f"/admin/v2/{topic.replace('://', '/')}/stats"

        def stats_show_it() -> bool:
            redelivering(Scrape(ticking))
            status, body = http_call(ticking.web_service_url, "GET", path)
            sub = json.loads(body)["subscriptions"]["s"] if status == 200 else {}
            rates = [sub.get("msgRateRedeliver", 0)]
            rates += [c["msgRateRedeliver"] for c in sub.get("consumers", [])]
            return len(rates) == 2 and min(rates) > 0

        wait_for(stats_show_it, "msgRateRedeliver in the stats")
        # a subscription that redelivers nothing
        idle = client.subscribe(topic, "idle")
        after = Scrape(ticking)
        assert (
            after.value(
                "pulsar_subscription_msg_rate_redeliver", **{**labels, "subscription": "idle"}
            )
            == 0
        )
        idle.close()
    finally:
        client.close()


def test_broker_totals_and_connections(ticking: EmbeddedBroker) -> None:
    first, second = _topic("totals"), _topic("totals")
    before = Scrape(ticking)
    created_before = before.total("pulsar_connection_created_total_count")
    closed_before = before.total("pulsar_connection_closed_total_count")
    client = official_client(ticking)
    try:
        client.subscribe(first, "a")
        client.subscribe(first, "b")
        client.subscribe(second, "c")
        producer = client.create_producer(first, batching_enabled=False)
        client.create_producer(second).send(b"one")
        produce(producer, [b"x" * 50] * 40)
        scrape = wait_for_scrape(
            ticking, lambda s: s.value("pulsar_broker_rate_in", cluster=CLUSTER) > 0
        )
        assert scrape.value("pulsar_broker_topics_count", cluster=CLUSTER) == 2
        assert scrape.value("pulsar_broker_subscriptions_count", cluster=CLUSTER) == 3
        assert scrape.value("pulsar_broker_producers_count", cluster=CLUSTER) == 2
        assert scrape.value("pulsar_broker_consumers_count", cluster=CLUSTER) == 3
        assert scrape.value("pulsar_broker_msg_backlog", cluster=CLUSTER) == 2 * 40 + 1
        assert scrape.value("pulsar_broker_storage_size", cluster=CLUSTER) > 40 * 50
        assert scrape.value("pulsar_broker_throughput_in", cluster=CLUSTER) > 0
        assert scrape.total("pulsar_active_connections") >= 1
        assert scrape.total("pulsar_connection_created_total_count") > created_before
        assert scrape.total("pulsar_connection_create_success_count") >= 1
        assert scrape.total("pulsar_connection_create_fail_count") == 0
        connections = scrape.samples["pulsar_active_connections"][0].labels
        assert connections["cluster"] == CLUSTER and connections["broker"]
    finally:
        client.close()
    scrape = wait_for_scrape(ticking, lambda s: s.total("pulsar_active_connections") == 0)
    assert scrape.total("pulsar_active_connections") == 0
    assert scrape.total("pulsar_connection_closed_total_count") > closed_before


def test_namespace_aggregates_only_without_topic_level_metrics(tmp_path: Path) -> None:
    settings = {"exposeTopicLevelMetricsInPrometheus": False, "statsUpdateFrequencyInSecs": 1}
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        topics = [_topic("ns-only"), _topic("ns-only")]
        client = official_client(broker)
        try:
            for i, topic in enumerate(topics):
                client.subscribe(topic, "sub")
                producer = client.create_producer(topic, batching_enabled=False)
                produce(producer, [b"n" * 200] * (10 + i))
            labels = {"cluster": CLUSTER, "namespace": NAMESPACE}
            scrape = wait_for_scrape(broker, lambda s: s.value("pulsar_entry_size_count") > 0)
        finally:
            client.close()
    pulsar_samples = [
        s for samples in scrape.samples.values() for s in samples if s.name.startswith("pulsar_")
    ]
    assert pulsar_samples
    assert not [s for s in pulsar_samples if "topic" in s.labels or "subscription" in s.labels]
    assert scrape.value("pulsar_topics_count", **labels) == 2
    assert scrape.value("pulsar_in_messages_total", **labels) == 21
    assert scrape.value("pulsar_subscriptions_count", **labels) == 2
    assert scrape.value("pulsar_msg_backlog", **labels) == 21
    assert scrape.value("pulsar_producers_count", **labels) == 2
    assert scrape.value("pulsar_entry_size_le_512", **labels) > 0
    assert "pulsar_subscription_back_log" not in scrape.samples


def test_refused_connections_are_counted(tmp_path: Path) -> None:
    secret = secrets.token_bytes(32)
    provider = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
    with EmbeddedBroker(
        tmp_path / "data",
        authenticationEnabled=True,
        authenticationProviders=provider,
        tokenSecretKey="data:;base64," + base64.b64encode(secret).decode(),
    ) as broker:
        wrong = jwt.encode({"sub": "someone"}, secrets.token_bytes(32), algorithm="HS256")
        client = pulsar.Client(
            broker.service_url,
            authentication=pulsar.AuthenticationToken(wrong),
            operation_timeout_seconds=3,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            with pytest.raises(pulsar.PulsarException):
                client.create_producer(_topic("refused"))
        finally:
            client.close()
        scrape = Scrape(broker)  # /metrics needs no credentials
        assert scrape.total("pulsar_connection_create_fail_count") >= 1
        assert scrape.total("pulsar_connection_create_success_count") == 0


def test_subscription_acks_expiry_and_flags(tmp_path: Path) -> None:
    # a subscription held at its unacked limit shows it; acknowledging shows as a rate
    with EmbeddedBroker(
        tmp_path / "data", statsUpdateFrequencyInSecs=1, maxUnackedMessagesPerSubscription=3
    ) as broker:
        topic = _topic("acks")
        labels = {"cluster": CLUSTER, "namespace": NAMESPACE, "topic": topic, "subscription": "s"}
        client = official_client(broker)
        try:
            consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(4):
                producer.send(f"a-{i}".encode())
            held = [consumer.receive(timeout_millis=10_000) for _ in range(3)]
            scrape = Scrape(broker)
            assert scrape.value("pulsar_subscription_blocked_on_unacked_messages", **labels) == 1
            assert scrape.value("pulsar_subscription_back_log_no_delayed", **labels) == 4
            assert scrape.value("pulsar_subscription_last_acked_timestamp", **labels) == 0
            for msg in held:
                consumer.acknowledge(msg)

            def acking(scrape: Scrape) -> bool:
                producer.send(b"more")
                consumer.acknowledge(consumer.receive(timeout_millis=10_000))
                return scrape.value("pulsar_subscription_msg_ack_rate", **labels) > 0

            scrape = wait_for_scrape(broker, acking)
            assert scrape.value("pulsar_subscription_blocked_on_unacked_messages", **labels) == 0
            assert scrape.value("pulsar_subscription_last_acked_timestamp", **labels) > 0
            assert scrape.value("pulsar_subscription_total_msg_expired", **labels) == 0
        finally:
            client.close()

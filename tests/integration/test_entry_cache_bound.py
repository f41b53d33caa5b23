"""A broker process keeps its entry cache within ``managedLedgerCacheSizeMB`` and caches
only for topics a consumer reads (as Pulsar caches new entries only for active cursors)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from broker_process import broker_process, process_client
from metrics_scrape import produce
from polling import wait_for
from prometheus_client.parser import text_string_to_metric_families

MIB = 1024 * 1024


def _cache(web_service_url: str) -> tuple[float, float]:
    """(pulsar_ml_cache_used_size, pulsar_ml_cache_entries) scraped from /metrics."""
    with urllib.request.urlopen(f"{web_service_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in ("pulsar_ml_cache_used_size", "pulsar_ml_cache_entries"):
                found[sample.name] = sample.value
    return found["pulsar_ml_cache_used_size"], found["pulsar_ml_cache_entries"]


def test_cache_honours_its_size_and_caches_for_consumers_only(tmp_path: Path) -> None:
    payloads = [bytes([i % 256]) * 10_000 for i in range(400)]  # about 4 MB
    with broker_process(
        tmp_path / "data",
        "managedLedgerCacheSizeMB=1",
        "managedLedgerCacheEvictionTimeThresholdMillis=0",  # size alone bounds it here
    ) as broker:
        client = process_client(broker.url)
        try:
            unread = "persistent://public/default/cache-unread"
            client.subscribe(unread, "idle").close()  # a subscription, no consumer
            produce(client.create_producer(unread, batching_enabled=False), payloads)
            assert _cache(broker.web_service_url) == (0, 0)

            read = "persistent://public/default/cache-read"
            consumer = client.subscribe(read, "reader", receiver_queue_size=10)
            produce(client.create_producer(read, batching_enabled=False), payloads)
            used, entries = _cache(broker.web_service_url)
            assert 0 < used <= MIB
            assert 0 < entries < len(payloads)
            got = [consumer.receive(timeout_millis=10_000).data() for _ in payloads]
            assert got == payloads  # entries evicted from the cache come from the files
            consumer.close()
        finally:
            client.close()


def test_cache_evicts_entries_older_than_the_threshold(tmp_path: Path) -> None:
    with broker_process(
        tmp_path / "data", "managedLedgerCacheEvictionTimeThresholdMillis=200"
    ) as broker:
        client = process_client(broker.url)
        try:
            topic = "persistent://public/default/cache-aging"
            consumer = client.subscribe(topic, "reader")
            produce(client.create_producer(topic), [b"x" * 1000] * 50)
            wait_for(lambda: _cache(broker.web_service_url) == (0, 0), "the cache to empty")
            assert [consumer.receive(timeout_millis=10_000).data() for _ in range(50)] == [
                b"x" * 1000
            ] * 50
        finally:
            client.close()


def test_a_backlogged_consumer_gets_no_caching_until_it_catches_up(tmp_path: Path) -> None:
    with broker_process(
        tmp_path / "data",
        "managedLedgerCacheEvictionTimeThresholdMillis=0",
        "managedLedgerCursorBackloggedThreshold=10",
        "statsUpdateFrequencyInSecs=1",
    ) as broker:
        client = process_client(broker.url)
        try:
            topic = "persistent://public/default/cache-backlogged"
            consumer = client.subscribe(topic, "behind", receiver_queue_size=5)
            producer = client.create_producer(topic, batching_enabled=False)
            sent = 0

            def send_one() -> float:
                nonlocal sent
                producer.send(b"m%d" % sent)
                sent += 1
                return _cache(broker.web_service_url)[1]

            produce(producer, [b"early"] * 50)
            sent = 50
            # far behind: once a stats update deactivated its cursor, sends are not cached
            before = [_cache(broker.web_service_url)[1]]

            def not_cached() -> bool:
                after = send_one()
                stale, before[0] = before[0], after
                return after == stale

            wait_for(not_cached, "the backlogged cursor to be deactivated")
            entries = _cache(broker.web_service_url)[1]
            produce(producer, [b"late"] * 20)
            sent += 20
            assert _cache(broker.web_service_url)[1] == entries
            for _ in range(sent):
                consumer.acknowledge(consumer.receive(timeout_millis=10_000))
            # caught up: a stats update activates it again and sends are cached
            before[0] = _cache(broker.web_service_url)[1]

            def cached() -> bool:
                entries = send_one()
                consumer.acknowledge(consumer.receive(timeout_millis=10_000))  # keeps up
                return entries > before[0]

            wait_for(cached, "the caught-up cursor to be activated")
        finally:
            client.close()

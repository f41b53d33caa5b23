"""Brokers sharing their configuration metadata through JetStream
(``configurationMetadataStoreUrl``): real ``starquake standalone`` processes with separate data
directories over one real nats-server, the official client as oracle."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from broker_process import BrokerProcess, free_port, process_client

from starquake.cluster.kv_metadata import JetStreamMetadataStore
from starquake.cluster.nodes import JetStreamNode
from starquake.storage.metadata import direct_children

_DEADLINE = 10.0
_NAMESPACE = "/admin/v2/namespaces/shop/orders"
_LAST = 25


def _request(broker: BrokerProcess, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        broker.web_service_url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def _eventually(read: Callable[[], Any], want: Any) -> float:
    """Seconds until ``read()`` answers ``want`` (fails after the deadline)."""
    start = time.monotonic()
    last: Any = None
    while time.monotonic() - start < _DEADLINE:
        try:
            last = read()
        except urllib.error.HTTPError as exc:
            last = exc
        if last == want:
            return time.monotonic() - start
        time.sleep(0.02)
    raise AssertionError(f"still {last!r} after {_DEADLINE} s, expected {want!r}")


def _limits(broker: BrokerProcess) -> tuple[int, int]:
    policies = _request(broker, "GET", _NAMESPACE)
    return policies["max_producers_per_topic"], policies["max_consumers_per_topic"]


@pytest.fixture
def two_brokers(jetstream_node: JetStreamNode, tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    shared = f"configurationMetadataStoreUrl={jetstream_node.url}"
    brokers = [BrokerProcess(tmp_path / name, shared) for name in ("a", "b")]
    try:
        for broker in brokers:
            broker.start()
        yield brokers
    finally:
        for broker in brokers:
            broker.cleanup()


def test_a_namespace_set_up_through_one_broker_serves_through_the_other(
    two_brokers: list[BrokerProcess], jetstream_node: JetStreamNode
) -> None:
    a, b = two_brokers
    _request(a, "PUT", "/admin/v2/tenants/shop", {"allowedClusters": ["standalone"]})
    _request(a, "PUT", "/admin/v2/namespaces/shop/orders")
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}
    _request(a, "POST", "/admin/v2/namespaces/shop/orders/retention", retention)
    _eventually(lambda: _request(b, "GET", "/admin/v2/namespaces/shop/orders/retention"), retention)
    assert "shop/orders" in _request(b, "GET", "/admin/v2/namespaces/shop")

    # a partitioned topic created through A, and a topic-level policy set on it, are B's too
    parted = "/admin/v2/persistent/shop/orders/parted"
    _request(a, "PUT", f"{parted}/partitions", 2)
    _eventually(lambda: _request(b, "GET", f"{parted}/partitions")["partitions"], 2)
    _request(a, "POST", f"{parted}/maxConsumers", 3)
    _eventually(lambda: _request(b, "GET", f"{parted}/maxConsumers"), 3)

    # a schema B had looked up (none yet), then added through A, is B's too
    schema = "/admin/v2/schemas/shop/orders/placed/schema"
    with pytest.raises(urllib.error.HTTPError, match="404"):
        _request(b, "GET", schema)
    _request(a, "POST", schema, {"type": "STRING", "schema": "", "properties": {}})
    _eventually(lambda: _request(b, "GET", schema)["type"], "STRING")

    topic = "persistent://shop/orders/placed"
    client = process_client(b.url)
    try:
        consumer = client.subscribe(topic, "audit")
        first = client.create_producer(topic)
        first.send(b"order-1")
        msg = consumer.receive(5000)
        assert msg.data() == b"order-1"
        consumer.acknowledge(msg)
        # a limit set through A applies to the topic B already serves
        _request(a, "POST", "/admin/v2/namespaces/shop/orders/maxProducersPerTopic", 1)
        _eventually(
            lambda: _request(b, "GET", "/admin/v2/namespaces/shop/orders/maxProducersPerTopic"),
            1,
        )
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
    finally:
        client.close()

    # updates of one namespace's policies through both brokers at once lose none of them
    def update(broker: BrokerProcess, field: str) -> None:
        for value in range(2, _LAST + 1):
            _request(broker, "POST", f"/admin/v2/namespaces/shop/orders/{field}", value)

    writers = [
        threading.Thread(target=update, args=(a, "maxProducersPerTopic")),
        threading.Thread(target=update, args=(b, "maxConsumersPerTopic")),
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(30)
    for broker in (a, b):
        _eventually(functools.partial(_limits, broker), (_LAST, _LAST))

    # B restarted sees what exists, and what was changed while it was down
    b.stop()
    quota = {"limitSize": 1048576, "limitTime": -1, "policy": "producer_request_hold"}
    _request(a, "POST", "/admin/v2/namespaces/shop/orders/backlogQuota", quota)
    b.start()
    assert _request(b, "GET", "/admin/v2/namespaces/shop/orders/retention") == retention
    quotas = _request(b, "GET", "/admin/v2/namespaces/shop/orders/backlogQuotaMap")
    assert quotas["destination_storage"]["limitSize"] == quota["limitSize"]

    # the configuration is in the bucket only; the topic's state in B's own store only
    assert _bucket_roots(jetstream_node.url) == ["admin", "schemas"]
    assert "shop" not in _local_children(a, "/admin/tenants")
    assert _local_children(b, "/managed-ledgers")


def _bucket_roots(url: str) -> list[str]:
    async def roots() -> list[str]:
        store = await JetStreamMetadataStore.connect([url])
        try:
            return await store.list_children("/")
        finally:
            await store.close()

    return asyncio.run(roots())


def _local_children(broker: BrokerProcess, prefix: str) -> list[str]:
    """The children of ``prefix`` in the broker's own metadata store (read while it runs)."""
    with contextlib.closing(sqlite3.connect(broker.data_dir / "metadata.db")) as db:
        keys = [row[0] for row in db.execute("SELECT key FROM kv")]
    return direct_children(prefix, keys)


def test_an_unreachable_configuration_store_stops_the_start(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    broker = BrokerProcess(
        tmp_path / "data",
        f"configurationMetadataStoreUrl={url}",
        "metadataStoreOperationTimeoutSeconds=1",
    )
    done = subprocess.run(broker.command(), capture_output=True, timeout=60, check=False)
    err = done.stderr.decode()
    assert done.returncode != 0
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if url in line]
    assert len(lines) == 1 and "configurationMetadataStoreUrl" in lines[0], err

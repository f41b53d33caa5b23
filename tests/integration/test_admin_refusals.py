"""Admin requests that are refused change nothing, and partition counts are bounded: through a
real ``starquake standalone`` process, over HTTP and with the official client."""

from __future__ import annotations

import contextlib
import errno
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import admin_json
from broker_process import BrokerProcess, process_client

from starquake.broker.config_ranges import MAX_PARTITIONS
from starquake.storage.metadata import SqliteMetadataStore

NS = "/admin/v2/persistent/public/default"
SCHEMAS = "/admin/v2/schemas/public/default"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", log_level="INFO")
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


def _reason(reply: tuple[int, Any]) -> str:
    assert isinstance(reply[1], dict), reply
    return str(reply[1]["reason"])


# --- C15: the base name of a partitioned topic through the non-partitioned endpoint -------------


def test_deleting_a_partitioned_topic_by_its_base_name_is_refused(broker: BrokerProcess) -> None:
    name = "orders"
    assert admin_json(broker, "PUT", f"{NS}/{name}/partitions", 3)[0] == 204
    assert admin_json(broker, "POST", f"{NS}/{name}/messageTTL?messageTTL=120")[0] == 204
    schema = {"type": "STRING", "schema": "", "properties": {}}
    assert admin_json(broker, "POST", f"{SCHEMAS}/{name}/schema", schema)[0] == 200
    client = process_client(broker.url)
    try:
        producer = client.create_producer(f"persistent://public/default/{name}")
        producer.send(b"kept")
        producer.close()
    finally:
        client.close()

    for force in ("", "?force=true"):
        reply = admin_json(broker, "DELETE", f"{NS}/{name}{force}")
        assert reply[0] == 409, reply
        assert "is a partitioned topic" in _reason(reply)
        assert "delete-partitioned-topic" in _reason(reply)

    # nothing went: the partitions, the topic policies, the schema and the data
    assert admin_json(broker, "GET", f"{NS}/{name}/partitions") == (200, {"partitions": 3})
    assert admin_json(broker, "GET", f"{NS}/{name}/messageTTL") == (200, 120)
    assert admin_json(broker, "GET", f"{SCHEMAS}/{name}/schema")[0] == 200
    listed = admin_json(broker, "GET", NS)[1]
    assert all(f"persistent://public/default/{name}-partition-{i}" in listed for i in range(3))
    stats = admin_json(broker, "GET", f"{NS}/{name}/partitioned-stats")[1]
    assert stats["msgInCounter"] == 1
    assert f"topic persistent://public/default/{name} deleted" not in broker.log()
    # the partitioned endpoint still deletes it all
    assert admin_json(broker, "DELETE", f"{NS}/{name}/partitions")[0] == 204
    assert admin_json(broker, "GET", f"{NS}/{name}/partitions") == (200, {"partitions": 0})


def test_creating_a_subscription_that_one_partition_has_creates_none(
    broker: BrokerProcess,
) -> None:
    assert admin_json(broker, "PUT", f"{NS}/subs/partitions", 3)[0] == 204
    assert admin_json(broker, "PUT", f"{NS}/subs-partition-1/subscription/s")[0] == 204
    reply = admin_json(broker, "PUT", f"{NS}/subs/subscription/s")
    assert reply[0] == 409, reply
    for i, expected in ((0, []), (1, ["s"]), (2, [])):
        assert admin_json(broker, "GET", f"{NS}/subs-partition-{i}/subscriptions") == (
            200,
            expected,
        )


def test_deleting_a_subscription_with_a_consumer_on_one_partition_deletes_none(
    broker: BrokerProcess,
) -> None:
    assert admin_json(broker, "PUT", f"{NS}/held/partitions", 3)[0] == 204
    assert admin_json(broker, "PUT", f"{NS}/held/subscription/s")[0] == 204
    client = process_client(broker.url)
    try:
        client.subscribe("persistent://public/default/held-partition-2", "s")
        reply = admin_json(broker, "DELETE", f"{NS}/held/subscription/s")
        assert reply[0] == 412, reply
        for i in range(3):
            subscriptions = admin_json(broker, "GET", f"{NS}/held-partition-{i}/subscriptions")
            assert subscriptions == (200, ["s"])
        assert admin_json(broker, "DELETE", f"{NS}/held/subscription/s?force=true")[0] == 204
        assert admin_json(broker, "GET", f"{NS}/held/subscriptions") == (200, [])
    finally:
        client.close()


# --- D22: partition counts --------------------------------------------------------------------


def test_absurd_partition_counts_are_refused_and_the_broker_keeps_serving(
    broker: BrokerProcess,
) -> None:
    for count in (1_000_000_000, 2**70, MAX_PARTITIONS + 1):
        reply = admin_json(broker, "PUT", f"{NS}/huge/partitions", count)
        assert reply[0] == 406, reply
        assert (
            _reason(reply)
            == f"Number of partitions should be less than or equal to {MAX_PARTITIONS}"
        )
    assert admin_json(broker, "GET", f"{NS}/huge/partitions") == (200, {"partitions": 0})
    assert admin_json(broker, "PUT", f"{NS}/grown/partitions", 2)[0] == 204
    assert admin_json(broker, "POST", f"{NS}/grown/partitions", 10**12)[0] == 406
    assert admin_json(broker, "GET", f"{NS}/grown/partitions") == (200, {"partitions": 2})
    # the namespace's auto-creation cannot ask for more either
    override = {"allowAutoTopicCreation": True, "topicType": "partitioned"}
    reply = admin_json(
        broker,
        "POST",
        "/admin/v2/namespaces/public/default/autoTopicCreation",
        {**override, "defaultNumPartitions": 2**40},
    )
    assert reply[0] == 406, reply
    assert admin_json(broker, "GET", "/admin/v2/namespaces/public/default/autoTopicCreation") == (
        204,
        None,
    )
    # both ports still answer at once
    started = time.monotonic()
    status, listed = admin_json(broker, "GET", NS)
    assert status == 200 and "persistent://public/default/grown-partition-1" in listed
    client = process_client(broker.url)
    try:
        producer = client.create_producer("persistent://public/default/after")
        producer.send(b"x")
    finally:
        client.close()
    assert time.monotonic() - started < 20
    broker.stop()


def test_the_configured_partition_limit_bounds_admin_and_auto_creation(tmp_path: Path) -> None:
    proc = BrokerProcess(
        tmp_path / "data",
        "maxNumPartitionsPerPartitionedTopic=4",
        "allowAutoTopicCreationType=partitioned",
        "defaultNumPartitions=8",
    )
    proc.start()
    try:
        reply = admin_json(proc, "PUT", f"{NS}/five/partitions", 5)
        assert reply == (406, {"reason": "Number of partitions should be less than or equal to 4"})
        assert admin_json(proc, "PUT", f"{NS}/four/partitions", 4)[0] == 204
        override = {
            "allowAutoTopicCreation": True,
            "topicType": "partitioned",
            "defaultNumPartitions": 5,
        }
        path = "/admin/v2/namespaces/public/default/autoTopicCreation"
        assert admin_json(proc, "POST", path, override)[0] == 406
        # automatic creation makes at most the limit (defaultNumPartitions 8 is clamped, as
        # Pulsar does)
        client = process_client(proc.url)
        try:
            producer = client.create_producer("persistent://public/default/auto")
            producer.send(b"x")
        finally:
            client.close()
        assert admin_json(proc, "GET", f"{NS}/auto/partitions") == (200, {"partitions": 4})
    finally:
        proc.cleanup()


@pytest.mark.parametrize(
    "define",
    [
        f"defaultNumPartitions={MAX_PARTITIONS + 1}",
        f"maxNumPartitionsPerPartitionedTopic={MAX_PARTITIONS + 1}",
        "maxNumPartitionsPerPartitionedTopic=-1",
    ],
)
def test_partition_settings_beyond_the_limit_are_refused_at_start(
    tmp_path: Path, define: str
) -> None:
    cmd = [sys.executable, "-m", "starquake.cli.main", "standalone", "--data-dir"]
    cmd += [str(tmp_path / "data"), "--broker-port", "0", "--web-port", "0", "-D", define]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert define.split("=")[0] in done.stderr
    assert "out of range" in done.stderr


def test_topics_at_the_partition_limit_are_listed_by_both_ports(broker: BrokerProcess) -> None:
    """The names are gathered off the event loop, for the admin API and the binary protocol."""
    for i in range(3):
        assert admin_json(broker, "PUT", f"{NS}/wide{i}/partitions", MAX_PARTITIONS)[0] == 204
    status, listed = admin_json(broker, "GET", NS)
    assert status == 200 and len(listed) == 3 * MAX_PARTITIONS
    assert f"persistent://public/default/wide2-partition-{MAX_PARTITIONS - 1}" in listed
    client = process_client(broker.url)
    try:
        over_binary = client.get_topic_partitions("persistent://public/default/wide1")
        assert len(over_binary) == MAX_PARTITIONS
        consumer = client.subscribe(
            re.compile("persistent://public/default/wide0-partition-99.*"), "pattern"
        )
        consumer.close()
    finally:
        client.close()


def test_non_partitioned_endpoints_leave_a_partitioned_topic_alone(broker: BrokerProcess) -> None:
    """The base name of a partitioned topic names no topic of its own: the endpoints for one
    topic refuse it instead of creating a stray topic under that name."""
    assert admin_json(broker, "PUT", f"{NS}/parts/partitions", 2)[0] == 204
    reply = admin_json(broker, "POST", f"{NS}/parts/terminate")
    assert reply == (405, {"reason": "Termination of a partitioned topic is not allowed"})
    for path in ("internalStats", "lastMessageId", "stats"):
        assert admin_json(broker, "GET", f"{NS}/parts/{path}")[0] == 404, path
    listed = admin_json(broker, "GET", NS)[1]
    assert "persistent://public/default/parts" not in listed
    # a partition past the count is no topic to create either
    reply = admin_json(broker, "PUT", f"{NS}/parts-partition-5")
    assert reply[0] == 412, reply
    assert "persistent://public/default/parts-partition-5" not in admin_json(broker, "GET", NS)[1]
    # and a partitioned topic cannot take the name of a non-partitioned one
    assert admin_json(broker, "PUT", f"{NS}/single")[0] == 204
    reply = admin_json(broker, "PUT", f"{NS}/single/partitions", 2)
    assert reply == (409, {"reason": "This topic already exists"})
    assert admin_json(broker, "GET", f"{NS}/single/partitions") == (200, {"partitions": 0})


def test_a_termination_that_cannot_be_stored_leaves_the_topic_open(tmp_path: Path) -> None:
    """A terminate request that fails (the metadata store refuses the write) answers an error
    and the topic goes on taking messages, as if it had not been asked."""
    control = tmp_path / "faults.json"
    proc = BrokerProcess(tmp_path / "data", env={"STARQUAKE_STORAGE_FAULTS": str(control)})
    proc.start()
    try:
        client = process_client(proc.url)
        try:
            producer = client.create_producer("persistent://public/default/open")
            producer.send(b"before")
            control.write_text(json.dumps({"fail_metadata": errno.EIO}))
            status, _ = admin_json(proc, "POST", f"{NS}/open/terminate")
            assert status == 500
            control.write_text("{}")
            producer.send(b"after")  # not refused as terminated
            assert admin_json(proc, "POST", f"{NS}/open/terminate")[0] == 200
            with pytest.raises(pulsar.TopicTerminated):
                producer.send(b"too late")
        finally:
            # terminating disconnects the topic's producers, as Pulsar does; the official
            # client then finds the topic terminated and closes the producer itself, so its
            # close() may answer AlreadyClosed, depending on timing
            with contextlib.suppress(pulsar.AlreadyClosed):
                client.close()
    finally:
        proc.cleanup()


def test_an_absurd_count_stored_by_an_earlier_version_is_served_bounded(tmp_path: Path) -> None:
    """An earlier version stored any partition count; such a topic is served with the
    ceiling (and the operator told) instead of taking the broker down at the next listing."""
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        assert admin_json(proc, "PUT", f"{NS}/legacy/partitions", 2)[0] == 204
        proc.stop()
        store = SqliteMetadataStore(tmp_path / "data" / "metadata.db")
        try:
            key = "/admin/partitioned-topics/public/default/persistent/legacy"
            assert store.get(key) is not None
            store.put(key, json.dumps({"partitions": 1_000_000_000}).encode())
        finally:
            store.close()
        proc.start()
        assert admin_json(proc, "GET", f"{NS}/legacy/partitions") == (
            200,
            {"partitions": MAX_PARTITIONS},
        )
        status, listed = admin_json(proc, "GET", NS)
        assert status == 200 and len(listed) == MAX_PARTITIONS
        assert "stored with 1000000000 partitions" in proc.log()
    finally:
        proc.cleanup()

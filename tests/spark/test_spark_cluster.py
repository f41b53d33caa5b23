"""The Spark data source against a cluster: two brokers over one JetStream node, the service
URL naming both and the admin URL one of them. The partitions of a topic are served by
whichever broker owns their bundle; a batch write and a batch read reach every partition
through lookups (and the admin calls through the redirects to the owners), each row once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from admin_http import admin_json
from broker_process import BrokerProcess, multi_host_url
from conftest import SparkBroker
from spark_helpers import load, read_topic

from starquake.cluster.nodes import jetstream_nodes

PARTITIONS = 8


class ClusterSparkBroker(SparkBroker):
    """The first broker for admin calls, every broker in the service URL."""

    def __init__(self, brokers: list[BrokerProcess]) -> None:
        super().__init__(brokers[0])
        self.brokers = brokers

    @property
    def url(self) -> str:
        return multi_host_url(self.brokers)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSparkBroker]:
    base = tmp_path_factory.mktemp("spark-cluster")
    (node,) = jetstream_nodes(1, base / "jetstream")
    node.start()
    cluster_name = f"spark{uuid.uuid4().hex[:6]}"
    brokers = [
        BrokerProcess(
            base / f"b{i}",
            f"metadataStoreUrl={node.url}",
            f"clusterName={cluster_name}",
            "brokerDeleteInactiveTopicsEnabled=false",
        )
        for i in range(2)
    ]
    try:
        for broker in brokers:
            broker.start(timeout=60)
        yield ClusterSparkBroker(brokers)
    finally:
        for broker in brokers:
            broker.cleanup()
        node.stop()


def test_a_batch_write_and_read_reach_every_partition_through_its_owner(
    spark: Any, cluster: ClusterSparkBroker
) -> None:
    topic = f"persistent://public/default/spark-cluster-{uuid.uuid4().hex[:8]}"
    cluster.create_partitioned(topic, PARTITIONS)
    df = spark.range(400).selectExpr(
        "concat('v', cast(id as string)) as value",
        "concat('key', cast(id % 13 as string)) as __key",
    )
    writer = df.repartition(2).write.format("pulsar").mode("append")
    for key, value in cluster.options(topic=topic, writeId="cluster-job").items():
        writer = writer.option(key, value)
    writer.save()

    expected = sorted(f"v{i}".encode() for i in range(400))
    assert sorted(m.data() for m in read_topic(cluster, topic)) == expected
    rows = load(spark, cluster, topic=topic).collect()
    assert sorted(bytes(r.value) for r in rows) == expected

    owners = set()
    for p in range(PARTITIONS):
        path = f"/lookup/v2/topic/{topic.replace('://', '/')}-partition-{p}"
        status, body = admin_json(cluster.brokers[0], "GET", path)
        assert status == 200, (status, body)
        owners.add(body["brokerUrl"])
    assert owners <= {b.url for b in cluster.brokers}

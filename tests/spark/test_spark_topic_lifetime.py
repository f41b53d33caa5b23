"""The pipeline's topics outlive an idle spell with the broker's default lifecycle settings
(inactive topics without subscriptions deleted, no retention), shortened here: the sink keeps
its durable subscription on the topics it writes, and a source with ``predefinedSubscription``
keeps its own. A control topic written with ``sinkSubscription`` '' is deleted meanwhile:
proof that the deletion ran."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from broker_process import BrokerProcess
from conftest import SparkBroker
from polling import wait_for
from spark_helpers import load_stream, produce, read_topic

NS = "persistent://public/default"


@pytest.fixture
def idle_broker(tmp_path: Path) -> Iterator[SparkBroker]:
    # the defaults' behaviour, minutes turned into seconds
    proc = BrokerProcess(
        tmp_path / "data",
        "brokerDeleteInactiveTopicsFrequencySeconds=0.5",
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=1",
        "managedLedgerMaxEntriesPerLedger=5",
    )
    proc.start()
    try:
        yield SparkBroker(proc)
    finally:
        proc.cleanup()


def _exists(broker: SparkBroker, topic: str) -> bool:
    tenant_ns = topic.partition("://")[2].rsplit("/", 1)[0]
    with urllib.request.urlopen(
        f"{broker.admin_url}/admin/v2/persistent/{tenant_ns}", timeout=10
    ) as resp:
        names = json.loads(resp.read())
    with urllib.request.urlopen(
        f"{broker.admin_url}/admin/v2/persistent/{tenant_ns}/partitioned", timeout=10
    ) as resp:
        names += json.loads(resp.read())
    return any(n == topic or n.startswith(topic + "-partition-") for n in names)


def _write(spark: Any, broker: SparkBroker, topic: str, n: int, **options: str) -> None:
    df = spark.range(n).selectExpr("concat('v', cast(id as string)) as value").repartition(2)
    writer = df.write.format("pulsar").mode("append")
    for key, value in broker.options(topic=topic, **options).items():
        writer = writer.option(key, value)
    writer.save()


def test_written_topics_outlive_an_idle_spell(spark: Any, idle_broker: SparkBroker) -> None:
    kept, parted, control = f"{NS}/kept", f"{NS}/kept-parted", f"{NS}/control"
    idle_broker.create_partitioned(parted, 3)
    _write(spark, idle_broker, kept, 300)
    _write(spark, idle_broker, parted, 300)
    _write(spark, idle_broker, control, 10, sinkSubscription="")
    wait_for(lambda: not _exists(idle_broker, control), "control topic deleted", 60)
    for topic in (kept, parted):
        values = sorted(m.data() for m in read_topic(idle_broker, topic))
        assert values == sorted(f"v{i}".encode() for i in range(300)), topic


def test_an_idle_streaming_pipeline_loses_nothing(
    spark: Any, idle_broker: SparkBroker, tmp_path: Path
) -> None:
    source, sink, control = f"{NS}/src", f"{NS}/sink", f"{NS}/control-2"
    ckpt = str(tmp_path / "ckpt")

    def run() -> None:
        query = (
            load_stream(
                spark,
                idle_broker,
                topic=source,
                startingOffsets="earliest",
                predefinedSubscription="pipeline",
            )
            .select("value", "__key")
            .writeStream.format("pulsar")
            .option("service.url", idle_broker.url)
            .option("admin.url", idle_broker.admin_url)
            .option("topic", sink)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None

    # the source's own subscription exists before anything is produced (else the broker
    # may delete the new topic before the query starts, as Pulsar would)
    client = pulsar.Client(idle_broker.url)
    client.subscribe(source, "pipeline").close()
    client.close()
    produce(idle_broker, source, 200, prefix="a")
    run()
    # the driver is down; the broker deletes what nobody keeps
    _write(spark, idle_broker, control, 10, sinkSubscription="")
    wait_for(lambda: not _exists(idle_broker, control), "control topic deleted", 60)
    produce(idle_broker, source, 100, prefix="b")
    run()  # the restarted query goes on from its checkpoint
    values = sorted(m.data() for m in read_topic(idle_broker, sink))
    expected = [f"a{i}".encode() for i in range(200)] + [f"b{i}".encode() for i in range(100)]
    assert values == sorted(expected)

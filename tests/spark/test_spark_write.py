"""Writes through ``format("pulsar")``: batch and streaming, idempotent per producer name."""

from __future__ import annotations

import datetime
import json
import urllib.request
from pathlib import Path
from typing import Any

import pulsar
import pytest
from conftest import SparkBroker
from spark_helpers import load_stream, produce, read_topic


def _rows(spark: Any, n: int) -> Any:
    return spark.range(n).selectExpr(
        "concat('v', cast(id as string)) as value",
        "concat('key', cast(id % 11 as string)) as __key",
        "timestamp_millis(1700000000000 + id) as __eventTime",
        "map('n', cast(id as string)) as __messageProperties",
    )


def _write(df: Any, broker: SparkBroker, **options: str) -> None:
    writer = df.write.format("pulsar").mode("append")
    for key, value in broker.options(**options).items():
        writer = writer.option(key, value)
    writer.save()


def test_batch_write_then_the_same_write_again_stores_each_row_once(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    spark_broker.create_partitioned(new_topic, 3)
    df = _rows(spark, 500).repartition(2)
    _write(df, spark_broker, topic=new_topic, writeId="job-1")
    messages = read_topic(spark_broker, new_topic)
    assert sorted(m.data() for m in messages) == sorted(f"v{i}".encode() for i in range(500))
    for m in messages:
        i = int(m.data()[1:])
        assert m.partition_key() == f"key{i % 11}"
        assert m.event_timestamp() == 1_700_000_000_000 + i
        assert m.properties() == {"n": str(i)}
        assert m.producer_name().startswith("spark-job-1-")
    # a job run again with the same writeId (or a retried task) adds nothing
    _write(df, spark_broker, topic=new_topic, writeId="job-1")
    assert len(read_topic(spark_broker, new_topic)) == 500
    # the writer turned deduplication on for the namespace
    with urllib.request.urlopen(
        f"{spark_broker.admin_url}/admin/v2/namespaces/public/default/deduplication"
    ) as resp:
        assert json.loads(resp.read()) is True


@pytest.mark.parametrize("batching", ["true", "false"])
def test_keyed_rows_go_where_the_official_client_routes_their_keys(
    spark: Any, spark_broker: SparkBroker, new_topic: str, batching: str
) -> None:
    spark_broker.create_partitioned(new_topic, 3)
    df = _rows(spark, 300).repartition(2)
    _write(df, spark_broker, topic=new_topic, **{"pulsar.producer.batchingEnabled": batching})
    client = pulsar.Client(spark_broker.url)
    try:
        # the official producer's routing of each key (its default BoostHash scheme)
        producer = client.create_producer(new_topic)
        routed = {}
        for k in range(11):
            mid = producer.send(b"probe", partition_key=f"key{k}")
            routed[f"key{k}"] = mid.partition()
        producer.close()
    finally:
        client.close()
    messages = [m for m in read_topic(spark_broker, new_topic) if m.data() != b"probe"]
    assert sorted(m.data() for m in messages) == sorted(f"v{i}".encode() for i in range(300))
    for m in messages:
        assert m.topic_name().endswith(f"-partition-{routed[m.partition_key()]}")
        assert m.properties() == {"n": m.data()[1:].decode()}


def test_null_message_property_fails_the_write(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    df = spark.range(3).selectExpr(
        "cast(id as string) as value", "map('a', cast(null as string)) as __messageProperties"
    )
    with pytest.raises(Exception, match="property 'a' has no value"):
        _write(df, spark_broker, topic=new_topic)


def test_topic_column_routes_rows(spark: Any, spark_broker: SparkBroker, new_topic: str) -> None:
    df = spark.range(30).selectExpr(
        "cast(id as string) as value",
        f"concat('{new_topic}-', cast(id % 2 as string)) as __topic",
    )
    _write(df, spark_broker)
    assert len(read_topic(spark_broker, f"{new_topic}-0")) == 15
    assert len(read_topic(spark_broker, f"{new_topic}-1")) == 15


def test_streaming_copy_keeps_every_field(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    produce(spark_broker, new_topic, 40)
    query = (
        load_stream(spark, spark_broker, topic=new_topic, startingOffsets="earliest")
        .writeStream.format("pulsar")
        .option("service.url", spark_broker.url)
        .option("admin.url", spark_broker.admin_url)
        .option("topic", new_topic + "-copy")
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    copied = read_topic(spark_broker, new_topic + "-copy")
    assert sorted(m.data() for m in copied) == sorted(f"m{i}".encode() for i in range(40))
    for m in copied:
        i = int(m.data()[1:])
        assert (m.partition_key(), m.properties()) == (f"k{i % 17}", {"i": str(i)})
        assert m.event_timestamp() == 1_700_000_000_000 + i
        assert m.producer_name().startswith(f"spark-{query.id}-")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda s: s.range(3).selectExpr("cast(id as string) as value", "id as other"), "other"),
        (lambda s: s.range(3).selectExpr("id as value"), "'value' has type bigint"),
        (lambda s: s.range(3).selectExpr("cast(id as string) as __key"), "'value' column"),
    ],
)
def test_bad_columns_fail_when_planned(
    spark: Any, spark_broker: SparkBroker, new_topic: str, make: Any, message: str
) -> None:
    with pytest.raises(Exception, match=message):
        _write(make(spark), spark_broker, topic=new_topic)


def test_overwrite_is_refused(spark: Any, spark_broker: SparkBroker, new_topic: str) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception, match="only appends"):
        df.write.format("pulsar").mode("overwrite").option("service.url", spark_broker.url).option(
            "topic", new_topic
        ).save()


def test_event_time_given_as_a_timestamp_keeps_milliseconds(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    df = spark.createDataFrame([("x", when)], "value string, __eventTime timestamp")
    _write(df, spark_broker, topic=new_topic)
    (msg,) = read_topic(spark_broker, new_topic)
    assert msg.event_timestamp() == int(when.timestamp() * 1000)

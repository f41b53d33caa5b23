"""Options with the names of Spark's Kafka source, through real Spark and a real broker:
includeHeaders, startingTimestamp / startingOffsetsByTimestamp, minOffsetsPerTrigger with
maxTriggerDelay, maxBytesPerTrigger; and pass-through options that fail at plan time."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from conftest import SparkBroker
from spark_helpers import load, load_stream, produce, read_topic


def _send(broker: SparkBroker, topic: str, values: list[bytes], **producer_args: Any) -> None:
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=False, **producer_args)
        for value in values:
            producer.send(value)
        producer.close()
    finally:
        client.close()


def test_include_headers_gives_the_properties_as_kafka_headers(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    produce(spark_broker, new_topic, 3)  # properties {"i": "<i>"}
    _send(spark_broker, new_topic, [b"bare"])
    df = load(spark, spark_broker, topic=new_topic, includeHeaders="true")
    assert df.columns[-1] == "headers"
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    rows = {bytes(r.value): r.headers for r in df.collect()}
    assert {v: [(h.key, bytes(h.value)) for h in hs] for v, hs in rows.items() if hs} == {
        b"m0": [("i", b"0")],
        b"m1": [("i", b"1")],
        b"m2": [("i", b"2")],
    }
    assert rows[b"bare"] is None  # as Kafka: null, not empty, without headers


def _save(df: Any, broker: SparkBroker, **options: str) -> None:
    writer = df.write.format("pulsar").mode("append")
    for key, value in broker.options(**options).items():
        writer = writer.option(key, value)
    writer.save()


def test_a_headers_column_is_written_as_message_properties(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    source, target = new_topic, new_topic + "-copy"
    produce(spark_broker, source, 4)  # properties {"i": "<i>"}
    df = load(spark, spark_broker, topic=source, includeHeaders="true")
    # as a Kafka job writes them: value and headers, one header added
    copy = df.selectExpr(
        "value", "array_union(headers, array(named_struct('key', 'from', 'value', X'6131'))) AS h"
    ).withColumnRenamed("h", "headers")
    _save(copy, spark_broker, topic=target, writeId="headers")
    got = {m.data(): m.properties() for m in read_topic(spark_broker, target)}
    assert got == {f"m{i}".encode(): {"i": str(i), "from": "a1"} for i in range(4)}
    nulls = spark.createDataFrame(
        [(b"v", [("k", None)])], "value binary, headers array<struct<key:string,value:binary>>"
    )
    with pytest.raises(Exception, match="column 'headers' holds a null value for key 'k'"):
        _save(nulls, spark_broker, topic=target, writeId="nulls")
    wrong = spark.createDataFrame([(b"v", [1])], "value binary, headers array<int>")
    with pytest.raises(Exception, match="column 'headers' has type array<int>; expected"):
        _save(wrong, spark_broker, topic=target)


def test_starting_timestamp_and_starting_offsets_by_timestamp(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    spark_broker.create_partitioned(new_topic, 2)
    for p in (0, 1):
        _send(spark_broker, f"{new_topic}-partition-{p}", [f"a{p}-{i}".encode() for i in range(3)])
    time.sleep(0.05)  # publish times are in ms: the boundary lies between the two sends
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    for p in (0, 1):
        _send(spark_broker, f"{new_topic}-partition-{p}", [f"b{p}-{i}".encode() for i in range(2)])

    def values(**options: str) -> list[str]:
        rows = load(spark, spark_broker, topic=new_topic, **options).collect()
        return sorted(bytes(r.value).decode() for r in rows)

    assert values(startingTimestamp=str(boundary)) == ["b0-0", "b0-1", "b1-0", "b1-1"]
    # partition 0 from the boundary; partition 1 not named: from the batch default, earliest
    by_partition = json.dumps({new_topic: {"0": boundary}})
    assert values(startingOffsetsByTimestamp=by_partition) == [
        "a1-0",
        "a1-1",
        "a1-2",
        "b0-0",
        "b0-1",
        "b1-0",
        "b1-1",
    ]
    # a partition with nothing published since the time: Kafka's startingOffsetsByTimestampStrategy
    future = json.dumps({new_topic: {"0": boundary, "1": boundary + 3_600_000}})
    with pytest.raises(
        Exception,
        match=r"option 'startingOffsetsByTimestamp': no message of \S+-partition-1 was "
        r"published at or after \d+; with the option startingOffsetsByTimestampStrategy=latest",
    ):
        values(startingOffsetsByTimestamp=future)
    assert values(
        startingOffsetsByTimestamp=future, startingOffsetsByTimestampStrategy="latest"
    ) == ["b0-0", "b0-1"]
    with pytest.raises(
        Exception, match="options 'startingOffsets' and 'startingTimestamp' exclude each other"
    ):
        load(
            spark, spark_broker, topic=new_topic, startingOffsets="earliest", startingTimestamp="1"
        )


def _memory_query(spark: Any, broker: SparkBroker, workdir: Path, **options: str) -> Any:
    name = f"kafka_opts_{uuid.uuid4().hex[:8]}"
    query = (
        load_stream(spark, broker, startingOffsets="earliest", **options)
        .selectExpr("CAST(value AS STRING) AS v")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(workdir / f"checkpoint-{name}"))
        .start()
    )
    return query, name


def _seen(spark: Any, name: str) -> list[str]:
    return sorted(r.v for r in spark.sql(f"select v from {name}").collect())


def test_min_offsets_per_trigger_waits_for_enough_new_rows(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    _send(spark_broker, new_topic, [b"a0", b"a1"])
    query, name = _memory_query(
        spark,
        spark_broker,
        workdir,
        topic=new_topic,
        minOffsetsPerTrigger="4",
        maxTriggerDelay="1h",
    )
    try:
        query.processAllAvailable()  # the first trigger never waits (as Kafka's)
        assert _seen(spark, name) == ["a0", "a1"]
        _send(spark_broker, new_topic, [b"b0", b"b1", b"b2"])
        query.processAllAvailable()  # 3 new rows < 4: no batch
        assert _seen(spark, name) == ["a0", "a1"]
        _send(spark_broker, new_topic, [b"b3"])
        query.processAllAvailable()
        assert _seen(spark, name) == ["a0", "a1", "b0", "b1", "b2", "b3"]
        assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [2, 4]
    finally:
        query.stop()


def test_max_trigger_delay_lets_fewer_rows_through(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    _send(spark_broker, new_topic, [b"a"])
    query, name = _memory_query(
        spark,
        spark_broker,
        workdir,
        topic=new_topic,
        minOffsetsPerTrigger="1000",
        maxTriggerDelay="2s",
    )
    try:
        query.processAllAvailable()  # the first trigger never waits
        assert _seen(spark, name) == ["a"]
        _send(spark_broker, new_topic, [b"x0", b"x1"])
        deadline = time.monotonic() + 60
        while len(_seen(spark, name)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _seen(spark, name) == ["a", "x0", "x1"]  # 2 new rows, far below 1000
    finally:
        query.stop()


def test_max_bytes_per_trigger_cuts_batches_at_whole_entries(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    # 10 entries of one 1000-byte message each (plus ~40 bytes of metadata): 3500 bytes
    # admit 3 entries per batch
    _send(spark_broker, new_topic, [f"{i:04d}".encode() * 250 for i in range(10)])
    query = (
        load_stream(
            spark,
            spark_broker,
            topic=new_topic,
            startingOffsets="earliest",
            maxBytesPerTrigger="3500",
        )
        .select("value")
        .writeStream.format("parquet")
        .option("path", str(workdir / "out"))
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [3, 3, 3, 1]
    assert spark.read.parquet(str(workdir / "out")).count() == 10


def test_pass_through_settings_reach_the_client_and_errors_come_at_plan_time(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    rows = spark.createDataFrame([("v1",), ("v2",)], "value string")
    writer = rows.write.format("pulsar").mode("append")
    for key, value in spark_broker.options(topic=new_topic, exactlyOnce="false").items():
        writer = writer.option(key, value)
    writer.option("pulsar.producer.batchingMaxPublishDelayMicros", "500").option(
        "pulsar.client.operationTimeoutMs", "20000"
    ).option("pulsar.producer.properties", "app=spark").save()
    df = load(
        spark,
        spark_broker,
        topic=new_topic,
        **{
            "pulsar.reader.receiverQueueSize": "5",
            "pulsar.reader.subscriptionRolePrefix": "etl",
            "pulsar.client.connectionTimeoutMs": "5000",
        },
    )
    assert sorted(bytes(r.value) for r in df.collect()) == [b"v1", b"v2"]
    with pytest.raises(
        Exception, match=re.escape("option 'pulsar.producer.sendTimeoutMs': 'x' is not")
    ):
        writer.option("pulsar.producer.sendTimeoutMs", "x").save()  # at save(), no task ran
    with pytest.raises(
        Exception, match=re.escape("option 'pulsar.client.useTcpNoDelay': a Java client")
    ):
        load(spark, spark_broker, topic=new_topic, **{"pulsar.client.useTcpNoDelay": "true"})

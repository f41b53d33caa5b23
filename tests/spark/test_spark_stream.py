"""Streaming reads: checkpoints, admission control, availableNow, new partitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import SparkBroker
from spark_helpers import load_stream, produce


def _run_to_parquet(spark: Any, broker: SparkBroker, workdir: Path, **options: str) -> list[int]:
    """One availableNow run into a parquet sink; the rows of each micro-batch."""
    query = (
        load_stream(spark, broker, **options)
        .select("value", "__messageId", "__topic")
        .writeStream.format("parquet")
        .option("path", str(workdir / "out"))
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_available_now_with_a_limit_stops_and_resumes_without_loss_or_repeat(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    spark_broker.create_partitioned(new_topic, 2)
    produce(spark_broker, new_topic, 25, batching_max_messages=100)  # a few large batches
    options = {"topic": new_topic, "startingOffsets": "earliest", "maxRecordsPerTrigger": "10"}
    first = _run_to_parquet(spark, spark_broker, workdir, **options)
    assert first == [10, 10, 5]  # exactly the limit, cuts inside batched entries
    produce(spark_broker, new_topic, 13, prefix="n", batching_max_messages=100)
    second = _run_to_parquet(spark, spark_broker, workdir, **options)
    assert second == [10, 3]
    rows = spark.read.parquet(str(workdir / "out")).collect()
    values = sorted(r.value for r in rows)
    assert values == sorted(
        [f"m{i}".encode() for i in range(25)] + [f"n{i}".encode() for i in range(13)]
    )
    assert len({bytes(r["__messageId"]) + r["__topic"].encode() for r in rows}) == 38


def test_streaming_from_latest_sees_only_new_messages(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    produce(spark_broker, new_topic, 7, prefix="old")
    assert _run_to_parquet(spark, spark_broker, workdir, topic=new_topic) == []
    produce(spark_broker, new_topic, 4, prefix="new")
    assert _run_to_parquet(spark, spark_broker, workdir, topic=new_topic) == [4]
    values = sorted(r.value for r in spark.read.parquet(str(workdir / "out")).collect())
    assert values == [f"new{i}".encode() for i in range(4)]


def test_partitions_added_later_are_read_from_their_start(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    spark_broker.create_partitioned(new_topic, 1)
    produce(spark_broker, new_topic, 5)
    options = {"topic": new_topic, "startingOffsets": "earliest"}
    assert _run_to_parquet(spark, spark_broker, workdir, **options) == [5]
    spark_broker.create_partitioned(new_topic, 2, update=True)
    produce(spark_broker, f"{new_topic}-partition-1", 3, prefix="p1-")
    assert _run_to_parquet(spark, spark_broker, workdir, **options) == [3]
    topics = {r["__topic"] for r in spark.read.parquet(str(workdir / "out")).collect()}
    assert topics == {f"{new_topic}-partition-0", f"{new_topic}-partition-1"}


def test_starting_time_picks_the_first_message_published_then(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    import time

    produce(spark_broker, new_topic, 3, prefix="before")
    time.sleep(0.05)  # publish times are in ms: the boundary lies between the two sends
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    produce(spark_broker, new_topic, 2, prefix="after")
    rows = _run_to_parquet(
        spark, spark_broker, workdir, topic=new_topic, startingTime=str(boundary)
    )
    assert rows == [2]


def test_predefined_subscription_follows_the_committed_offsets(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    import pulsar

    produce(spark_broker, new_topic, 25, batching_enabled=False)
    options = {
        "topic": new_topic,
        "startingOffsets": "earliest",
        "maxRecordsPerTrigger": "10",
        "predefinedSubscription": "spark-progress",
    }
    assert _run_to_parquet(spark, spark_broker, workdir, **options) == [10, 10, 5]
    # Spark commits a micro-batch when the next one starts: the subscription sits at the
    # start of the last one, whose 5 messages are its backlog
    client = pulsar.Client(spark_broker.url)
    try:
        consumer = client.subscribe(
            new_topic, "spark-progress", consumer_type=pulsar.ConsumerType.Shared
        )
        got = [consumer.receive(5000).data() for _ in range(5)]
        assert got == [f"m{i}".encode() for i in range(20, 25)]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
    finally:
        client.close()

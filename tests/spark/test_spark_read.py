"""Batch reads through ``format("pulsar")`` of data written by the official client."""

from __future__ import annotations

import json
from typing import Any

import pulsar
import pytest
from conftest import SparkBroker
from spark_helpers import load as _load
from spark_helpers import produce as _produce


def test_batch_read_of_a_partitioned_topic_gives_every_message_once_with_its_fields(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    spark_broker.create_partitioned(new_topic, 3)
    _produce(spark_broker, new_topic, 300, batching_max_messages=40)
    df = _load(spark, spark_broker, topic=new_topic)
    assert df.rdd.getNumPartitions() == 3  # one input partition per topic partition
    rows = df.collect()
    assert sorted(r.value for r in rows) == sorted(f"m{i}".encode() for i in range(300))
    for r in rows:
        i = int(r.value[1:])
        assert r["__key"] == f"k{i % 17}"
        assert r["__messageProperties"] == {"i": str(i)}
        assert int(r["__eventTime"].timestamp() * 1000) == 1_700_000_000_000 + i
        assert r["__topic"].startswith(new_topic + "-partition-")
    # the message ids are those the official client sees, and it reads them back
    ours = {bytes(r["__messageId"]): r.value for r in rows}
    client = pulsar.Client(spark_broker.url)
    try:
        for p in range(3):
            reader = client.create_reader(f"{new_topic}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                msg = reader.read_next(5000)
                mid = msg.message_id()
                parsed = pulsar.MessageId.deserialize(mid.serialize())
                assert (parsed.ledger_id(), parsed.entry_id(), parsed.batch_index()) == (
                    mid.ledger_id(),
                    mid.entry_id(),
                    mid.batch_index(),
                )
                assert ours[mid.serialize()] == msg.data()
    finally:
        client.close()


def test_starting_and_ending_offsets_cut_inside_batches(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    spark_broker.create_partitioned(new_topic, 2)
    _produce(spark_broker, new_topic, 200, batching_max_messages=30)
    everything = _load(spark, spark_broker, topic=new_topic).collect()
    part0 = f"{new_topic}-partition-0"
    ordered = [r for r in everything if r["__topic"] == part0]  # in partition order
    ids = [pulsar.MessageId.deserialize(bytes(r["__messageId"])) for r in ordered]
    # cut points inside batches (not at a batch's first message), wherever the batches ended
    first, last = (
        next(i for i in range(at, len(ids)) if ids[i].batch_index() > 0) for at in (5, 40)
    )
    start_id, end_id = ids[first], ids[last]
    starting = {part0: [start_id.ledger_id(), start_id.entry_id(), start_id.batch_index()]}
    ending = {
        part0: [end_id.ledger_id(), end_id.entry_id(), end_id.batch_index()],
        f"{new_topic}-partition-1": -2,  # earliest: nothing of partition 1
    }
    df = _load(
        spark,
        spark_broker,
        topic=new_topic,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
    )
    got = [r.value for r in df.collect()]
    assert got == [r.value for r in ordered[first:last]]
    # the same range read twice: the same rows in the same order
    assert [r.value for r in df.collect()] == got


@pytest.mark.parametrize(
    "codec",
    [
        pulsar.CompressionType.NONE,
        pulsar.CompressionType.LZ4,
        pulsar.CompressionType.ZLib,
        pulsar.CompressionType.ZSTD,
        pulsar.CompressionType.SNAPPY,
    ],
)
def test_every_codec_batched_and_not(
    spark: Any, spark_broker: SparkBroker, new_topic: str, codec: Any
) -> None:
    _produce(spark_broker, new_topic, 120, prefix="b", compression_type=codec)
    _produce(
        spark_broker, new_topic, 30, prefix="u", compression_type=codec, batching_enabled=False
    )
    values = sorted(r.value for r in _load(spark, spark_broker, topic=new_topic).collect())
    expected = sorted(
        [f"b{i}".encode() for i in range(120)] + [f"u{i}".encode() for i in range(30)]
    )
    assert values == expected


def test_a_chunked_message_is_one_row(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    client = pulsar.Client(spark_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    big = bytes(range(256)) * (6 * 1024 * 1024 // 256)  # over the 5 MB message limit
    try:
        producer = client.create_producer(new_topic, batching_enabled=False, chunking_enabled=True)
        producer.send(b"before")
        producer.send(big)
        producer.send(b"after")
        producer.close()
    finally:
        client.close()
    rows = _load(spark, spark_broker, topic=new_topic).collect()
    assert [len(r.value) for r in rows] == [6, len(big), 5]
    assert rows[1].value == big
    mid = pulsar.MessageId.deserialize(bytes(rows[1]["__messageId"]))
    assert (
        mid.entry_id() > pulsar.MessageId.deserialize(bytes(rows[0]["__messageId"])).entry_id() + 1
    )


def test_topics_list_and_pattern(spark: Any, spark_broker: SparkBroker, new_topic: str) -> None:
    _produce(spark_broker, new_topic + "-a", 10, prefix="a")
    _produce(spark_broker, new_topic + "-b", 20, prefix="b")
    listed = _load(spark, spark_broker, topics=f"{new_topic}-a,{new_topic}-b")
    assert listed.count() == 30
    short = new_topic.rsplit("/", 1)[1]
    matched = _load(spark, spark_broker, topicsPattern=f"public/default/{short}-.*")
    assert sorted(r["__topic"] for r in matched.select("__topic").distinct().collect()) == [
        f"{new_topic}-a",
        f"{new_topic}-b",
    ]

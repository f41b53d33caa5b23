"""Producing and reading back for the Spark tests (official client)."""

from __future__ import annotations

from typing import Any

import pulsar
from conftest import SparkBroker

import starquake.client as sq


def produce(
    broker: SparkBroker, topic: str, count: int, *, prefix: str = "m", **producer_args: Any
) -> None:
    """``count`` keyed messages ``<prefix><i>`` with properties and event times, batched."""
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        args = {
            "batching_enabled": True,
            "batching_max_publish_delay_ms": 50,
            "block_if_queue_full": True,
            **producer_args,
        }
        producer = client.create_producer(topic, **args)
        failures: list[Any] = []

        def sent(result: Any, _msg_id: Any) -> None:
            if result != pulsar.Result.Ok:
                failures.append(result)

        for i in range(count):
            producer.send_async(
                f"{prefix}{i}".encode(),
                sent,
                partition_key=f"k{i % 17}",
                properties={"i": str(i)},
                event_timestamp=1_700_000_000_000 + i,
            )
        producer.flush()
        producer.close()
        assert not failures, failures[:3]
    finally:
        client.close()


def count_topic(broker: SparkBroker, topic: str) -> int:
    """How many messages ``topic`` (all partitions) holds, read with Starquake's client: for
    polls repeated every fraction of a second. The official client's library has crashed the
    test process (SIGSEGV) in such a loop of creating, reading and closing readers."""
    client = sq.Client(broker.url)
    try:
        count = 0
        for name in client.get_topic_partitions(topic):
            reader = client.create_reader(name, sq.MessageId.earliest)
            while reader.has_message_available():
                reader.read_next(5000)
                count += 1
            reader.close()
        return count
    finally:
        client.close()


def read_topic(broker: SparkBroker, topic: str) -> list[Any]:
    """Every message of ``topic`` (all partitions), with the official client."""
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        names = client.get_topic_partitions(topic)
        out = []
        for name in names:
            reader = client.create_reader(name, pulsar.MessageId.earliest)
            while reader.has_message_available():
                out.append(reader.read_next(5000))
            reader.close()
        return out
    finally:
        client.close()


def load(spark: Any, broker: SparkBroker, **options: str) -> Any:
    reader = spark.read.format("pulsar")
    for key, value in broker.options(**options).items():
        reader = reader.option(key, value)
    return reader.load()


def load_stream(spark: Any, broker: SparkBroker, **options: str) -> Any:
    reader = spark.readStream.format("pulsar")
    for key, value in broker.options(**options).items():
        reader = reader.option(key, value)
    return reader.load()

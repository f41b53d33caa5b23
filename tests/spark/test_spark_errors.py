"""Bad options, missing topics and unreachable brokers fail clearly when the query is planned."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from broker_process import free_port
from conftest import SparkBroker
from spark_helpers import load, load_stream, produce


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t", "colour": "red"}, "unknown option 'colour'"),
        ({"topic": "t", "topics": "a,b"}, "exactly one of the options"),
        ({}, "exactly one of the options"),
        ({"topic": "t", "startingOffsets": "{not json"}, "option 'startingOffsets'"),
        ({"topic": "t", "startingOffsets": '{"t": [1, 2]}'}, "option 'startingOffsets'"),
        ({"topic": "t", "maxRecordsPerTrigger": "10"}, "streaming reads only"),
        ({"topic": "t", "failOnDataLoss": "maybe"}, "option 'failOnDataLoss'"),
        ({"topic": "t", "pulsar.client.nonsense": "1"}, "unknown option 'pulsar.client.nonsense'"),
        ({"topic": "a/b/c/d"}, "option 'topic'"),
        ({"topicsPattern": "(unclosed"}, "topicsPattern"),
    ],
)
def test_bad_read_options_name_the_option(
    spark: Any, spark_broker: SparkBroker, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=message):
        load(spark, spark_broker, **options).collect()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"maxRecordsPerTrigger": "0"}, "option 'maxRecordsPerTrigger': must be at least 1, got 0"),
        ({"startingOffsets": "{not json"}, "option 'startingOffsets': '{not json' is neither"),
        ({"colour": "red"}, "unknown option 'colour' for a read"),
        ({"pulsar.client.useTls": "1"}, "option 'pulsar.client.useTls': '1' is not true or false"),
    ],
)
def test_bad_streaming_options_fail_at_load(
    spark: Any, spark_broker: SparkBroker, new_topic: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(Exception, match=re.escape(message)) as caught:
        load_stream(spark, spark_broker, topic=new_topic, **options)  # load(), not start()
    # Spark prints the traceback before the message: one frame of ours, no chained errors
    lines = str(caught.value).splitlines()
    assert lines[3].startswith("starquake.spark.PulsarOptionError: "), lines
    assert message in lines[3]


def test_a_stream_only_option_in_a_batch_read_is_named(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    produce(spark_broker, new_topic, 1)
    with pytest.raises(
        Exception, match="option 'maxOffsetsPerTrigger' is for streaming reads only"
    ):
        load(spark, spark_broker, topic=new_topic, maxOffsetsPerTrigger="5").collect()


def test_missing_topic(spark: Any, spark_broker: SparkBroker, new_topic: str) -> None:
    with pytest.raises(Exception, match=f"Topic {new_topic} does not exist"):
        load(spark, spark_broker, topic=new_topic).collect()


def test_unreachable_broker_fails_within_the_operation_timeout(spark: Any) -> None:
    start = time.monotonic()
    with pytest.raises(Exception, match="planning the read failed"):
        (
            spark.read.format("pulsar")
            .option("service.url", f"pulsar://127.0.0.1:{free_port()}")
            .option("topic", "t")
            .option("pulsar.client.operationTimeoutMs", "3000")
            .load()
            .collect()
        )
    assert time.monotonic() - start < 60

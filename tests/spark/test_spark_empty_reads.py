"""Reads with nothing to read give an empty DataFrame; a pattern matching no topic, and a time
after the last message, say which option to look at."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from conftest import SparkBroker
from spark_helpers import load, produce


def _create_topic(broker: SparkBroker, topic: str) -> None:
    request = urllib.request.Request(
        f"{broker.admin_url}/admin/v2/{topic.replace('://', '/')}", method="PUT"
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 204


def test_empty_topic_reads_as_an_empty_dataframe(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    _create_topic(spark_broker, new_topic)
    df = load(spark, spark_broker, topic=new_topic)
    assert df.collect() == []
    assert df.columns[0] == "value"


def test_empty_partitioned_topic_reads_as_an_empty_dataframe(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    spark_broker.create_partitioned(new_topic, 3)
    assert load(spark, spark_broker, topic=new_topic).count() == 0


def test_starting_offsets_at_the_end_read_nothing(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    produce(spark_broker, new_topic, 5)
    # -1 (latest) for the topic: the end of what is there when the read is planned
    starting = json.dumps({new_topic: -1})
    assert load(spark, spark_broker, topic=new_topic, startingOffsets=starting).count() == 0


def test_pattern_matching_no_topic_names_the_option(spark: Any, spark_broker: SparkBroker) -> None:
    with pytest.raises(
        Exception,
        match=r"option 'topicsPattern': no topic of namespace public/default matches "
        r"'persistent://public/default/no-such-topic-.\*'",
    ):
        load(spark, spark_broker, topicsPattern="no-such-topic-.*").collect()


@pytest.mark.parametrize("option", ["startingTime", "endingTime"])
def test_time_after_the_last_message(
    spark: Any, spark_broker: SparkBroker, new_topic: str, option: str
) -> None:
    spark_broker.create_partitioned(new_topic, 2)
    produce(spark_broker, new_topic, 10)
    future = str(int(time.time() * 1000) + 3_600_000)
    rows = load(spark, spark_broker, topic=new_topic, **{option: future}).count()
    # after everything: nothing starts there; everything ends before it
    assert rows == (0 if option == "startingTime" else 10)

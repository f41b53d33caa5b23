"""How an exactly-once write learns that broker deduplication is on: through ``admin.url``
when given (never a guessed URL), else from the broker's answers to its producers."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest
from broker_process import free_port
from conftest import SparkBroker
from spark_helpers import read_topic


def _namespace(broker: SparkBroker, deduplication: bool) -> str:
    namespace = f"public/eo-{uuid.uuid4().hex[:8]}"
    base = f"{broker.admin_url}/admin/v2/namespaces/{namespace}"
    with urllib.request.urlopen(urllib.request.Request(base, method="PUT"), timeout=10):
        pass
    request = urllib.request.Request(
        f"{base}/deduplication",
        data=json.dumps(deduplication).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10):
        pass
    return namespace


def _write(spark: Any, broker: SparkBroker, topic: str, **options: str) -> None:
    df = spark.range(100).selectExpr("concat('v', cast(id as string)) as value").repartition(2)
    writer = df.write.format("pulsar").mode("append").option("service.url", broker.url)
    for key, value in {"topic": topic, "writeId": "w", **options}.items():
        writer = writer.option(key, value)
    writer.save()


def test_without_admin_url_a_write_checks_deduplication_through_its_producers(
    spark: Any, spark_broker: SparkBroker
) -> None:
    topic = f"persistent://{_namespace(spark_broker, True)}/t"
    _write(spark, spark_broker, topic)
    _write(spark, spark_broker, topic)  # the same write again: nothing twice
    values = sorted(m.data() for m in read_topic(spark_broker, topic))
    assert values == sorted(f"v{i}".encode() for i in range(100))


def test_without_admin_url_deduplication_off_fails_naming_admin_url(
    spark: Any, spark_broker: SparkBroker
) -> None:
    namespace = _namespace(spark_broker, False)
    topic = f"persistent://{namespace}/t"
    with pytest.raises(
        Exception,
        match=rf"exactly-once writes to {topic} need broker deduplication, and it is off "
        rf".*set-deduplication {namespace} --enable.*option 'admin.url'.*exactlyOnce=false",
    ):
        _write(spark, spark_broker, topic)
    # each task stored its first row, then stopped
    assert len(read_topic(spark_broker, topic)) <= 2


def test_admin_url_where_nothing_listens_is_named(spark: Any, spark_broker: SparkBroker) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(
        Exception,
        match=rf"option 'admin.url' \({url}\): reading the deduplication setting of "
        r"public/default failed",
    ):
        _write(spark, spark_broker, "persistent://public/default/nowhere", **{"admin.url": url})

"""Exactly-once writes through Pulsar transactions (``exactlyOnceMode=transaction``) with real
Spark, to a broker with transactions on and deduplication off: a batch write run twice, a
streaming query, and the broker killed (kill -9) under it, then the query's process killed
too and restarted on its checkpoint. Each source row is in the sink once. Kill points of the
query's process alone are bench/spark_kill_campaign.py --transaction's, and the driver's
commit interrupted between any two of its steps is test_spark_txn_commit.py's."""

from __future__ import annotations

import collections
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from conftest import SparkBroker
from eo_crash import run_kill_point
from spark_helpers import load, load_stream, produce, read_topic

SUITE_TOTAL = 1500


def _deduplication(broker: SparkBroker, topic: str) -> Any:
    namespace = "/".join(topic.split("://")[1].split("/")[:2])
    url = f"{broker.admin_url}/admin/v2/namespaces/{namespace}/deduplication"
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


@pytest.mark.parametrize("keyed", [False, True])
def test_a_batch_write_run_twice_stores_each_row_once(
    spark: Any, txn_broker: SparkBroker, new_topic: str, keyed: bool
) -> None:
    txn_broker.create_partitioned(new_topic, 3)
    columns = ["concat('v', cast(id as string)) as value"]
    if keyed:
        columns.append("concat('key', cast(id % 13 as string)) as __key")
    df = spark.range(2000).selectExpr(*columns).repartition(2)
    for _ in range(2):
        writer = df.write.format("pulsar").mode("append").option("service.url", txn_broker.url)
        options = {"topic": new_topic, "writeId": "txn-twice", "exactlyOnceMode": "transaction"}
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save()
    counts = collections.Counter(m.data() for m in read_topic(txn_broker, new_topic))
    assert len(counts) == 2000
    assert [v for v, n in counts.items() if n > 1] == []
    assert _deduplication(txn_broker, new_topic) in (None, False)  # off: not turned on


def test_a_streaming_query_writes_each_row_once(
    spark: Any, txn_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    source, sink = new_topic, new_topic + "-sink"
    txn_broker.create_partitioned(source, 2)
    txn_broker.create_partitioned(sink, 2)
    produce(txn_broker, source, 1200)
    stream = load_stream(
        spark, txn_broker, topic=source, startingOffsets="earliest", maxRecordsPerTrigger="500"
    )
    query = (
        stream.selectExpr("value", "__key")
        .writeStream.format("pulsar")
        .option("service.url", txn_broker.url)
        .option("topic", sink)
        .option("exactlyOnceMode", "transaction")
        .option("checkpointLocation", str(workdir / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None
    counts = collections.Counter(m.data() for m in read_topic(txn_broker, sink))
    assert len(counts) == 1200
    assert [v for v, n in counts.items() if n > 1] == []
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 3  # 500, 500, 200


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_broker_killed_under_a_pipeline_loses_and_duplicates_nothing(workdir: Path) -> None:
    proc = BrokerProcess(
        workdir / "data",
        "transactionCoordinatorEnabled=true",
        "brokerDeduplicationEnabled=false",
        "brokerDeleteInactiveTopicsEnabled=false",
    )
    proc.start()
    try:
        outcome = run_kill_point(
            SparkBroker(proc),
            workdir,
            "txn-broker-kill",
            kill_broker=True,
            keyed=False,
            at=500,
            delay=1.0,
            total=SUITE_TOTAL,
            transaction=True,
        )
        assert (outcome.lost, outcome.duplicated) == (0, 0), outcome
    finally:
        proc.cleanup()


def test_the_source_reads_the_rows_of_a_transaction_once_it_is_committed(
    spark: Any, txn_broker: SparkBroker, new_topic: str
) -> None:
    import pyarrow as pa

    from starquake.client.asyncio import Client
    from starquake.spark._options import write_options
    from starquake.spark._txn_sink import commit_batch, write_task
    from starquake.spark._write import _write_rows

    opts = write_options(
        {"service.url": txn_broker.url, "topic": new_topic, "exactlyOnceMode": "transaction"}
    )

    async def write_rows(client: Client, batches: Any, name: str, txn: Any) -> int:
        sent, _ = await _write_rows(client, opts, None, batches, name, 0, txn=txn)
        return sent

    rows = pa.RecordBatch.from_pydict({"value": [f"r{i}".encode() for i in range(50)]})
    message = write_task(opts, "read-back", 0, 0, iter([rows]), write_rows)  # left open
    df = load(spark, txn_broker, topic=new_topic)
    assert df.count() == 0  # written, not committed: not readable
    commit_batch(opts, "read-back", 0, [message])
    values = sorted(r.value for r in load(spark, txn_broker, topic=new_topic).collect())
    assert values == sorted(f"r{i}".encode() for i in range(50))

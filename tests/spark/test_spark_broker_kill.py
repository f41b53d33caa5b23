"""Exactly-once writes across kill -9 of the BROKER: a batch write run again with the same
``writeId`` after the broker was killed and restarted stores nothing twice, to a partitioned
target with and without keys (the restarted broker recovers each producer's highest sequence
id from the stored entries, whose ids have gaps: a task spreads its rows over the partitions)."""

from __future__ import annotations

import collections
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess
from conftest import SparkBroker
from spark_helpers import read_topic


def _rows(spark: Any, n: int, keyed: bool) -> Any:
    columns = ["concat('v', cast(id as string)) as value"]
    if keyed:
        columns.append("concat('key', cast(id % 13 as string)) as __key")
    return spark.range(n).selectExpr(*columns).repartition(2)


def _write(df: Any, broker: SparkBroker, topic: str) -> None:
    writer = df.write.format("pulsar").mode("append")
    for key, value in broker.options(topic=topic, writeId="after-kill").items():
        writer = writer.option(key, value)
    writer.save()


@pytest.mark.parametrize("keyed", [False, True])
def test_write_run_again_after_broker_kill9_stores_each_row_once(
    spark: Any, tmp_path: Path, keyed: bool
) -> None:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        broker = SparkBroker(proc)
        topic = "persistent://public/default/after-kill"
        broker.create_partitioned(topic, 3)
        df = _rows(spark, 3000, keyed)
        _write(df, broker, topic)
        proc.kill()  # no deduplication snapshot yet: the restart replays the stored entries
        proc.start()
        _write(df, broker, topic)
        counts = collections.Counter(m.data() for m in read_topic(broker, topic))
        assert len(counts) == 3000
        assert [v for v, n in counts.items() if n > 1] == []
        with urllib.request.urlopen(
            f"{broker.admin_url}/admin/v2/{topic.replace('://', '/')}/partitioned-stats"
        ) as resp:
            stats = json.loads(resp.read())
        assert stats["msgInCounter"] == 0  # the second write stored nothing
    finally:
        proc.cleanup()

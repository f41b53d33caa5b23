"""Batch-write cost of the sink's two exactly-once modes: ``exactlyOnceMode=deduplication``
(deduplication on in the target's namespace) and ``exactlyOnceMode=transaction`` (off), the
same DataFrame written to a fresh partitioned topic each run; prints the medians of 3 runs and
their ratio.

    .venv/bin/python bench/spark_txn_write.py --rows 200000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "spark"), str(ROOT / "tests")]
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from broker_process import BrokerProcess  # noqa: E402
from conftest import SparkBroker  # noqa: E402


def _write(df: Any, broker: SparkBroker, mode: str, topic: str) -> float:
    broker.create_partitioned(topic, 2)
    writer = df.write.format("pulsar").mode("append")
    options = {"topic": topic, "writeId": uuid.uuid4().hex, "exactlyOnceMode": mode}
    if mode == "deduplication":
        options["admin.url"] = broker.admin_url  # turns deduplication on
    for key, value in {"service.url": broker.url, **options}.items():
        writer = writer.option(key, value)
    start = time.perf_counter()
    writer.save()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    args = parser.parse_args()
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pad = "x" * max(0, args.size - 12)
    df = (
        spark.range(args.rows)
        .selectExpr(f"concat(cast(id as string), '{pad}') as value")
        .repartition(2)
        .cache()
    )
    df.count()
    with tempfile.TemporaryDirectory() as tmp:
        proc = BrokerProcess(
            Path(tmp) / "data",
            "transactionCoordinatorEnabled=true",
            "brokerDeleteInactiveTopicsEnabled=false",
        )
        proc.start()
        try:
            broker = SparkBroker(proc)
            medians = {}
            for mode, namespace in (("deduplication", "dedup"), ("transaction", "default")):
                if namespace != "default":  # deduplication goes on for this one only
                    url = f"{broker.admin_url}/admin/v2/namespaces/public/{namespace}"
                    with urllib.request.urlopen(urllib.request.Request(url, method="PUT")):
                        pass
                _write(df, broker, mode, f"persistent://public/{namespace}/warm-{mode}")
                times = [
                    _write(
                        df, broker, mode, f"persistent://public/{namespace}/w-{uuid.uuid4().hex}"
                    )
                    for _ in range(3)
                ]
                medians[mode] = statistics.median(times)
                print(
                    f"{mode}: median {medians[mode]:.2f} s of 3 "
                    f"({args.rows / medians[mode]:,.0f} rows/s)",
                    flush=True,
                )
            ratio = medians["transaction"] / medians["deduplication"]
            print(f"transaction / deduplication time: {ratio:.2f}")
        finally:
            proc.cleanup()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

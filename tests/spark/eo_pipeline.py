"""A streaming pipeline for the exactly-once test, run as its own process (and JVM).

source topic -> value + "!" (through a slow Python UDF, so that a kill lands inside a
micro-batch) -> sink topic, each output message carrying its source message id in the
property ``src``. ``--available-now`` processes the backlog and stops; without it the query
runs until the process is killed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("service_url", "admin_url", "source", "sink", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--drop-key", action="store_true", help="write the rows without keys")
    parser.add_argument(
        "--transaction", action="store_true", help="write with exactlyOnceMode=transaction"
    )
    args = parser.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.functions import udf

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    @udf("binary")
    def slow_mark(value: bytes) -> bytes:
        time.sleep(0.002)
        return value + b"!"

    source = (
        spark.readStream.format("pulsar")
        .option("service.url", args.service_url)
        .option("topic", args.source)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "500")
        .load()
    )
    columns = [
        slow_mark("value").alias("value"),
        F.create_map(
            F.lit("src"), F.concat(F.col("__topic"), F.lit("/"), F.hex("__messageId"))
        ).alias("__messageProperties"),
    ]
    if not args.drop_key:
        columns.append(F.col("__key"))
    out = source.select(*columns)
    writer = (
        out.writeStream.format("pulsar")
        .option("service.url", args.service_url)
        .option("admin.url", args.admin_url)
        .option("topic", args.sink)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.transaction:
        writer = writer.option("exactlyOnceMode", "transaction")
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Spark Structured Streaming: clicks per user and minute, from ``clicks`` to ``clicks-per-minute``.

Reads the JSON clicks of ``produce_clicks.py`` with the ``pulsar`` data source, counts them
per user in one-minute event-time windows (``ts``, with a watermark), and writes one message
per (user, minute) to ``clicks-per-minute``: the key is the user, the value a JSON object
``{"user", "window_start", "window_end", "clicks"}``.

    python clicks_per_minute.py                   # runs until Ctrl-C (a trigger every 10 s)
    python clicks_per_minute.py --once --show     # what is there now, then print the output
    python clicks_per_minute.py --output-mode update

Output modes. The pulsar sink only appends messages, like a Kafka sink:

* ``append`` (default): a window is written once, when the watermark (latest event time seen
  minus ``--watermark``) has passed its end. Each (user, minute) gets exactly one message with
  its final count, but only after later clicks moved the watermark on, so the last minutes
  stay open until more clicks arrive.
* ``update``: every trigger writes the windows whose count changed. Results show up at once,
  but a (user, minute) can get several messages with growing counts; a reader keeps the last
  one per key and window (as with a compacted topic). Spark does not accept
  ``outputMode("update")`` with a Python data source sink, so this mode writes each
  micro-batch through ``foreachBatch`` and the batch writer.

The checkpoint directory keeps the query's progress: run it again and it resumes where it
stopped; the sink writes exactly once (it turns on broker deduplication for the namespace).
Delete the checkpoint to start over (then also use a new output topic, or counts repeat).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

DEFAULT_URL = "pulsar://localhost:6650"
CLICK_SCHEMA = "user STRING, page STRING, ts LONG"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Count clicks per user and minute with Spark.")
    parser.add_argument(
        "--url",
        default=os.environ.get("STARQUAKE_URL", DEFAULT_URL),
        help="service URL (default: $STARQUAKE_URL or %(default)s)",
    )
    parser.add_argument(
        "--admin-url",
        default=os.environ.get("STARQUAKE_ADMIN_URL"),
        help="admin (web) URL, for turning on deduplication (default: $STARQUAKE_ADMIN_URL, "
        "else http://<service host>:8080)",
    )
    parser.add_argument("--source", default="clicks", help="topic to read")
    parser.add_argument("--sink", default="clicks-per-minute", help="topic to write")
    parser.add_argument(
        "--checkpoint",
        default=str(Path(tempfile.gettempdir()) / "starquake-clicks-per-minute-checkpoint"),
        help="checkpoint directory (default: %(default)s)",
    )
    parser.add_argument("--output-mode", choices=["append", "update"], default="append")
    parser.add_argument("--watermark", default="1 minute", help="allowed lateness of clicks")
    parser.add_argument(
        "--starting-offsets",
        default="earliest",
        help="where a new query starts reading: earliest or latest",
    )
    parser.add_argument("--trigger", default="10 seconds", help="micro-batch interval")
    parser.add_argument(
        "--once",
        action="store_true",
        help="process what is in the topic now, then stop (trigger availableNow)",
    )
    parser.add_argument(
        "--show", action="store_true", help="with --once: print the sink topic's messages"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # Spark's Python workers must run this interpreter (the one with starquake installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .appName("clicks-per-minute")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    # the sink never guesses the admin URL; this example assumes a standalone broker's
    # default web port on the service host unless told otherwise
    admin_url = args.admin_url or f"http://{urlsplit(args.url).hostname or 'localhost'}:8080"
    connection = {"service.url": args.url, "admin.url": admin_url}

    clicks = (
        spark.readStream.format("pulsar")
        .options(**connection)
        .option("topic", args.source)
        .option("startingOffsets", args.starting_offsets)
        .load()
        .select(F.from_json(F.col("value").cast("string"), CLICK_SCHEMA).alias("click"))
        .select("click.user", "click.page", F.timestamp_millis("click.ts").alias("event_time"))
        .where(F.col("user").isNotNull() & F.col("event_time").isNotNull())
    )
    counts = (
        clicks.withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", "1 minute"), "user")
        .count()
    )
    out = counts.select(
        F.col("user").alias("__key"),
        F.to_json(
            F.struct(
                "user",
                F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                F.date_format("window.end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                F.col("count").alias("clicks"),
            )
        ).alias("value"),
    )
    if args.output_mode == "append":
        writer = (
            out.writeStream.format("pulsar")
            .options(**connection)
            .option("topic", args.sink)
            .outputMode("append")
        )
    else:
        # Spark refuses outputMode("update") for a Python data source sink, so each micro-batch
        # of updated counts is written with the batch writer. Its writeId names the producers:
        # made of the query id (kept in the checkpoint) and the batch id, it is the same when a
        # batch is replayed after a failure, and the broker drops what it stored before
        # (exactly once, as with the streaming sink).
        def write_batch(batch: DataFrame, batch_id: int) -> None:
            metadata = Path(args.checkpoint, "metadata").read_text()
            query_id = json.loads(metadata)["id"].replace("-", "")
            (
                batch.write.format("pulsar")
                .options(**connection)
                .option("topic", args.sink)
                .option("writeId", f"{query_id}-{batch_id}")
                .mode("append")
                .save()
            )

        writer = out.writeStream.foreachBatch(write_batch).outputMode("update")
    writer = writer.option("checkpointLocation", args.checkpoint).queryName("clicks-per-minute")
    if args.once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger)
    query = writer.start()
    print(f"query {query.id} running; checkpoint in {args.checkpoint}", flush=True)
    # Ctrl-C only sets a flag (PySpark's own handler would interrupt a call into the JVM);
    # the loop then stops the query, which finishes or abandons the current micro-batch.
    interrupted = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    while query.isActive and not interrupted.is_set():
        interrupted.wait(0.5)
    if interrupted.is_set():
        print("stopping the query", flush=True)
        query.stop()
    else:
        query.awaitTermination()  # raises if the query failed
    progress = query.recentProgress
    rows_in = sum(p.get("numInputRows", 0) for p in progress)
    rows_out = sum(p.get("sink", {}).get("numOutputRows", -1) for p in progress)
    print(f"{len(progress)} micro-batches: {rows_in} clicks read", end="")
    print(f", {rows_out} counts written" if rows_out > 0 else "")

    if args.once and args.show:
        written = (
            spark.read.format("pulsar")
            .options(**connection)
            .option("topic", args.sink)
            .load()
            .select(
                F.col("__key").alias("user"),
                F.get_json_object(F.col("value").cast("string"), "$.window_start").alias(
                    "window_start"
                ),
                F.get_json_object(F.col("value").cast("string"), "$.clicks")
                .cast("long")
                .alias("clicks"),
                "__publishTime",
            )
            .orderBy("window_start", "user", "__publishTime")
        )
        print(f"messages in {args.sink}:")
        written.show(200, truncate=False)
    spark.stop()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Throughput of the PySpark ``pulsar`` data source against a Starquake broker, on demand.

Starts its own broker (temp data dir, free ports on 127.0.0.1, topics auto-created with
``--partitions`` partitions), then:

1. produces a batched backlog of ``--messages`` keyed messages (``--size`` bytes each) with the
   official ``pulsar`` client (``batching_max_messages=1000``) onto one partitioned topic;
2. drains that backlog with one official-client consumer (Exclusive, Earliest, ack every
   message): the reference messages/s;
3. reads it with ``spark.read.format("pulsar")`` into the ``noop`` sink (only the action is
   timed; a small topic is read and written once first to warm Spark and its Python workers),
   and the same backlog on a topic of one partition; after each read, the same number of rows
   from ``spark_ceiling``'s Arrow source that does no work (what Spark itself takes from a
   Python source here, now: the ceiling of the reads);
4. reads the backlog as a stream (``Trigger.AvailableNow``, noop sink, fresh checkpoint),
   without a limit and with ``maxRecordsPerTrigger`` = ``--messages`` / ``--triggers``;
5. writes ``--messages`` rows from ``spark.range`` (repartitioned to ``--partitions``) to a fresh
   topic with ``df.write.format("pulsar")`` and counts what it reads back; after each write,
   the same rows to ``spark_ceiling``'s sink that drops them (the ceiling of the writes);
6. prints the medians of ``--runs`` runs beside the targets: batch read >= 1M rows/s from
   ``--partitions`` (4) partitions and >= 700k from one, streaming availableNow within 25 % of
   the batch read, maxRecordsPerTrigger within 15 % of the unlimited stream, write >= 400k
   rows/s; and each rate as a ratio of the official client's drain in the same run (the
   figure to compare across machines and loads).

    .venv/bin/python bench/spark_io.py                           # 1,000,000 messages, 3 runs
    .venv/bin/python bench/spark_io.py --messages 200000 --runs 1   # quick try
    .venv/bin/python bench/spark_io.py --json out.json           # also write the record

``broker CPU s`` is the broker process's user + system time over the timed phase (from
``/proc``), so a phase bound by the broker shows up there. Spark runs ``local[2]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))

import pulsar  # noqa: E402
import spark_ceiling  # noqa: E402
from bench_common import align_columns  # noqa: E402
from broker_process import BrokerProcess  # noqa: E402

READ_TARGET = 1_000_000
READ_ONE_TARGET = 700_000
STREAM_SHARE = 0.75  # of the batch read
LIMITED_SHARE = 0.85  # of the unlimited stream
WRITE_TARGET = 400_000  # exactly-once writes
WARMUP_MESSAGES = 20_000
_INDEX = struct.Struct(">I")


def broker_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0.0 where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Phase:
    """The runs of one measured phase."""

    name: str
    unit: str
    target: float | None = None
    rates: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    broker_cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """The median rate of the runs."""
        return statistics.median(self.rates)

    def add(self, rows: int, seconds: float, cpu: float) -> float:
        """Record one run; its rate."""
        rate = rows / seconds
        self.rates.append(rate)
        self.seconds.append(seconds)
        self.broker_cpu.append(cpu)
        return rate


@dataclass
class StreamTimes:
    """Where a streaming read's time went, from Spark's progress reports: the micro-batches
    with rows, seconds from ``start()`` to the first trigger (the query's start: Spark's
    Python runner process, the data source's imports, ``initialOffset``), and the summed
    trigger durations (``latestOffset`` and the reads are the data source's; the checkpoint
    writes ``walCommit``/``commitOffsets`` and the scheduling in ``addBatch`` are Spark's)."""

    batches: int
    to_first_trigger: float
    durations_ms: dict[str, int]

    @classmethod
    def of(cls, progress: list[dict[str, Any]], started: float) -> StreamTimes:
        sums: dict[str, int] = {}
        for report in progress:
            for name, ms in report["durationMs"].items():
                sums[name] = sums.get(name, 0) + int(ms)
        first = (
            datetime.datetime.fromisoformat(progress[0]["timestamp"].replace("Z", "+00:00"))
            if progress
            else None
        )
        return cls(
            sum(1 for p in progress if p["numInputRows"]),
            first.timestamp() - started if first is not None else 0.0,
            sums,
        )

    def describe(self) -> str:
        names = ("triggerExecution", "latestOffset", "addBatch", "walCommit", "commitOffsets")
        parts = ", ".join(f"{n} {self.durations_ms.get(n, 0) / 1000:.2f}" for n in names)
        return (
            f"{self.batches} batches; first trigger after {self.to_first_trigger:.2f} s; "
            f"seconds in triggers: {parts}"
        )


class Bench:
    """The broker, the official client and the Spark session of one benchmark."""

    def __init__(self, args: argparse.Namespace, broker: BrokerProcess) -> None:
        self.args = args
        self.broker = broker
        self.url = broker.url
        self.admin_url = f"http://127.0.0.1:{broker.web_port}"
        self.client = pulsar.Client(
            self.url,
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        self.spark: Any = None

    def timed(self, action: Callable[[], Any]) -> tuple[float, float, Any]:
        """(wall seconds, broker CPU seconds, result) of ``action()``."""
        pid = self.broker.proc.pid if self.broker.proc is not None else 0
        cpu0 = broker_cpu(pid)
        start = time.perf_counter()
        result = action()
        seconds = time.perf_counter() - start
        return seconds, broker_cpu(pid) - cpu0, result

    # --- official client --------------------------------------------------------------------

    def produce(self, topic: str, count: int) -> None:
        """``count`` keyed, batched messages of ``--size`` bytes (index first) onto ``topic``."""
        producer = self.client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_allowed_size_in_bytes=1024 * 1024,
            batching_max_publish_delay_ms=10,
            max_pending_messages=10000,
            max_pending_messages_across_partitions=20000,
            block_if_queue_full=True,
        )
        padding = b"v" * max(self.args.size - _INDEX.size, 0)
        done = threading.Event()
        failures: list[Any] = []
        remaining = [count]
        lock = threading.Lock()

        def sent(result: Any, _mid: Any) -> None:
            if result != pulsar.Result.Ok:
                failures.append(result)
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        for i in range(count):
            producer.send_async(_INDEX.pack(i) + padding, sent, partition_key=f"user-{i % 5000}")
        producer.flush()
        if not done.wait(120):
            raise RuntimeError(f"{remaining[0]} sends never completed")
        producer.close()
        if failures:
            raise RuntimeError(f"{len(failures)} sends failed, e.g. {failures[0]}")

    def consume(self, topic: str, count: int) -> int:
        """Receive and ack ``count`` messages of ``topic`` from the earliest; distinct count."""
        consumer = self.client.subscribe(
            topic,
            f"bench-{uuid.uuid4().hex[:8]}",
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=1000,
        )
        seen = bytearray(count)
        distinct = 0
        receive = consumer.receive
        ack = consumer.acknowledge
        unpack = _INDEX.unpack_from
        try:
            while distinct < count:
                try:
                    msg = receive(30_000)
                except pulsar.Timeout:
                    raise RuntimeError(f"consumer stalled at {distinct}/{count}") from None
                (index,) = unpack(msg.data())
                if not seen[index]:
                    seen[index] = 1
                    distinct += 1
                ack(msg)
        finally:
            consumer.unsubscribe()
            consumer.close()
        return distinct

    # --- Spark ------------------------------------------------------------------------------

    def start_spark(self) -> None:
        """Start a local Spark session for the data source."""
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        from pyspark.sql import SparkSession

        self.spark = (
            SparkSession.builder.master("local[2]")
            .appName("starquake-spark-io-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(self.args.partitions))
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.memory", self.args.driver_memory)
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")

    def options(self, topic: str) -> dict[str, str]:
        """The data source's options for ``topic``."""
        return {"service.url": self.url, "admin.url": self.admin_url, "topic": topic}

    def spark_read(self, topic: str) -> None:
        """Read ``topic`` with Spark into a no-op sink."""
        df = self.spark.read.format("pulsar").options(**self.options(topic)).load()
        df.write.format("noop").mode("overwrite").save()

    def spark_stream(self, topic: str, checkpoint: str, limit: int = 0) -> StreamTimes:
        """Read ``topic`` as a stream (availableNow) into a no-op sink; where the time went."""
        reader = self.spark.readStream.format("pulsar").options(**self.options(topic))
        reader = reader.option("startingOffsets", "earliest")
        query = spark_ceiling.available_now(reader, checkpoint, limit)
        started = time.time()
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"streaming read failed: {query.exception()}")
        return StreamTimes.of(query.recentProgress, started)

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions through the admin API."""
        import urllib.request

        path = topic.replace("://", "/")
        request = urllib.request.Request(
            f"{self.admin_url}/admin/v2/{path}/partitions",
            data=str(partitions).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30):
            pass

    def spark_count(self, topic: str) -> int:
        """The number of rows Spark reads from ``topic``."""
        df = self.spark.read.format("pulsar").options(**self.options(topic)).load()
        return int(df.count())

    def spark_write(self, topic: str, rows: int, to: str = "pulsar") -> None:
        """Write ``rows`` rows to ``topic`` with Spark (``to="ceiling"``: to the no-work sink
        of ``spark_ceiling``)."""
        df = (
            self.spark.range(rows)
            .selectExpr(
                "cast(id as string) as __key",
                f"cast(repeat('x', {self.args.size}) as binary) as value",
            )
            .repartition(self.args.partitions)
        )
        df.write.format(to).options(**self.options(topic)).mode("append").save()

    def close(self) -> None:
        """Stop Spark and close the client."""
        if self.spark is not None:
            self.spark.stop()
        self.client.close()


def new_topic(kind: str) -> str:
    """A fresh topic name for ``kind``."""
    return f"persistent://public/default/spark-io-{kind}-{uuid.uuid4().hex[:8]}"


def log(message: str) -> None:
    """A timestamped progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ceiling_run(bench: Bench, phase: Phase, parts: int, run_no: int) -> None:
    """One read of the no-work source (``spark_ceiling``), right after a pulsar read."""
    n = bench.args.messages
    spark = bench.spark
    seconds, cpu, _ = bench.timed(lambda: spark_ceiling.read(spark, parts, n, bench.args.size))
    rate = phase.add(n, seconds, cpu)
    log(f"ceiling ({parts} partitions) run {run_no}: {seconds:.2f} s, {rate:,.0f} rows/s")


def ceiling_stream(bench: Bench, phase: Phase, limit: int, run_no: int) -> None:
    """One availableNow stream of the no-work source, right after a pulsar stream."""
    n = bench.args.messages
    checkpoint = tempfile.mkdtemp(prefix="spark-io-ckpt-")
    try:
        started = time.time()
        seconds, cpu, query = bench.timed(
            lambda: spark_ceiling.stream(
                bench.spark, bench.args.partitions, n, bench.args.size, checkpoint, limit
            )
        )
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    rate = phase.add(n, seconds, cpu)
    times = StreamTimes.of(query.recentProgress, started)
    log(f"ceiling stream run {run_no}: {seconds:.2f} s, {rate:,.0f} rows/s, {times.describe()}")


def run(args: argparse.Namespace, bench: Bench) -> dict[str, Phase]:
    """Every phase ``--runs`` times; the phases with their figures."""
    n = args.messages
    phases = {
        "produce": Phase("official produce (batched)", "msgs/s"),
        "consume": Phase("official consume (1 consumer)", "msgs/s"),
        "read": Phase("spark batch read -> noop", "rows/s", READ_TARGET),
        "read1": Phase("spark batch read, 1 partition", "rows/s", READ_ONE_TARGET),
        "ceiling": Phase("ceiling: no-work Arrow source", "rows/s"),
        "ceiling1": Phase("ceiling, 1 partition", "rows/s"),
        "stream": Phase("spark stream availableNow", "rows/s"),
        "limited": Phase("spark stream maxRecordsPerTrigger", "rows/s"),
        "ceiling_stream": Phase("ceiling: no-work stream", "rows/s"),
        "ceiling_limited": Phase("ceiling: no-work stream, limited", "rows/s"),
        "write": Phase("spark batch write", "rows/s", WRITE_TARGET),
        "write_ceiling": Phase("ceiling: no-work Arrow sink", "rows/s"),
    }
    backlog = new_topic("backlog")
    seconds, cpu, _ = bench.timed(lambda: bench.produce(backlog, n))
    rate = phases["produce"].add(n, seconds, cpu)
    log(f"backlog of {n:,} messages on {backlog}: {seconds:.1f} s ({rate:,.0f} msgs/s)")

    for run_no in range(1, args.runs + 1):
        seconds, cpu, got = bench.timed(lambda: bench.consume(backlog, n))
        if got != n:
            raise RuntimeError(f"consumed {got} distinct messages, expected {n}")
        rate = phases["consume"].add(n, seconds, cpu)
        log(f"consume run {run_no}: {seconds:.2f} s, {rate:,.0f} msgs/s")

    log("starting Spark")
    bench.start_spark()
    warm = new_topic("warmup")
    bench.produce(warm, WARMUP_MESSAGES)
    bench.spark_read(warm)
    bench.spark_write(new_topic("warmup-write"), WARMUP_MESSAGES)
    spark_ceiling.register(bench.spark)
    spark_ceiling.read(bench.spark, args.partitions, WARMUP_MESSAGES, args.size)
    bench.spark_write("", WARMUP_MESSAGES, "ceiling")
    log("Spark warmed up")

    counted = bench.spark_count(backlog)
    if counted != n:
        raise RuntimeError(f"spark read {counted} rows of the backlog, expected {n}")
    for run_no in range(1, args.runs + 1):
        seconds, cpu, _ = bench.timed(lambda: bench.spark_read(backlog))
        rate = phases["read"].add(n, seconds, cpu)
        log(f"spark read run {run_no}: {seconds:.2f} s, {rate:,.0f} rows/s")
        ceiling_run(bench, phases["ceiling"], args.partitions, run_no)

    single = new_topic("single")
    bench.create_topic(single, 1)
    bench.produce(single, n)
    for run_no in range(1, args.runs + 1):
        seconds, cpu, _ = bench.timed(lambda: bench.spark_read(single))
        rate = phases["read1"].add(n, seconds, cpu)
        log(f"spark read (1 partition) run {run_no}: {seconds:.2f} s, {rate:,.0f} rows/s")
        ceiling_run(bench, phases["ceiling1"], 1, run_no)

    limit = max(n // args.triggers, 1)
    for key, cap in (("stream", 0), ("limited", limit)):
        for run_no in range(1, args.runs + 1):
            checkpoint = tempfile.mkdtemp(prefix="spark-io-ckpt-")
            try:
                seconds, cpu, times = bench.timed(
                    lambda cp=checkpoint, cap=cap: bench.spark_stream(backlog, cp, cap)
                )
            finally:
                shutil.rmtree(checkpoint, ignore_errors=True)
            rate = phases[key].add(n, seconds, cpu)
            log(
                f"spark {key} run {run_no}: {seconds:.2f} s, {rate:,.0f} rows/s, {times.describe()}"
            )
            ceiling_stream(bench, phases[f"ceiling_{key}"], cap, run_no)

    for run_no in range(1, args.runs + 1):
        topic = new_topic("write")
        seconds, cpu, _ = bench.timed(lambda topic=topic: bench.spark_write(topic, n))
        rate = phases["write"].add(n, seconds, cpu)
        counted = bench.spark_count(topic)
        log(f"spark write run {run_no}: {seconds:.2f} s, {rate:,.0f} rows/s; read back {counted:,}")
        if counted != n:
            raise RuntimeError(f"read back {counted} rows from {topic}, expected {n}")
        seconds, cpu, _ = bench.timed(lambda: bench.spark_write("", n, "ceiling"))
        rate = phases["write_ceiling"].add(n, seconds, cpu)
        log(f"ceiling write run {run_no}: {seconds:.2f} s, {rate:,.0f} rows/s")
    return phases


def fmt_rate(value: float) -> str:
    """A rate as the table prints it."""
    return f"{value / 1000:,.1f}k" if value >= 10_000 else f"{value:,.0f}"


def spread(values: list[float]) -> str:
    """± half the min-max spread in % of the median (empty for one run)."""
    if len(values) < 2:
        return ""
    mid = statistics.median(values)
    return f" ±{(max(values) - min(values)) / 2 / mid * 100:.0f}%" if mid else ""


def table(phases: dict[str, Phase]) -> str:
    """The phases as a text table."""
    lines: list[list[Any]] = [
        ["phase", "median", "runs", "s (median)", "broker CPU s", "target", "median/target"]
    ]
    for phase in phases.values():
        target = f">= {fmt_rate(phase.target)} {phase.unit}" if phase.target else ""
        ratio = ""
        if phase.target:
            ratio = f"{phase.median / phase.target:.2f}x"
            ratio += " met" if phase.median >= phase.target else " missed"
        lines.append(
            [
                phase.name,
                f"{fmt_rate(phase.median)} {phase.unit}{spread(phase.rates)}",
                len(phase.rates),
                f"{statistics.median(phase.seconds):.2f}",
                f"{statistics.median(phase.broker_cpu):.1f}",
                target,
                ratio,
            ]
        )
    read, consume, write = phases["read"], phases["consume"], phases["write"]
    stream, limited = phases["stream"], phases["limited"]

    def verdict(ratio: float, want: float) -> str:
        return f"{ratio:.2f}x (target >= {want:.2f}x: {'met' if ratio >= want else 'missed'})"

    notes = [
        f"spark read / official consume: {read.median / consume.median:.2f}x",
        f"spark read (1 partition) / official consume: "
        f"{phases['read1'].median / consume.median:.2f}x",
        f"spark read / no-work Arrow source: {read.median / phases['ceiling'].median:.2f}x "
        f"(1 partition: {phases['read1'].median / phases['ceiling1'].median:.2f}x)",
        f"stream availableNow / batch read: {verdict(stream.median / read.median, STREAM_SHARE)}",
        f"maxRecordsPerTrigger / unlimited stream: "
        f"{verdict(limited.median / stream.median, LIMITED_SHARE)}",
        f"the same for the no-work source (what Spark alone allows here): stream / batch "
        f"{phases['ceiling_stream'].median / phases['ceiling'].median:.2f}x, limited / unlimited "
        f"{phases['ceiling_limited'].median / phases['ceiling_stream'].median:.2f}x",
        f"spark stream / no-work stream: {stream.median / phases['ceiling_stream'].median:.2f}x "
        f"(limited: {limited.median / phases['ceiling_limited'].median:.2f}x)",
        f"spark write / official produce: {write.median / phases['produce'].median:.2f}x",
        f"spark write / no-work Arrow sink: {write.median / phases['write_ceiling'].median:.2f}x",
    ]
    return align_columns(lines) + "\n\n" + "\n".join(notes)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="backlog and write rows")
    parser.add_argument("--runs", type=int, default=3, help="runs of each measured phase")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of every topic")
    parser.add_argument(
        "--triggers", type=int, default=10, help="maxRecordsPerTrigger = messages / triggers"
    )
    parser.add_argument("--driver-memory", default="2g", help="spark.driver.memory")
    parser.add_argument("--keep", action="store_true", help="keep the broker's data dir and log")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if min(args.messages, args.runs, args.partitions, args.triggers) < 1 or args.size < 4:
        parser.error("--messages, --runs, --partitions and --triggers must be >= 1, --size >= 4")

    tmp = Path(tempfile.mkdtemp(prefix="spark-io-"))
    defines = ["allowAutoTopicCreationType=partitioned", f"defaultNumPartitions={args.partitions}"]
    broker = BrokerProcess(tmp / "data", *defines)
    broker.start()
    log(f"broker on {broker.url} (web {broker.web_port}), data in {tmp}")
    bench = Bench(args, broker)
    started = time.perf_counter()
    try:
        phases = run(args, bench)
    finally:
        bench.close()
        broker.cleanup()
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.perf_counter() - started
    print(
        f"\n{args.messages:,} messages of {args.size} bytes, {args.partitions} partitions, "
        f"Spark local[2], {args.runs} run(s), {elapsed:.0f} s in all, "
        f"load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n"
    )
    print(table(phases))
    if args.json:
        record = {
            "messages": args.messages,
            "size": args.size,
            "partitions": args.partitions,
            "runs": args.runs,
            "load_average": os.getloadavg(),
            "phases": {
                key: {
                    "unit": p.unit,
                    "median": p.median,
                    "rates": p.rates,
                    "seconds": p.seconds,
                    "broker_cpu_s": p.broker_cpu,
                    "target": p.target,
                }
                for key, p in phases.items()
            },
        }
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

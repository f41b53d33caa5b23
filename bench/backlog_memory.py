#!/usr/bin/env python3
"""A slow consumer behind a large backlog: does the broker's memory grow with the backlog?

Starts a Starquake broker (temp data dir, free ports), subscribes a consumer that acknowledges
``--consume-rate`` messages per second, then produces ``--gb`` gigabytes of unbatched messages
of ``--size`` bytes as fast as the broker takes them (official client, ``send_async`` with
``block_if_queue_full``). A thread samples the broker's resident memory every
``--sample-every`` seconds. Prints the curve (GB produced, RSS MB) and one JSON line: the RSS
at start, its maximum, the maximum's excess over the RSS at the first GB, the produce rate and
the backlog left at the end.

    .venv/bin/python bench/backlog_memory.py --gb 4
    .venv/bin/python bench/backlog_memory.py --gb 10 --size 200000 -D managedLedgerCacheSizeMB=64

The broker's data dir (the whole backlog) is deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pulsar
from bench_brokers import (
    Broker,
    default_starquake_cmd,
    log,
    machine_info,
    start_standalone,
)


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def start_broker(args: argparse.Namespace) -> Broker:
    """A Starquake broker on free loopback ports, once it is healthy."""
    defines = [x for d in args.define for x in ("-D", d)]
    extra = ["--log-level=WARNING", *defines]
    return start_standalone(default_starquake_cmd(), "bench-backlog-", extra, args.dir)


class Sampler(threading.Thread):
    """Samples the broker's RSS with the bytes produced so far."""

    def __init__(self, pid: int, every: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.produced = 0
        self.curve: list[tuple[float, float, float]] = []  # (seconds, GB produced, RSS MB)
        self.stopped = threading.Event()
        self.started_at = time.monotonic()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.curve.append(
                (time.monotonic() - self.started_at, self.produced / 1e9, rss_mb(self.pid))
            )
            self.stopped.wait(self.every)


def slow_consume(consumer: pulsar.Consumer, rate: float, stop: threading.Event) -> list[int]:
    """Receive and acknowledge ``rate`` messages a second until ``stop``; returns [count]."""
    count = [0]

    def run() -> None:
        next_at = time.monotonic()
        while not stop.is_set():
            try:
                msg = consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(msg)
            count[0] += 1
            next_at += 1 / rate
            delay = next_at - time.monotonic()
            if delay > 0:
                stop.wait(delay)

    threading.Thread(target=run, daemon=True).start()
    return count


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Produce the backlog beside the slow consumer; the RSS curve and figures."""
    broker = start_broker(args)
    sampler = Sampler(broker.proc.pid, args.sample_every)
    client = pulsar.Client(
        broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    topic = "persistent://public/default/backlog-memory"
    try:
        consumer = client.subscribe(topic, "slow", receiver_queue_size=100)
        producer = client.create_producer(
            topic,
            batching_enabled=False,
            block_if_queue_full=True,
            max_pending_messages=args.pending,
            send_timeout_millis=0,
        )
        stop = threading.Event()
        consumed = slow_consume(consumer, args.consume_rate, stop)
        start_rss = rss_mb(broker.proc.pid)
        sampler.start()
        payload = b"m" * args.size
        total = int(args.gb * 1e9)
        failed: list[pulsar.Result] = []

        def sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            if result != pulsar.Result.Ok:
                failed.append(result)

        started = time.monotonic()
        produced = 0
        next_log = 1e9
        while produced < total and not failed:
            producer.send_async(payload, sent)
            produced += args.size
            sampler.produced = produced
            if produced >= next_log:
                log(
                    f"{produced / 1e9:.0f} GB produced, broker RSS {rss_mb(broker.proc.pid):.0f} MB"
                )
                next_log += 1e9
        producer.flush()
        seconds = time.monotonic() - started
        time.sleep(2 * args.sample_every)
        stop.set()
        sampler.stopped.set()
        sampler.join()
        curve = sampler.curve
        after_first_gb = [rss for _, gb, rss in curve if gb >= min(1.0, args.gb / 2)]
        peak = max(rss for _, _, rss in curve)
        return {
            "gb": args.gb,
            "size": args.size,
            "messages": produced // args.size,
            "produce_mb_per_s": round(produced / seconds / 1e6, 1),
            "seconds": round(seconds, 1),
            "consumed": consumed[0],
            "errors": [str(r) for r in failed[:5]],
            "rss_start_mb": round(start_rss, 1),
            "rss_max_mb": round(peak, 1),
            "rss_end_mb": round(curve[-1][2], 1),
            "rss_at_half_or_1gb_mb": round(after_first_gb[0], 1) if after_first_gb else None,
            "growth_after_that_mb": round(peak - after_first_gb[0], 1) if after_first_gb else None,
            "broker_vmhwm_mb": broker.peak_rss_mb(),
            "curve": [(round(t, 1), round(gb, 2), round(rss, 1)) for t, gb, rss in curve],
            "defines": args.define,
            "machine": machine_info(),
        }
    finally:
        sampler.stopped.set()
        client.close()
        broker.stop()
        if not args.keep:
            shutil.rmtree(broker.workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run once, print the curve and the JSON record."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--gb", type=float, default=4.0, help="backlog to produce, in GB")
    p.add_argument("--size", type=int, default=100_000, help="bytes per message")
    p.add_argument("--consume-rate", type=float, default=50.0, help="messages/s the consumer acks")
    p.add_argument("--pending", type=int, default=200, help="producer's max pending messages")
    p.add_argument("--sample-every", type=float, default=1.0, help="seconds between RSS samples")
    p.add_argument("-D", dest="define", action="append", default=[], help="broker key=value")
    p.add_argument("--dir", help="where the broker's temp data dir goes (default: /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the broker's data dir")
    p.add_argument("--json", help="also write the record to this file")
    args = p.parse_args(argv)
    record = run(args)
    step = max(1, len(record["curve"]) // 40)
    for t, gb, rss in record["curve"][::step]:
        print(f"{t:8.1f} s  {gb:7.2f} GB  {rss:8.1f} MB", file=sys.stderr)
    summary = {k: v for k, v in record.items() if k not in ("curve", "machine")}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

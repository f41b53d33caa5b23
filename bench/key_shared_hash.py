#!/usr/bin/env python3
"""Broker CPU per Key_Shared dispatch with the mmh3 murmur3 against the pure-Python one.

Starts the broker twice per run (temp data dir, free ports): once as shipped, once with the
Key_Shared sticky-key hash switched to the pure-Python murmur3 fallback. Each time it fills a
topic with ``--messages`` unbatched messages, every one with its own key, then drains it with
two Key_Shared consumers and reads the broker's CPU time for the drain from /proc. Prints the
medians over ``--runs`` and the ratio.

    .venv/bin/python bench/key_shared_hash.py              # 3 runs of 20,000 messages
    .venv/bin/python bench/key_shared_hash.py --runs 1 --messages 2000   # quick smoke run
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_brokers import accepts, free_port, spawn, wait_ready

import starquake.client as pulsar

# Run inside the broker process before it starts: switch the sticky-key hash to the fallback.
_PURE_HASH = (
    "import starquake.broker.dispatch.key_shared as k, starquake.common.hashes as h;"
    "k.sticky_key_hash = lambda key: h.murmur3_32_pure(key) & 0x7FFFFFFF;"
)
_START = "import sys; from starquake.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _drain(consumer: pulsar.Consumer, counts: list[int], index: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            msg = consumer.receive(200)
        except pulsar.Timeout:
            continue
        consumer.acknowledge(msg)
        counts[index] += 1


def one_run(messages: int, pure: bool) -> float:
    """Broker CPU microseconds per message for draining the keyed backlog."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-keyshared-"))
    port, web_port = free_port(), free_port()
    code = (_PURE_HASH if pure else "") + _START
    args = ["standalone", "--data-dir", str(workdir / "data")]
    args += ["--broker-port", str(port), "--web-port", str(web_port)]
    name = "pure" if pure else "mmh3"
    broker = spawn(name, [sys.executable, "-c", code, *args], workdir, port)
    try:
        wait_ready(broker, lambda: accepts(port), timeout=60)
        client = pulsar.Client(f"pulsar://127.0.0.1:{port}")
        topic = "persistent://public/default/key-shared-hash"
        consumers = [
            client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
            for _ in range(2)
        ]
        # the subscription exists, so the backlog is kept; fill it with nobody connected
        for consumer in consumers:
            consumer.close()
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        for i in range(messages):
            producer.send_async(i.to_bytes(4, "big"), None, partition_key=f"key-{i}")
        producer.flush()
        counts = [0, 0]
        stop = threading.Event()
        cpu0 = broker.cpu_seconds()
        consumers = [
            client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
            for _ in range(2)
        ]
        threads = [
            threading.Thread(target=_drain, args=(consumer, counts, i, stop))
            for i, consumer in enumerate(consumers)
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 300
        while sum(counts) < messages and time.monotonic() < deadline:
            time.sleep(0.02)
        cpu = broker.cpu_seconds() - cpu0
        stop.set()
        for thread in threads:
            thread.join()
        if sum(counts) < messages:
            raise TimeoutError(f"drained {counts} of {messages}")
        client.close()
        return cpu / messages * 1e6
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"mmh3": [], "pure": []}
    for run in range(args.runs):
        # alternate which goes first so that drift on a shared machine hits both
        order = ("mmh3", "pure") if run % 2 == 0 else ("pure", "mmh3")
        for name in order:
            figures[name].append(one_run(args.messages, pure=name == "pure"))
            print(f"run {run + 1} {name}: {figures[name][-1]:.1f} us broker CPU per message")
    fast, slow = statistics.median(figures["mmh3"]), statistics.median(figures["pure"])
    print(f"median broker CPU per Key_Shared message: mmh3 {fast:.1f} us, pure {slow:.1f} us")
    print(f"mmh3 / pure: {fast / slow:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

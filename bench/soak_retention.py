"""Soak: a producer writing steadily and a consumer acking, retention 0, for a few minutes.

Starts a broker process (``starquake standalone``) on a fresh data directory, sends
``--rate`` unbatched messages of ``--size`` bytes per second with the official client while a
Shared consumer acknowledges them, and samples every ``--sample`` seconds the bytes on disk
under the data directory and the broker's resident memory. Prints the samples, then:

- the disk bound the configuration implies: ledgers are deleted once consumed, at the next trim
  after the acknowledgments are stored, so at most
  ``2 + ceil(rate * (trim interval + cursor flush + 1 s) / entries per ledger)`` ledgers are on
  disk (the current one, the one just sealed, and those waiting for the trim), plus the metadata
  database;
- the largest size seen against that bound, and the memory of the first and last thirds.

Usage: ``.venv/bin/python bench/soak_retention.py --seconds 180 --rate 2000``
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess
from disk_usage import disk_bytes


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    """Run the soak and report disk and memory use; 1 if the disk use passed its bound."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--rate", type=int, default=2000, help="messages per second")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes")
    parser.add_argument("--entries-per-ledger", type=int, default=5000)
    parser.add_argument("--trim-interval", type=float, default=2.0)
    parser.add_argument("--sample", type=float, default=5.0)
    args = parser.parse_args()

    flush = 1.0
    with tempfile.TemporaryDirectory(prefix="sq-soak-") as tmp:
        data = Path(tmp) / "data"
        broker = BrokerProcess(
            data,
            f"managedLedgerMaxEntriesPerLedger={args.entries_per_ledger}",
            "managedLedgerMinLedgerRolloverTimeMinutes=0",
            f"managedLedgerTrimIntervalSeconds={args.trim_interval}",
            f"managedLedgerCursorPositionFlushSeconds={flush}",
        )
        broker.start()
        assert broker.proc is not None
        client = pulsar.Client(
            broker.url,
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
        )
        topic = "persistent://public/default/soak"
        consumer = client.subscribe(
            topic,
            "soak",
            consumer_type=pulsar.ConsumerType.Shared,
            receiver_queue_size=1000,
        )
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=2000
        )
        stop = threading.Event()
        received = [0]

        def consume() -> None:
            while not stop.is_set():
                try:
                    msg = consumer.receive(timeout_millis=500)
                except pulsar.Timeout:
                    continue
                consumer.acknowledge(msg)
                received[0] += 1

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        payload = b"s" * args.size
        sent = 0
        start = time.monotonic()
        next_sample = start
        samples: list[tuple[float, int, int, int, int]] = []
        print(f"{'t (s)':>7} {'sent':>9} {'acked':>9} {'disk MB':>9} {'rss MB':>8}")
        while True:
            now = time.monotonic()
            elapsed = now - start
            if elapsed >= args.seconds:
                break
            due = int(elapsed * args.rate)
            while sent < due:
                producer.send_async(payload, None)
                sent += 1
            if now >= next_sample:
                size = disk_bytes(data)
                rss = rss_bytes(broker.proc.pid)
                samples.append((elapsed, sent, received[0], size, rss))
                print(
                    f"{elapsed:7.1f} {sent:9d} {received[0]:9d} {size / 2**20:9.1f} "
                    f"{rss / 2**20:8.1f}",
                    flush=True,
                )
                next_sample += args.sample
            time.sleep(0.005)
        producer.flush()
        stop.set()
        reader.join()
        client.close()
        broker.stop()

    entry = args.size + 200  # payload plus metadata and framing, roughly
    waiting = math.ceil(args.rate * (args.trim_interval + flush + 1.0) / args.entries_per_ledger)
    ledgers = 2 + waiting
    bound = ledgers * args.entries_per_ledger * entry + 8 * 2**20
    largest = max(s[3] for s in samples)
    third = max(1, len(samples) // 3)
    rss_first = statistics.median(s[4] for s in samples[:third])
    rss_middle = statistics.median(s[4] for s in samples[third:-third] or samples)
    rss_last = statistics.median(s[4] for s in samples[-third:])
    print()
    print(f"sent {sent} messages in {args.seconds:.0f} s ({sent / args.seconds:.0f}/s)")
    print(
        f"disk bound: {ledgers} ledgers x {args.entries_per_ledger} entries x ~{entry} B "
        f"+ 8 MB metadata = {bound / 2**20:.1f} MB; largest seen {largest / 2**20:.1f} MB "
        f"({'within' if largest <= bound else 'OVER'} the bound); "
        f"written in total {sent * entry / 2**20:.0f} MB"
    )
    # the first third includes the warm-up of the broker's bounded caches (entry metadata of
    # the last 200,000 entries): compare the middle and last thirds for growth
    print(
        f"broker RSS (medians): first third {rss_first / 2**20:.1f} MB, middle third "
        f"{rss_middle / 2**20:.1f} MB, last third {rss_last / 2**20:.1f} MB "
        f"(last vs middle {(rss_last - rss_middle) / 2**20:+.1f} MB)"
    )
    return 0 if largest <= bound else 1


if __name__ == "__main__":
    sys.exit(main())

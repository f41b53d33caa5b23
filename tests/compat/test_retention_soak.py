"""A short soak: a producer writing steadily and a consumer acking with retention 0 keep the
data directory within the bound the ledger settings imply (the current ledger, the one just
sealed and those waiting for the next trim). ``bench/soak_retention.py`` runs the long version
and reports memory."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pulsar
from disk_usage import disk_bytes
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker

RATE = 1000  # messages per second
SECONDS = 12.0
SIZE = 1024
ENTRIES_PER_LEDGER = 500
TRIM = 0.3
FLUSH = 0.2


def test_disk_stays_bounded_while_producing_and_acking(tmp_path: Path, topic: str) -> None:
    data = tmp_path / "data"
    with EmbeddedBroker(
        data,
        managedLedgerMaxEntriesPerLedger=ENTRIES_PER_LEDGER,
        managedLedgerMinLedgerRolloverTimeMinutes=0,
        managedLedgerTrimIntervalSeconds=TRIM,
        managedLedgerCursorPositionFlushSeconds=FLUSH,
    ) as broker:
        client = official_client(broker)
        consumer = client.subscribe(topic, "soak", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        stop = threading.Event()
        acked = [0]

        def consume() -> None:
            while not stop.is_set():
                try:
                    msg = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                consumer.acknowledge(msg)
                acked[0] += 1

        worker = threading.Thread(target=consume, daemon=True)
        worker.start()
        payload = b"s" * SIZE
        sent = 0
        sizes = []
        start = time.monotonic()
        try:
            while (elapsed := time.monotonic() - start) < SECONDS:
                while sent < int(elapsed * RATE):
                    producer.send_async(payload, None)
                    sent += 1
                sizes.append(disk_bytes(data))
                time.sleep(0.05)
            producer.flush()
        finally:
            stop.set()
            worker.join()
            client.close()
    entry = SIZE + 200
    # the consumer may lag by up to a second behind the producer on a busy machine
    ledgers = 2 + math.ceil(RATE * (TRIM + FLUSH + 1.0) / ENTRIES_PER_LEDGER)
    bound = ledgers * ENTRIES_PER_LEDGER * entry + 2 * 1024 * 1024  # + the metadata store
    written = sent * entry
    assert acked[0] > sent // 2  # the consumer kept up, so trimming had work to do
    assert written > 2 * bound  # without trimming the bound would not hold
    assert max(sizes) <= bound, (max(sizes), bound)

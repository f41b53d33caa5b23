#!/usr/bin/env python3
"""Time per entry of the broker's Key_Shared dispatch with the mmh3 murmur3 and the pure one.

In-process: an embedded broker holds a topic of ``--entries`` unbatched messages, each with its
own partition key (produced once, untimed, with our client). Each run then, on the broker's
event loop thread and with nothing else running there:

1. opens a fresh non-durable Key_Shared subscription at the earliest entry (default selector:
   consistent hashing) and attaches ``--consumers`` real broker ``Consumer`` objects whose
   connection is a sink (frames are built, then dropped), each with permits for every entry;
2. in ``parse`` mode, empties the topic's entry-info cache, so that every entry's sticky key is
   read from the stored entry's MessageMetadata (as after a broker restart); in ``cached`` mode
   the infos recorded at publish time are used (as for a backlog published since the start);
3. awaits ``dispatcher.dispatch()`` (its reads never suspend) until every entry has gone out,
   and reads the wall time and that thread's CPU time.

So a timed entry covers: the cursor reading it from the managed ledger, its EntryInfo (cached,
or parsed from the metadata), the dispatcher's per-key hash memo and the sticky-key hash (every
key is new, so every entry is hashed once), the selector lookup, the permit / unacked-limit
checks, the draining-hash bookkeeping, and building its MESSAGE frame header. Not covered:
socket writes, the client, acknowledgments.

The hash is switched as the module would be without mmh3: the selectors' ``murmur3_32_masked``
is replaced by the pure-Python form. Runs alternate (mmh3, pure, pure, mmh3, ...), every run a
fresh subscription; the table gives the medians and the pure / mmh3 ratio, plus the hash alone
over the same keys.

    .venv/bin/python bench/key_shared_dispatch.py                       # 100k entries, 7 runs
    .venv/bin/python bench/key_shared_dispatch.py --entries 5000 --runs 1   # smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench_brokers import log
from bench_common import add_json_option, align_columns, print_report

import starquake.broker.selectors.base as selector_base
import starquake.client as pulsar
from starquake.broker.consumer import Consumer
from starquake.broker.dispatch.key_shared import KeySharedDispatcher
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.topic import PersistentTopic
from starquake.common import hashes
from starquake.protocol.enums import SubType

TOPIC = "persistent://public/default/key-shared-dispatch"
HASHES: dict[str, Callable[[bytes], int]] = {
    "mmh3": hashes.murmur3_32_masked,
    "pure": hashes._murmur3_32_masked_pure,  # what the module uses without mmh3
}
MODES = ("cached", "parse")


class SinkConnection:
    """A consumer's connection that drops what is written (the frames are still built)."""

    client_version = "bench"
    remote_address = "127.0.0.1:0"

    def __init__(self) -> None:
        self.frames = 0

    def write_frames(self, frames: list[bytes | memoryview]) -> None:
        """Count and drop ``frames``."""
        self.frames += len(frames)

    def write(self, frame: bytes) -> None:
        """Count and drop ``frame``."""
        self.frames += 1

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Nothing to close."""

    def pending_write_bytes(self) -> int:
        """Never anything pending."""
        return 0


def key_of(index: int) -> str:
    """The partition key of the entry numbered ``index``."""
    return f"key-{index}"


def fill_topic(broker: EmbeddedBroker, entries: int) -> None:
    """Publish ``entries`` unbatched messages, each with its own key, and wait for them all."""
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(
            TOPIC, batching_enabled=False, block_if_queue_full=True, max_pending_messages=5000
        )
        payload = bytes(100)
        for i in range(entries):
            producer.send_async(payload, None, partition_key=key_of(i))
        producer.flush()
    finally:
        client.close()


async def dispatch_once(
    broker: EmbeddedBroker, run: int, entries: int, consumers: int, mode: str
) -> tuple[float, float, list[int]]:
    """One timed dispatch of the whole topic: (wall s, broker-thread CPU s, entries per
    consumer). Runs on the broker's loop; nothing awaits between the start and the end."""
    topic = broker.service.topics[TOPIC]
    assert isinstance(topic, PersistentTopic)
    name = f"bench-{run}"
    subscription = topic.get_or_create_subscription(
        name, durable=False, initial_earliest=True, start=None, start_inclusive=True
    )
    try:
        members = []
        for i in range(consumers):
            consumer = Consumer(
                subscription, SinkConnection(), 1000 + i, f"c{i}", SubType.Key_Shared, 0, -1
            )
            subscription.add_consumer(consumer)
            members.append(consumer)
        dispatcher = subscription.dispatcher
        assert isinstance(dispatcher, KeySharedDispatcher)
        if mode == "parse":
            topic.entry_infos.clear()
        for consumer in members:
            consumer.permits = entries
        gc.collect()
        cpu0 = time.thread_time()
        start = time.perf_counter()
        sent = 0
        while sent < entries:
            await dispatcher.dispatch()
            now = sum(c.msg_out_counter for c in members)
            if now == sent:
                raise RuntimeError(f"dispatch stalled at {sent}/{entries} entries")
            sent = now
        seconds = time.perf_counter() - start
        cpu = time.thread_time() - cpu0
        if sent != entries:
            raise RuntimeError(f"dispatched {sent} entries, expected {entries}")
        return seconds, cpu, [c.msg_out_counter for c in members]
    finally:
        topic.remove_subscription(name)


def hash_only(keys: list[bytes], function: Callable[[bytes], int]) -> float:
    """Seconds to hash every key once."""
    start = time.perf_counter()
    for key in keys:
        function(key)
    return time.perf_counter() - start


@contextlib.contextmanager
def sticky_hash(name: str) -> Iterator[None]:
    """Make the selectors' sticky-key hash the ``name`` murmur3 (of :data:`HASHES`) meanwhile."""
    shipped = getattr(selector_base, "murmur3_32_masked")  # noqa: B009
    setattr(selector_base, "murmur3_32_masked", HASHES[name])  # noqa: B010
    try:
        yield
    finally:
        setattr(selector_base, "murmur3_32_masked", shipped)  # noqa: B010


Figures = dict[tuple[str, str], list[float]]


def measure_dispatch(
    args: argparse.Namespace, modes: list[str]
) -> tuple[Figures, Figures, list[int]]:
    """Interleaved timed dispatches: µs per entry (wall, broker-thread CPU) by (mode, hash),
    and the entries each consumer got in the last run."""
    wall: Figures = {}
    cpu: Figures = {}
    spread: list[int] = []
    with tempfile.TemporaryDirectory(prefix="bench-ks-dispatch-") as workdir:
        # the topic has no subscription between runs: keep it loaded
        data = Path(workdir) / "data"
        with EmbeddedBroker(data, brokerDeleteInactiveTopicsEnabled=False) as broker:
            log(f"publishing {args.entries:,} keyed entries")
            fill_topic(broker, args.entries)
            log("dispatching")
            counter = 0
            for run in range(args.runs):
                # alternate which goes first so that drift on a shared machine hits both
                order = ("mmh3", "pure") if run % 2 == 0 else ("pure", "mmh3")
                for mode, name in itertools.product(modes, order):
                    counter += 1
                    with sticky_hash(name):
                        seconds, thread_cpu, spread = broker.call(
                            dispatch_once(broker, counter, args.entries, args.consumers, mode),
                            timeout=600,
                        )
                    wall.setdefault((mode, name), []).append(seconds / args.entries * 1e6)
                    cpu.setdefault((mode, name), []).append(thread_cpu / args.entries * 1e6)
                    log(
                        f"run {run + 1} {mode:6} {name}: {wall[mode, name][-1]:.2f} us/entry "
                        f"wall, {cpu[mode, name][-1]:.2f} us CPU"
                    )
    return wall, cpu, spread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--consumers", type=int, default=5)
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each hash and mode")
    parser.add_argument("--mode", choices=MODES, action="append", help="default: both")
    add_json_option(parser)
    args = parser.parse_args()
    modes: list[str] = args.mode or list(MODES)
    if hashes.murmur3_32_masked is not hashes._murmur3_32_masked_mmh3:
        print("mmh3 is not installed: nothing to compare", file=sys.stderr)
        return 1
    keys = [key_of(i).encode() for i in range(args.entries)]
    # hash alone, over the same keys (interleaved as well)
    hash_us: dict[str, list[float]] = {name: [] for name in HASHES}
    for run in range(args.runs):
        for name in HASHES if run % 2 == 0 else reversed(HASHES):
            hash_us[name].append(hash_only(keys, HASHES[name]) / args.entries * 1e6)
    wall, cpu, spread = measure_dispatch(args, modes)
    lines: list[list[Any]] = [
        ["what", "mmh3 us/entry", "pure us/entry", "pure - mmh3", "pure / mmh3"]
    ]
    record: dict[str, Any] = {
        "entries": args.entries,
        "consumers": args.consumers,
        "runs": args.runs,
        "entries_per_consumer_last_run": spread,
    }

    def row(label: str, fast: list[float], slow: list[float]) -> None:
        m_fast, m_slow = statistics.median(fast), statistics.median(slow)
        lines.append(
            [
                label,
                f"{m_fast:.2f}",
                f"{m_slow:.2f}",
                f"{m_slow - m_fast:+.2f}",
                f"{m_slow / m_fast:.2f}x",
            ]
        )
        record[label] = {"mmh3": fast, "pure": slow, "median_mmh3": m_fast, "median_pure": m_slow}

    row("hash only", hash_us["mmh3"], hash_us["pure"])
    for mode in modes:
        row(f"dispatch {mode} wall", wall[mode, "mmh3"], wall[mode, "pure"])
        row(f"dispatch {mode} cpu", cpu[mode, "mmh3"], cpu[mode, "pure"])
    footer = (
        f"{args.entries:,} entries with distinct keys over {args.consumers} consumers, "
        f"medians of {args.runs} interleaved runs; cpu = the broker loop thread's CPU time"
    )
    print_report(align_columns(lines), footer, record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

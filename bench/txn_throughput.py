"""What do transactions cost a producer?

Starts ``starquake standalone`` (transactions on, file storage with fsync: durable) on free
loopback ports, then, with our asyncio client (the official Python client has no
transactions), for each transaction size K (``--sizes``, default 1, 10 and 100 messages):

- ``txn``: ``--workers`` concurrent workers, each with its own producer on its own topic, loop:
  open a transaction, send K messages in it (all in flight at once), commit it; the time of
  every ``commit()`` is recorded;
- ``plain``: the same workers send the same messages in groups of K (all in flight at once),
  without a transaction.

Both send ``--messages`` messages of ``--size`` bytes in all per run (batching off by default:
``--batching`` turns it on, for both). Within a run the two modes run one after the other (in
turn first); each figure is the median of ``--runs`` runs (± half the min-max spread). The
table gives msgs/s of both and their ratio (the median of each run's txn/plain: a load that
comes and goes on the machine touches both alike), transactions/s, the median and p99 of
``commit()`` (the latency a transaction adds to its messages once sent), and the broker's CPU
per message.

    .venv/bin/python bench/txn_throughput.py [--runs 3] [--messages 10000] [--workers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from typing import Any

from bench_brokers import (
    Broker,
    default_starquake_cmd,
    log,
    machine_info,
    start_standalone,
    stop_broker,
)
from bench_common import (
    add_json_option,
    align_columns,
    format_cell,
    percentile,
    print_report,
    run_stats,
)

from starquake.client import asyncio as aio

Record = dict[str, Any]
MODES = ("plain", "txn")


def start_broker(args: argparse.Namespace) -> Broker:
    """A broker with transactions on, in a temporary directory."""
    extra = ["--bind-address", "127.0.0.1", "--log-level", "WARNING"]
    extra += ["-D", "transactionCoordinatorEnabled=true"]
    for define in args.define:
        extra += ["-D", define]
    return start_standalone(args.starquake_cmd, "bench-txn-", extra)


class Workers:
    """One client and ``--workers`` producers, each on its own topic."""

    def __init__(self, client: aio.Client, producers: list[Any]) -> None:
        self.client = client
        self.producers = producers

    @classmethod
    async def open(cls, args: argparse.Namespace, service_url: str) -> Workers:
        client = aio.Client(service_url, enable_transaction=True, operation_timeout_seconds=30)
        run = uuid.uuid4().hex[:8]
        producers = [
            await client.create_producer(
                f"persistent://public/default/txn-bench-{run}-{i}",
                batching_enabled=args.batching,
                max_pending_messages=max(1000, max(args.sizes) * 2),
                block_if_queue_full=True,
            )
            for i in range(args.workers)
        ]
        return cls(client, producers)

    async def run(
        self, mode: str, size: int, groups: int, payload: bytes
    ) -> tuple[float, list[float]]:
        """Every worker sends ``groups`` groups of ``size`` messages (in a transaction each in
        ``txn`` mode); (seconds, commit latencies in ms)."""
        commits: list[float] = []

        async def worker(producer: Any) -> None:
            clock = time.perf_counter
            for _ in range(groups):
                if mode == "plain":
                    await asyncio.gather(*(producer.send(payload) for _ in range(size)))
                    continue
                txn = await self.client.new_transaction(timeout_ms=60_000)
                await asyncio.gather(*(producer.send(payload, txn=txn) for _ in range(size)))
                t0 = clock()
                await txn.commit()
                commits.append((clock() - t0) * 1e3)

        start = time.perf_counter()
        await asyncio.gather(*(worker(p) for p in self.producers))
        return time.perf_counter() - start, commits

    async def close(self) -> None:
        await self.client.close()


async def one_run(
    workers: Workers, broker: Broker | None, mode: str, size: int, args: argparse.Namespace
) -> Record:
    """One timed run of ``mode`` with groups of ``size``."""
    groups = max(1, args.messages // (size * args.workers))
    count = groups * size * args.workers
    payload = b"x" * args.size
    cpu0 = broker.cpu_seconds() if broker else 0.0
    try:
        seconds, commits = await workers.run(mode, size, groups, payload)
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    record: Record = {"ok": True, "messages": count, "msgs_per_s": count / seconds}
    if broker is not None:
        record["broker_us_per_msg"] = (broker.cpu_seconds() - cpu0) / count * 1e6
    if commits:
        commits.sort()
        record["commit_p50_ms"] = statistics.median(commits)
        record["commit_p99_ms"] = percentile(commits, 99)
        record["txns_per_s"] = len(commits) / seconds
    return record


async def run_all(args: argparse.Namespace, service_url: str, broker: Broker | None) -> Record:
    """Every size and mode ``--runs`` times, the modes alternating; the runs by size and mode."""
    workers = await Workers.open(args, service_url)
    results: Record = {str(size): {mode: [] for mode in MODES} for size in args.sizes}
    try:
        for size in args.sizes:  # warm-up: connections, topics, coordinator, caches
            for mode in MODES:
                await workers.run(mode, size, 2, b"w" * args.size)
        for run in range(args.runs):
            for size in args.sizes:
                order = MODES if run % 2 == 0 else MODES[::-1]
                for mode in order:
                    rec = await one_run(workers, broker, mode, size, args)
                    results[str(size)][mode].append(rec)
                    log(f"run {run + 1} size {size} {mode}: {_brief(rec)}")
    finally:
        await workers.close()
    return results


def _brief(rec: Record) -> str:
    if not rec.get("ok"):
        return f"FAILED {rec.get('error')}"
    text = f"{rec['msgs_per_s']:,.0f} msg/s"
    if "commit_p50_ms" in rec:
        text += f", commit p50 {rec['commit_p50_ms']:.2f} ms p99 {rec['commit_p99_ms']:.2f} ms"
    return text


def summarize(results: Record) -> list[Record]:
    """One row per transaction size: each figure's run_stats, and the throughput ratio."""
    rows = []
    for size, by_mode in results.items():
        plain, txn = by_mode["plain"], by_mode["txn"]
        row: Record = {
            "size": int(size),
            "plain": run_stats(plain, "msgs_per_s"),
            "txn": run_stats(txn, "msgs_per_s"),
            "txns_per_s": run_stats(txn, "txns_per_s"),
            "commit_p50": run_stats(txn, "commit_p50_ms"),
            "commit_p99": run_stats(txn, "commit_p99_ms"),
            "cpu_plain": run_stats(plain, "broker_us_per_msg"),
            "cpu_txn": run_stats(txn, "broker_us_per_msg"),
        }
        row["ratio"] = _paired_ratio(plain, txn, "msgs_per_s")
        row["cpu_ratio"] = _paired_ratio(plain, txn, "broker_us_per_msg")
        rows.append(row)
    return rows


def _paired_ratio(plain: list[Record], txn: list[Record], key: str) -> float | None:
    """The median over the runs of txn / plain of the same run (the two ran one after the
    other: a load that comes and goes on the machine touches both alike)."""
    ratios = [
        t[key] / p[key]
        for p, t in zip(plain, txn, strict=True)
        if p.get("ok") and t.get("ok") and p.get(key) and t.get(key)
    ]
    return statistics.median(ratios) if ratios else None


def render_table(rows: list[Record]) -> str:
    lines: list[list[Any]] = [
        [
            "msgs/txn",
            "plain msg/s",
            "txn msg/s",
            "txn/plain",
            "txn/s",
            "commit p50 ms",
            "commit p99 ms",
            "broker µs/msg plain",
            "txn",
            "txn/plain",
        ]
    ]
    for row in rows:
        lines.append(
            [
                row["size"],
                format_cell(row["plain"]),
                format_cell(row["txn"]),
                f"{row['ratio']:.2f}x" if row["ratio"] else "-",
                format_cell(row["txns_per_s"]),
                format_cell(row["commit_p50"]),
                format_cell(row["commit_p99"]),
                format_cell(row["cpu_plain"]),
                format_cell(row["cpu_txn"]),
                f"{row['cpu_ratio']:.2f}x" if row["cpu_ratio"] else "-",
            ]
        )
    return align_columns(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="runs per size and mode")
    p.add_argument(
        "--sizes", type=int, nargs="+", default=[1, 10, 100], help="messages per transaction"
    )
    p.add_argument("--messages", type=int, default=10_000, help="messages per run (all workers)")
    p.add_argument("--workers", type=int, default=4, help="producers / concurrent transactions")
    p.add_argument("--size", type=int, default=100, help="payload bytes")
    p.add_argument("--batching", action="store_true", help="producer batching on (both modes)")
    p.add_argument("--service-url", help="use this broker (transactions on) instead of one")
    p.add_argument("--starquake-cmd", default=default_starquake_cmd())
    p.add_argument("-D", dest="define", action="append", default=[], help="broker key=value")
    p.add_argument("--keep", action="store_true", help="keep the broker's temp dir")
    add_json_option(p)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    info = machine_info()
    began = time.monotonic()
    broker = None
    try:
        if args.service_url:
            service_url = args.service_url
        else:
            broker = start_broker(args)
            service_url = broker.service_url
        results = asyncio.run(run_all(args, service_url, broker))
    finally:
        if broker is not None:
            stop_broker(broker, args.keep)
    rows = summarize(results)
    record: Record = {
        "machine": info,
        "elapsed_s": round(time.monotonic() - began, 1),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "summary": rows,
        "runs": results,
    }
    footer = (
        f"runs={args.runs} messages/run={args.messages} workers={args.workers} "
        f"payload={args.size} B batching={'on' if args.batching else 'off'} "
        f"elapsed={record['elapsed_s']}s load={info['loadavg'][0]:.1f} {info['date']}; "
        "medians, ±half the min-max spread"
    )
    print_report(render_table(rows), footer, record, args.json)
    failed = sum(row[k]["failed"] for row in rows for k in ("plain", "txn"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

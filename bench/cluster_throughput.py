"""Cluster mode's throughput: 1, 2 and 3 brokers over one JetStream node (1 copy of each
entry) and over three (3 copies), beside one embedded-storage broker, with the official client.

Each configuration is started fresh (JetStream nodes and broker processes on free ports), a
partitioned topic of ``--partitions`` partitions is made (so its partitions spread over the
brokers), a Shared subscription is created, ``--messages`` messages of ``--size`` bytes are
produced (batched, asynchronously, through the multi-host service URL) and then consumed and
acknowledged. It prints, per configuration, the medians of ``--runs`` runs: produced and
consumed messages per second, the ratio to the embedded broker, and where the CPU went, in µs
of CPU per message, for the brokers, the JetStream nodes and this process (the client), from
``/proc``; and what the machine's cores would carry at that cost.

    .venv/bin/python bench/cluster_throughput.py [--messages 100000] [--runs 3]
        [--partitions 6] [--size 100] [--batch 1000] [--configs embedded,r1x1,...,r3x3]

``--batch 1`` sends every message as its own entry (no batching): the brokers' and nodes' cost
per entry shows; with batches the client's own cost per message dominates.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]

import pulsar  # noqa: E402
from admin_http import admin_json  # noqa: E402
from bench_common import align_columns  # noqa: E402
from broker_process import BrokerProcess, multi_host_url  # noqa: E402

from starquake.cluster.nodes import JetStreamNode, jetstream_nodes  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU of process ``pid`` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclass(frozen=True)
class Config:
    name: str
    nodes: int  # 0: embedded storage
    brokers: int

    @property
    def label(self) -> str:
        if not self.nodes:
            return "embedded, 1 broker"
        copies = 3 if self.nodes >= 3 else 1
        return f"R{copies} ({self.nodes} node{'s' * (self.nodes > 1)}), {self.brokers} broker(s)"


CONFIGS = {
    "embedded": Config("embedded", 0, 1),
    **{f"r1x{b}": Config(f"r1x{b}", 1, b) for b in (1, 2, 3)},
    **{f"r3x{b}": Config(f"r3x{b}", 3, b) for b in (1, 2, 3)},
}


@contextlib.contextmanager
def running(
    config: Config, base: Path
) -> Iterator[tuple[list[BrokerProcess], list[JetStreamNode]]]:
    nodes = jetstream_nodes(config.nodes, base / "jetstream") if config.nodes else []
    settings: list[str] = []
    if nodes:
        copies = 3 if config.nodes >= 3 else 1
        store = "nats://" + ",".join(f"127.0.0.1:{n.client_port}" for n in nodes)
        settings = [
            f"metadataStoreUrl={store}",
            f"clusterName=b{uuid.uuid4().hex[:6]}",
            f"managedLedgerDefaultEnsembleSize={copies}",
            f"managedLedgerDefaultWriteQuorum={copies}",
            f"managedLedgerDefaultAckQuorum={copies // 2 + 1}",
        ]
    brokers = [BrokerProcess(base / f"broker-{i}", *settings) for i in range(config.brokers)]
    try:
        for node in nodes:
            node.start()
        for broker in brokers:
            broker.start(timeout=60)
        yield brokers, nodes
    finally:
        for broker in brokers:
            broker.cleanup()
        for node in nodes:
            node.kill()


def _pids(brokers: list[BrokerProcess], nodes: list[JetStreamNode]) -> dict[str, list[int]]:
    return {
        "brokers": [b.proc.pid for b in brokers if b.proc is not None],
        "nodes": [n.proc.pid for n in nodes if n.proc is not None],
        "client": [os.getpid()],
    }


def _cpu(pids: dict[str, list[int]]) -> dict[str, float]:
    return {part: sum(cpu_seconds(p) for p in group) for part, group in pids.items()}


def _per_message(before: dict[str, float], after: dict[str, float], count: int) -> dict[str, float]:
    return {part: 1e6 * (after[part] - before[part]) / count for part in before}


def one_run(config: Config, args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="cluster-tput-") as scratch,
        running(config, Path(scratch)) as (brokers, nodes),
    ):
        topic = f"persistent://public/default/tput-{uuid.uuid4().hex[:8]}"
        path = f"/admin/v2/{topic.replace('persistent://', 'persistent/')}/partitions"
        status, body = admin_json(brokers[0], "PUT", path, args.partitions)
        assert status == 204, (status, body)
        url = multi_host_url(brokers)
        client = pulsar.Client(
            url,
            operation_timeout_seconds=60,
            io_threads=2,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            client.subscribe(
                topic,
                "tput",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
            ).close()
            producer = client.create_producer(
                topic,
                batching_enabled=args.batch > 1,
                batching_max_messages=max(args.batch, 2),
                batching_max_publish_delay_ms=5,
                max_pending_messages=10_000,
                block_if_queue_full=True,
                send_timeout_millis=120_000,
            )
            payload = b"x" * args.size
            done = threading.Semaphore(0)
            failed: list[object] = []

            def sent(result: object, _msg_id: object) -> None:
                if result != pulsar.Result.Ok:
                    failed.append(result)
                done.release()

            pids = _pids(brokers, nodes)
            start_cpu, started = _cpu(pids), time.monotonic()
            for _ in range(args.messages):
                producer.send_async(payload, sent)
            producer.flush()
            for _ in range(args.messages):
                done.acquire()
            produce_s = time.monotonic() - started
            produce_cpu = _per_message(start_cpu, _cpu(pids), args.messages)
            assert not failed, failed[:5]
            producer.close()

            consumer = client.subscribe(
                topic,
                "tput",
                consumer_type=pulsar.ConsumerType.Shared,
                receiver_queue_size=1000,
            )
            start_cpu, started = _cpu(pids), time.monotonic()
            for _ in range(args.messages):
                consumer.acknowledge(consumer.receive(timeout_millis=60_000))
            consume_s = time.monotonic() - started
            consume_cpu = _per_message(start_cpu, _cpu(pids), args.messages)
            consumer.close()
        finally:
            client.close()
    return {
        "produce": args.messages / produce_s,
        "consume": args.messages / consume_s,
        "produce_cpu": produce_cpu,
        "consume_cpu": consume_cpu,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000, help="messages per batch (1: unbatched)")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()
    chosen = [CONFIGS[name] for name in args.configs.split(",")]
    results: dict[str, list[dict[str, Any]]] = {c.name: [] for c in chosen}
    for run in range(args.runs):  # interleaved: each run visits every configuration
        for config in chosen:
            figures = one_run(config, args)
            results[config.name].append(figures)
            print(
                f"run {run + 1} {config.label}: produce {figures['produce']:,.0f} msg/s, "
                f"consume {figures['consume']:,.0f} msg/s",
                flush=True,
            )
    base = results.get("embedded")
    base_produce = statistics.median(r["produce"] for r in base) if base else None
    base_consume = statistics.median(r["consume"] for r in base) if base else None
    cores = os.cpu_count() or 1
    lines: list[list[Any]] = [
        [
            "configuration",
            "produce msg/s",
            "x embedded",
            "consume msg/s",
            "x embedded",
            "CPU µs/msg produce: brokers / nodes / client",
            "consume: brokers / nodes / client",
        ]
    ]
    for config in chosen:
        runs = results[config.name]
        produce = statistics.median(r["produce"] for r in runs)
        consume = statistics.median(r["consume"] for r in runs)

        def cpu(phase: str, runs: list[dict[str, Any]] = runs) -> str:
            parts = ("brokers", "nodes", "client")
            return " / ".join(f"{statistics.median(r[phase][p] for r in runs):.1f}" for p in parts)

        lines.append(
            [
                config.label,
                f"{produce:,.0f}",
                f"{produce / base_produce:.2f}" if base_produce else "-",
                f"{consume:,.0f}",
                f"{consume / base_consume:.2f}" if base_consume else "-",
                cpu("produce_cpu"),
                cpu("consume_cpu"),
            ]
        )
    print(align_columns(lines))
    print(
        f"medians of {args.runs} run(s), {args.messages:,} messages of {args.size} bytes, "
        f"batches of {args.batch}, {args.partitions} partitions, this machine: {cores} cores; "
        "every process shares them"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

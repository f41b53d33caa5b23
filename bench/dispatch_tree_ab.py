#!/usr/bin/env python3
"""Broker CPU per dispatched entry from two or more source trees, interleaved.

Answers "did this change to reading and dispatching cost anything per entry?". Per tree a
worker process (``PYTHONPATH`` = the tree) runs an embedded broker holding a topic of
``--entries`` unbatched keyed entries (published once, untimed). Each run then, on the broker's
event loop: a fresh non-durable subscription of each type (Exclusive, Shared, Key_Shared) with
``--consumers`` real broker ``Consumer`` objects whose connection is a sink (frames are built,
then dropped); it hands out ``--permits`` permits per consumer, triggers the dispatcher the way
every broker event does (``schedule()``, then one event-loop turn runs the pass) and repeats
until the whole backlog went out. The figure is the loop thread's CPU time per entry: cursor
reads, entry infos, selection, frame building, and the pass's own start. ``--permits 1`` makes
every pass read one entry (the per-read overhead shows); the default (1000) lets passes read
full batches (``dispatcherMaxReadBatchSize``).

Trees take turns, the order rotating per run; prints medians and each tree's ratio to the
first. A tree is ``NAME=SRC`` or ``NAME=@REV`` (exported with ``git archive``)::

    .venv/bin/python bench/dispatch_tree_ab.py --tree before=@main --tree after=src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import add_json_option, align_columns, print_report
from client_tree_ab import resolve_trees

BENCH = Path(__file__).resolve().parent
TYPES = ("Exclusive", "Shared", "Key_Shared")


def worker(entries: int, consumers: int, permits: int, rounds: int) -> None:
    """In the tree's interpreter: print one JSON line of µs CPU per entry by type, per round."""
    from key_shared_dispatch import SinkConnection, fill_topic

    from starquake.broker.consumer import Consumer
    from starquake.broker.embedded import EmbeddedBroker
    from starquake.broker.topic import PersistentTopic
    from starquake.protocol.enums import SubType

    topic_name = "persistent://public/default/key-shared-dispatch"

    async def one(broker: EmbeddedBroker, run: str, sub_type: SubType) -> float:
        topic = broker.service.topics[topic_name]
        assert isinstance(topic, PersistentTopic)
        subscription = topic.get_or_create_subscription(
            run, durable=False, initial_earliest=True, start=None, start_inclusive=True
        )
        try:
            members = []
            for i in range(consumers if sub_type != SubType.Exclusive else 1):
                consumer = Consumer(subscription, SinkConnection(), 1 + i, f"c{i}", sub_type, 0, -1)
                subscription.add_consumer(consumer)
                members.append(consumer)
            dispatcher = subscription.dispatcher
            assert dispatcher is not None
            await asyncio.sleep(0)
            sent = sum(c.msg_out_counter for c in members)
            cpu0 = time.thread_time()
            while sent < entries:
                for consumer in members:
                    consumer.permits = permits
                    consumer.pending_acks.clear()  # as if acknowledged: no unacked limit
                    consumer.unacked = 0
                dispatcher.schedule()
                await asyncio.sleep(0)
                sent = sum(c.msg_out_counter for c in members)
            return (time.thread_time() - cpu0) / sent * 1e6
        finally:
            topic.remove_subscription(run)

    with tempfile.TemporaryDirectory(prefix="bench-dispatch-ab-") as workdir:
        data = Path(workdir) / "data"
        with EmbeddedBroker(data, brokerDeleteInactiveTopicsEnabled=False) as broker:
            fill_topic(broker, entries)
            for r in range(rounds):
                figures = {
                    name: broker.call(one(broker, f"r{r}-{name}", SubType[name]), timeout=600)
                    for name in TYPES
                }
                print(json.dumps(figures), flush=True)


def run_tree(src: Path, args: argparse.Namespace) -> list[dict[str, float]]:
    env = {"PYTHONPATH": f"{src}:{BENCH}", "PATH": "/usr/bin:/bin"}
    command = [sys.executable, str(Path(__file__).resolve()), "--worker"]
    command += ["--entries", str(args.entries), "--consumers", str(args.consumers)]
    command += ["--permits", str(args.permits)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", default=[], help="NAME=SRC or NAME=@REV")
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--permits", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.worker:
        worker(args.entries, args.consumers, args.permits, 1)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-trees-") as exported:
        trees = resolve_trees(args.tree or ["working=src"], Path(exported))
        figures: dict[str, dict[str, list[float]]] = {n: {t: [] for t in TYPES} for n in trees}
        names = list(trees)
        for run in range(args.runs):
            for name in names[run % len(names) :] + names[: run % len(names)]:
                for row in run_tree(trees[name], args):
                    for sub_type, value in row.items():
                        figures[name][sub_type].append(value)
                print(f"run {run + 1} {name}: {figures[name]}", file=sys.stderr)
    first = names[0]
    lines: list[list[Any]] = [["tree", *(f"{t} us CPU/entry" for t in TYPES), "ratios"]]
    medians = {n: {t: statistics.median(v) for t, v in f.items()} for n, f in figures.items()}
    for name in names:
        ratios = " ".join(f"{medians[name][t] / medians[first][t]:.3f}" for t in TYPES)
        lines.append([name, *(f"{medians[name][t]:.2f}" for t in TYPES), ratios])
    record = {"entries": args.entries, "permits": args.permits, "runs": figures}
    footer = f"{args.runs} runs per tree, {args.entries:,} entries, {args.permits} permits/pass"
    print_report(align_columns(lines), footer, record, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

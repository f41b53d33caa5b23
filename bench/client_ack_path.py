#!/usr/bin/env python3
"""Nanoseconds per acknowledgment on our client's I/O-thread ack path, per source tree.

The blocking ``Consumer.acknowledge`` queues the id; the client's I/O thread then calls the
partition consumer's ``acknowledge`` (``ConsumerImpl.acknowledge``) for it. This times exactly
that call, in process, on a real ``ConsumerImpl`` (no connection: the grouped acks stay
pending, as between two ack flushes), for ``--batches`` batch entries of ``--batch-size``
messages acknowledged one by one in order, as ``consume-backlog`` does. Every timed pass uses a
fresh consumer. Each tree (``NAME=SRC`` or ``NAME=@REV``, as in ``client_tree_ab.py``) runs in
its own process per pass, and the trees take turns, so drift on a shared machine hits all.

    .venv/bin/python bench/client_ack_path.py --tree head=@HEAD --tree working=src
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_brokers import log
from bench_common import add_json_option, align_columns, print_report
from client_tree_ab import resolve_trees, run_in_tree


async def _time_acks(batches: int, batch_size: int, repeats: int) -> list[float]:
    try:
        from starquake.client.base._config import ClientConfig, ConsumerConfig
        from starquake.client.base._message import MessageId
        from starquake.client.consumer._consumer import ConsumerImpl
        from starquake.client.core._handler import ClientCore
        from starquake.client.core._queue import MessageQueue
    except ImportError:  # a tree from before the client's subpackages
        from starquake.client._config import ClientConfig, ConsumerConfig  # type: ignore
        from starquake.client._consumer import ConsumerImpl  # type: ignore
        from starquake.client._handler import ClientCore  # type: ignore
        from starquake.client._message import MessageId  # type: ignore
        from starquake.client._queue import MessageQueue  # type: ignore

    topic = "persistent://public/default/ack-path"
    make = getattr(MessageId, "from_parts", None) or getattr(MessageId, "_make")  # noqa: B009 - older trees
    ids = [make(7, e, -1, i, batch_size, topic) for e in range(batches) for i in range(batch_size)]
    core = ClientCore(ClientConfig("pulsar://127.0.0.1:6650"))
    figures = []
    for _ in range(repeats):
        consumer = ConsumerImpl(core, topic, "sub", ConsumerConfig(), MessageQueue())
        ack = consumer.acknowledge
        start = time.perf_counter_ns()
        for mid in ids:
            ack(mid)
        figures.append((time.perf_counter_ns() - start) / len(ids))
    return figures


def worker(argv: list[str]) -> int:
    """One pass in this process: print the ns per ack of each repeat as JSON."""
    batches, batch_size, repeats = (int(a) for a in argv)
    print(json.dumps(asyncio.run(_time_acks(batches, batch_size, repeats))))
    return 0


def one_pass(tree: Path, args: argparse.Namespace) -> float:
    """Fastest of 5 timings (ns per ack) in one worker process importing ``tree``'s client."""
    done = run_in_tree(tree, [__file__, "worker", str(args.batches), str(args.batch_size), "5"])
    if done.returncode:
        raise RuntimeError(f"worker failed:\n{done.stderr[-1500:]}")
    return float(min(json.loads(done.stdout)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", metavar="NAME=SRC|NAME=@REV")
    parser.add_argument("--runs", type=int, default=11, help="passes of each tree")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1000)
    add_json_option(parser)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-ack-path-"))
    try:
        trees = resolve_trees(args.tree or ["working=src"], scratch)
        names = list(trees)
        figures: dict[str, list[float]] = {name: [] for name in names}
        for run in range(args.runs):
            shift = run % len(names)
            for name in names[shift:] + names[:shift]:
                figures[name].append(one_pass(trees[name], args))
                log(f"run {run + 1} {name}: {figures[name][-1]:.1f} ns/ack")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    base = statistics.median(figures[names[0]])
    lines: list[list[Any]] = [["tree", "ns/ack", f"vs {names[0]}", "runs"]]
    for name in names:
        median = statistics.median(figures[name])
        runs = " ".join(f"{v:.0f}" for v in figures[name])
        lines.append([name, f"{median:.1f}", f"{median - base:+.1f} ns", runs])
    footer = (
        f"{args.batches} batches x {args.batch_size} messages acked one by one through "
        f"ConsumerImpl.acknowledge; medians of {args.runs} interleaved passes"
    )
    record = {"trees": {n: str(p) for n, p in trees.items()}, "ns_per_ack": figures}
    print_report(align_columns(lines), footer, record, args.json)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        raise SystemExit(worker(sys.argv[2:]))
    raise SystemExit(main())

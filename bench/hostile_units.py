#!/usr/bin/env python3
"""The broker's CPU per hostile connection, per kind, from two or more source trees, interleaved.

Answers "what does one hostile connection cost the broker?" in CPU time (not throughput, so it
holds on a busy machine). Per tree it starts ``starquake standalone`` with basic authentication
(a bcrypt htpasswd, as ``hostile_soak.py``) from that tree (``PYTHONPATH``). Then, per run and
per kind, the trees take turns (the order rotates every run) and this process opens ``--count``
connections of that kind at ``--rate`` a second, each doing what ``hostile_soak.py``'s hostile
of that kind does first, and waits until every one is over:

- ``refused-binary``: CONNECT with a wrong password (a new one each time), read until the
  broker closes (its ERROR, then the refusal's linger);
- ``refused-web``: ``PUT /admin/v2/tenants/t`` with wrong Basic credentials (a new password
  each time), read until the broker closes (401, linger);
- ``idle-binary`` / ``idle-web``: connect, send nothing, close after ``--hold`` seconds;
- ``half-frame``: the first half of a binary frame's bytes, close after ``--hold`` seconds.

The broker's CPU is read from ``/proc/PID/task/*/schedstat`` (nanoseconds) before and after,
for its event-loop thread (the main thread) and for the whole process (the password worker,
the storage threads), minus what the same broker spends idle over the same time (measured
once per run). Prints the medians in microseconds per connection and each tree's ratio to
the first.

A tree is ``NAME=SRC`` (a directory holding the ``starquake`` package) or ``NAME=@REV`` (a git
revision of this repository, exported with ``git archive``)::

    .venv/bin/python bench/hostile_units.py --tree base=@main --tree working=src
    .venv/bin/python bench/hostile_units.py --tree working=src --runs 1 --count 200
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from client_tree_ab import resolve_trees
from hostile_soak import USER, Broker, _connect_frame

KINDS = ("refused-binary", "refused-web", "idle-binary", "idle-web", "half-frame")


def thread_ns(pid: int) -> tuple[int, int]:
    """(ns on CPU of the main thread, of all threads) of process ``pid``."""
    main = total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that just ended
        total += ns
        if int(tid) == pid:
            main = ns
    return main, total


async def _read_until_closed(reader: asyncio.StreamReader) -> None:
    async with asyncio.timeout(30):
        while await reader.read(65536):
            pass


def _wrong_web_request() -> bytes:
    wrong = base64.b64encode(f"{USER}:wrong-{random.getrandbits(32)}".encode())
    return (
        b"PUT /admin/v2/tenants/t HTTP/1.1\r\nHost: x\r\nAuthorization: Basic "
        + wrong
        + b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    )


async def _one(kind: str, broker: Broker, hold: float, failures: list[str]) -> None:
    port = broker.web_port if kind.endswith("web") else broker.port
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        failures.append(f"connect: {exc!r}")
        return
    try:
        if kind == "refused-binary":
            writer.write(_connect_frame(f"{USER}:wrong-{random.getrandbits(32)}".encode()))
            await _read_until_closed(reader)
        elif kind == "refused-web":
            writer.write(_wrong_web_request())
            await _read_until_closed(reader)
        else:
            if kind == "half-frame":
                writer.write(struct.pack(">I", 32 * 1024) + b"\0" * (16 * 1024))
            await asyncio.sleep(hold)
    except (OSError, TimeoutError) as exc:
        failures.append(f"{kind}: {exc!r}")
    finally:
        writer.close()


async def _storm(kind: str, broker: Broker, count: int, rate: float, hold: float) -> list[str]:
    failures: list[str] = []
    tasks = []
    started = time.monotonic()
    for i in range(count):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_one(kind, broker, hold, failures)))
    await asyncio.gather(*tasks)
    return failures


def measure(
    kind: str, broker: Broker, idle: tuple[float, float], args: argparse.Namespace
) -> dict[str, Any]:
    """Broker CPU (µs per connection, loop thread and process) of ``--count`` of ``kind``."""
    pid = broker.process.pid
    main0, all0 = thread_ns(pid)
    t0 = time.monotonic()
    failures = asyncio.run(_storm(kind, broker, args.count, args.rate, args.hold))
    time.sleep(args.settle)  # the broker's side of the last closes
    main1, all1 = thread_ns(pid)
    elapsed = time.monotonic() - t0
    idle_main, idle_all = idle
    return {
        "loop_us": (main1 - main0 - idle_main * elapsed) / args.count / 1000,
        "process_us": (all1 - all0 - idle_all * elapsed) / args.count / 1000,
        "failures": len(failures),
        "failure_samples": failures[:3],
    }


def idle_rate(broker: Broker, seconds: float) -> tuple[float, float]:
    """ns per second the broker spends on CPU with nothing to do (loop thread, process)."""
    pid = broker.process.pid
    main0, all0 = thread_ns(pid)
    time.sleep(seconds)
    main1, all1 = thread_ns(pid)
    return (main1 - main0) / seconds, (all1 - all0) / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", metavar="NAME=SRC|NAME=@REV")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=600, help="connections per kind and run")
    parser.add_argument("--rate", type=float, default=250.0, help="connections opened a second")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds idle kinds stay open")
    parser.add_argument("--settle", type=float, default=0.5)
    parser.add_argument("--bcrypt-rounds", type=int, default=10)
    parser.add_argument("-D", dest="define", action="append", default=[])
    parser.add_argument("--json", help="also write the record to this file")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    with tempfile.TemporaryDirectory(prefix="hostile-units-") as tmp:
        scratch = Path(tmp)
        trees = resolve_trees(args.tree or ["working=src"], scratch / "trees")
        brokers: dict[str, Broker] = {}
        try:
            for name, path in trees.items():
                (scratch / name).mkdir()
                env = {**os.environ, "PYTHONPATH": str(path)}
                brokers[name] = Broker(scratch / name, args.bcrypt_rounds, args.define, env=env)
            record = _runs(brokers, kinds, args)
        finally:
            for broker in brokers.values():
                broker.stop()
    _report(record, list(trees), kinds)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


def _runs(brokers: dict[str, Broker], kinds: list[str], args: argparse.Namespace) -> dict[str, Any]:
    names = list(brokers)
    record: dict[str, Any] = {n: {k: [] for k in kinds} for n in names}
    load = []
    for run in range(args.runs):
        order = names[run % len(names) :] + names[: run % len(names)]
        idle = {name: idle_rate(brokers[name], 2.0) for name in order}
        for kind in kinds:
            for name in order:
                record[name][kind].append(measure(kind, brokers[name], idle[name], args))
        load.append(os.getloadavg()[0])
        print(f"run {run + 1}/{args.runs} done, load average {load[-1]:.1f}", file=sys.stderr)
    record["load_average"] = load
    record["args"] = {k: v for k, v in vars(args).items() if k != "tree"}
    return record


def _report(record: dict[str, Any], names: list[str], kinds: list[str]) -> None:
    first = names[0]
    print(f"broker CPU per connection, µs (median of runs); ratio to {first}")
    print(f"{'kind':16} {'tree':10} {'loop':>9} {'process':>9} {'ratio loop':>11} {'failures':>9}")
    for kind in kinds:
        base = statistics.median(r["loop_us"] for r in record[first][kind])
        for name in names:
            runs = record[name][kind]
            loop = statistics.median(r["loop_us"] for r in runs)
            proc = statistics.median(r["process_us"] for r in runs)
            fails = sum(r["failures"] for r in runs)
            ratio = loop / base if base > 0 else float("nan")
            print(f"{kind:16} {name:10} {loop:9.0f} {proc:9.0f} {ratio:11.2f} {fails:9d}")
    loads = record["load_average"]
    print(f"load average {min(loads):.1f}-{max(loads):.1f}")


if __name__ == "__main__":
    sys.exit(main())

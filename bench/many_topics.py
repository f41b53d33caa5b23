#!/usr/bin/env python3
"""Many topics on one broker: each with a producer and a consumer; what does it cost, and
what breaks first?

Starts a Starquake broker (temp data dir, free ports), then with the official client
(``--clients`` processes, each one client and ``--threads`` threads opening in parallel):

1. opens ``--topics`` topics, each with a consumer (Exclusive, receiver queue
   ``--receiver-queue``) and an unbatched producer: topics/s to open;
2. sends ``--messages`` messages per topic (``send_async``, all receipts awaited): msgs/s;
3. receives and acknowledges them all: msgs/s;
4. closes everything.

Between phases it reads the broker's resident memory, open file descriptors and threads
from /proc; per-topic memory is the growth over opening divided by the topics opened. The
first error of each phase (and how many) is reported, with the broker's log lines at
WARNING and above. One JSON line at the end.

    .venv/bin/python bench/many_topics.py                    # 10,000 topics
    .venv/bin/python bench/many_topics.py --topics 2000 --clients 2
    .venv/bin/python bench/many_topics.py -D managedLedgerCacheSizeMB=64
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench_brokers import (
    Broker,
    default_starquake_cmd,
    log,
    machine_info,
    start_standalone,
)


def proc_figures(pid: int) -> dict[str, float]:
    """The broker's RSS (MB), open descriptors and threads now."""
    out: dict[str, float] = {"rss_mb": 0.0, "fds": 0, "threads": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = round(int(line.split()[1]) / 1024, 1)
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def start_broker(args: argparse.Namespace) -> Broker:
    """A Starquake broker on free loopback ports, once it is healthy."""
    defines = [x for d in args.define for x in ("-D", d)]
    extra = ["--log-level=WARNING", *defines]
    return start_standalone(default_starquake_cmd(), "bench-many-topics-", extra, None)


# --------------------------------------------------------------------------- client worker


class Phase:
    """What one phase of one worker did: seconds, successes, errors (the first kept)."""

    def __init__(self) -> None:
        self.ok = 0
        self.errors = 0
        self.first_error = ""
        self.seconds = 0.0
        self._lock = threading.Lock()

    def failed(self, what: str, exc: BaseException) -> None:
        with self._lock:
            self.errors += 1
            if not self.first_error:
                self.first_error = f"{what}: {type(exc).__name__}: {exc}"

    def done(self, n: int = 1) -> None:
        with self._lock:
            self.ok += n

    def record(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": self.errors,
            "first_error": self.first_error,
            "seconds": round(self.seconds, 2),
        }


def worker(
    url: str, names: list[str], args: dict[str, Any], go: Any, results: Any, index: int
) -> None:
    """One client process: open, send, receive, close its share of the topics; each phase
    starts when the parent sets the next ``go`` event, and reports into ``results``."""
    import pulsar

    client = pulsar.Client(
        url,
        operation_timeout_seconds=args["timeout"],
        io_threads=2,
        message_listener_threads=1,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    pairs: list[tuple[Any, Any] | None] = [None] * len(names)
    payload = b"x" * args["size"]

    def open_one(i: int, phase: Phase) -> None:
        try:
            consumer = client.subscribe(
                names[i],
                "sub",
                consumer_type=pulsar.ConsumerType.Exclusive,
                receiver_queue_size=args["receiver_queue"],
            )
        except Exception as exc:
            phase.failed(f"subscribe {names[i]}", exc)
            return
        try:
            producer = client.create_producer(
                names[i], batching_enabled=False, send_timeout_millis=args["timeout"] * 1000
            )
        except Exception as exc:
            phase.failed(f"create_producer {names[i]}", exc)
            consumer.close()
            return
        pairs[i] = (producer, consumer)
        phase.done()

    def run_phase(name: str, body: Any) -> None:
        go[name].wait()
        phase = Phase()
        started = time.monotonic()
        try:
            body(phase)
        except Exception as exc:
            phase.failed(name, exc)
        phase.seconds = time.monotonic() - started
        results.put((index, name, phase.record()))

    def opening(phase: Phase) -> None:
        with ThreadPoolExecutor(args["threads"]) as pool:
            list(pool.map(lambda i: open_one(i, phase), range(len(names))))

    def sending(phase: Phase) -> None:
        done = threading.Event()
        expected = sum(1 for p in pairs if p is not None) * args["messages"]
        counted = [0]
        lock = threading.Lock()

        def sent(result: Any, _msg_id: Any) -> None:
            with lock:
                counted[0] += 1
                if counted[0] >= expected:
                    done.set()
            if result == pulsar.Result.Ok:
                phase.done()
            else:
                phase.failed("send", RuntimeError(str(result)))

        if expected == 0:
            return
        for _ in range(args["messages"]):
            for pair in pairs:
                if pair is not None:
                    try:
                        pair[0].send_async(payload, sent)
                    except Exception as exc:
                        phase.failed("send_async", exc)
                        with lock:
                            counted[0] += 1
        if not done.wait(args["timeout"] * 4):
            phase.failed("send", TimeoutError(f"{expected - counted[0]} receipts missing"))

    def receiving(phase: Phase) -> None:
        for pair in pairs:
            if pair is None:
                continue
            for _ in range(args["messages"]):
                try:
                    msg = pair[1].receive(timeout_millis=args["timeout"] * 1000)
                    pair[1].acknowledge(msg)
                    phase.done()
                except Exception as exc:
                    phase.failed("receive", exc)
                    break

    def closing(phase: Phase) -> None:
        def close_one(pair: tuple[Any, Any] | None) -> None:
            if pair is None:
                return
            try:
                pair[0].close()
                pair[1].close()
                phase.done()
            except Exception as exc:
                phase.failed("close", exc)

        with ThreadPoolExecutor(args["threads"]) as pool:
            list(pool.map(close_one, pairs))

    for name, body in (
        ("open", opening),
        ("send", sending),
        ("receive", receiving),
        ("close", closing),
    ):
        run_phase(name, body)
    client.close()


# --------------------------------------------------------------------------- driver


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the broker and the workers, step them through the phases, collect figures."""
    broker = start_broker(args)
    pid = broker.proc.pid
    names = [f"persistent://public/default/many-{i:06d}" for i in range(args.topics)]
    shares = [names[i :: args.clients] for i in range(args.clients)]
    ctx = mp.get_context("spawn")
    phases = ("open", "send", "receive", "close")
    go = {p: ctx.Event() for p in phases}
    results = ctx.Queue()
    settings = {
        "timeout": args.timeout,
        "threads": args.threads,
        "receiver_queue": args.receiver_queue,
        "messages": args.messages,
        "size": args.size,
    }
    workers = [
        ctx.Process(target=worker, args=(broker.service_url, share, settings, go, results, i))
        for i, share in enumerate(shares)
    ]
    record: dict[str, Any] = {
        "topics": args.topics,
        "clients": args.clients,
        "messages_per_topic": args.messages,
        "defines": args.define,
    }
    try:
        for w in workers:
            w.start()
        time.sleep(1.0)  # the workers import the client
        figures = {"start": proc_figures(pid)}
        for phase in phases:
            log(f"phase {phase}")
            started = time.monotonic()
            go[phase].set()
            got: list[dict[str, Any]] = []
            peak = dict(figures[list(figures)[-1]])
            while len(got) < len(workers):
                try:
                    _, _phase, rec = results.get(timeout=1.0)
                    got.append(rec)
                except Exception:
                    pass
                now = proc_figures(pid)
                for k in ("rss_mb", "fds"):
                    peak[k] = max(peak[k], now[k])
                if not broker.alive():
                    raise RuntimeError(f"the broker exited:\n{broker.log_tail()}")
                if time.monotonic() - started > args.phase_timeout:
                    raise RuntimeError(f"phase {phase} took over {args.phase_timeout} s")
            wall = time.monotonic() - started
            figures[phase] = proc_figures(pid)
            ok = sum(r["ok"] for r in got)
            errors = sum(r["errors"] for r in got)
            first = next((r["first_error"] for r in got if r["first_error"]), "")
            record[phase] = {
                "ok": ok,
                "errors": errors,
                "first_error": first,
                "seconds": round(wall, 2),
                "per_s": round(ok / wall, 1) if wall > 0 else None,
                "broker_after": figures[phase],
                "broker_peak": {"rss_mb": peak["rss_mb"], "fds": peak["fds"]},
            }
            log(f"{phase}: {json.dumps(record[phase])}")
        opened = record["open"]["ok"] or 1
        grown = figures["open"]["rss_mb"] - figures["start"]["rss_mb"]
        record["broker_start"] = figures["start"]
        record["rss_per_topic_kb"] = round(grown * 1024 / opened, 1)
        record["fds_per_topic"] = round(
            (figures["open"]["fds"] - figures["start"]["fds"]) / opened, 2
        )
        record["broker_vmhwm_mb"] = broker.peak_rss_mb()
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
        record["broker_log_warnings"] = [
            line
            for line in broker.log_tail(400).splitlines()
            if " WARNING " in line or " ERROR " in line or "Traceback" in line
        ][:20]
        broker.stop()
        shutil.rmtree(broker.workdir, ignore_errors=True)
    record["machine"] = machine_info()
    return record


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run once, print the JSON record."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--messages", type=int, default=5, help="messages per topic")
    p.add_argument("--size", type=int, default=100, help="bytes per message")
    p.add_argument("--clients", type=int, default=2, help="client processes")
    p.add_argument("--threads", type=int, default=16, help="threads opening, per client")
    p.add_argument("--receiver-queue", type=int, default=10)
    p.add_argument("--timeout", type=int, default=30, help="client operation timeout (s)")
    p.add_argument("--phase-timeout", type=float, default=900)
    p.add_argument("-D", dest="define", action="append", default=[], help="broker key=value")
    p.add_argument("--json", help="also write the record to this file")
    args = p.parse_args(argv)
    record = run(args)
    line = json.dumps({k: v for k, v in record.items() if k != "machine"})
    print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

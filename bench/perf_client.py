#!/usr/bin/env python3
"""Load generator for Pulsar-protocol brokers, driven through the official ``pulsar-client``.

Every scenario is a function that talks to ``--service-url`` and returns a dict of figures.
One JSON line per scenario is printed on stdout; the client's own log goes to stderr.

    .venv/bin/python bench/perf_client.py --service-url pulsar://127.0.0.1:6650
    .venv/bin/python bench/perf_client.py --scenario sync-latency --sync-sends 1000

Each run uses a fresh topic (uuid), so runs never see each other's data.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pulsar
from bench_common import drain_distinct, percentile

_U32 = struct.Struct(">I")

Figures = dict[str, Any]

SCENARIOS = ("produce-batched", "produce-unbatched", "consume-backlog", "sync-latency")


@dataclass(frozen=True)
class Settings:
    """Everything a scenario needs to know; filled from the command line."""

    service_url: str
    size: int = 100
    batched_messages: int = 200_000
    unbatched_messages: int = 50_000
    backlog_messages: int = 200_000
    sync_sends: int = 5_000
    sync_warmup: int = 200
    batched_max_pending: int = 1_000
    unbatched_max_pending: int = 50_000
    subscription_type: str = "Shared"
    receiver_queue_size: int = 1_000
    namespace: str = "public/default"
    callbacks: str = "each"
    operation_timeout_s: int = 30


def new_topic(settings: Settings, scenario: str) -> str:
    """A topic name no earlier run has used."""
    return f"persistent://{settings.namespace}/bench-{scenario}-{uuid.uuid4().hex[:12]}"


def make_client(settings: Settings) -> pulsar.Client:
    logger = logging.getLogger("pulsar")
    return pulsar.Client(
        settings.service_url,
        operation_timeout_seconds=settings.operation_timeout_s,
        logger=logger,
    )


class Completion:
    """Counts send callbacks from the client's I/O thread and wakes the waiter at the end."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.done = 0
        self.failed = 0
        self.first_error: str | None = None
        self.last_at = 0.0
        self._lock = threading.Lock()
        self._finished = threading.Event()

    def callback(self, result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        with self._lock:
            self.done += 1
            if result != pulsar.Result.Ok:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = str(result)
            if self.done >= self.expected:
                self.last_at = time.perf_counter()
                self._finished.set()

    def wait(self, timeout: float) -> bool:
        return self._finished.wait(timeout)


def _produce_async(
    producer: pulsar.Producer, payloads: Sequence[bytes], callbacks: str, timeout: float
) -> tuple[float, float]:
    """Send every payload with send_async; return (seconds to the last callback, client CPU s).

    callbacks="each" gives every message a Python callback, as applications do. "last" gives
    only the final message one (receipts arrive in order, a failure fails all pending sends):
    each callback costs the client a GIL hand-off from its I/O thread, which on a small machine
    can make the client, not the broker, the bottleneck.
    """
    count = len(payloads)
    completion = Completion(count if callbacks == "each" else 1)
    send = producer.send_async
    callback = completion.callback
    cpu0 = time.process_time()
    start = time.perf_counter()
    if callbacks == "each":
        for payload in payloads:
            send(payload, callback)
    else:
        for payload in payloads[:-1]:
            send(payload, None)
        send(payloads[-1], callback)
    producer.flush()
    if not completion.wait(timeout):
        raise TimeoutError(f"only {completion.done}/{count} send callbacks after {timeout}s")
    if completion.failed:
        raise RuntimeError(f"{completion.failed} sends failed, first: {completion.first_error}")
    return completion.last_at - start, time.process_time() - cpu0


def _throughput(count: int, seconds: float, size: int) -> Figures:
    return {
        "messages": count,
        "seconds": round(seconds, 4),
        "msgs_per_s": round(count / seconds, 1),
        "mb_per_s": round(count * size / seconds / 1e6, 3),
    }


def _produce(
    settings: Settings, tag: str, *, batching: bool, count: int, max_pending: int
) -> Figures:
    client = make_client(settings)
    try:
        producer = client.create_producer(
            new_topic(settings, tag),
            batching_enabled=batching,
            block_if_queue_full=True,
            max_pending_messages=max_pending,
        )
        payloads = [b"x" * settings.size] * count
        seconds, cpu = _produce_async(producer, payloads, settings.callbacks, timeout=600)
        producer.close()
        figures = _throughput(count, seconds, settings.size)
        figures["client_cpu_s"] = round(cpu, 3)
        figures["callbacks"] = settings.callbacks
        figures["max_pending_messages"] = max_pending
        return figures
    finally:
        client.close()


def produce_batched(settings: Settings) -> Figures:
    """N messages via send_async, batching on with the client's default batch limits."""
    return _produce(
        settings,
        "pb",
        batching=True,
        count=settings.batched_messages,
        max_pending=settings.batched_max_pending,
    )


def produce_unbatched(settings: Settings) -> Figures:
    """N messages via send_async, one entry per message, a large pending window."""
    return _produce(
        settings,
        "pu",
        batching=False,
        count=settings.unbatched_messages,
        max_pending=settings.unbatched_max_pending,
    )


def consume_backlog(settings: Settings) -> Figures:
    """Pre-produce a backlog (batched), then one consumer receives and acks all of it.

    The subscription is created (Earliest) before producing and its consumer is closed
    again, so the timed phase reads a stored backlog rather than racing the producer.
    """
    client = make_client(settings)
    try:
        topic = new_topic(settings, "cb")
        sub = "bench-sub"
        sub_type = getattr(pulsar.ConsumerType, settings.subscription_type)

        def subscribe() -> pulsar.Consumer:
            return client.subscribe(
                topic,
                sub,
                consumer_type=sub_type,
                initial_position=pulsar.InitialPosition.Earliest,
                receiver_queue_size=settings.receiver_queue_size,
            )

        subscribe().close()
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            block_if_queue_full=True,
            max_pending_messages=max(settings.batched_max_pending, 10_000),
        )
        count = settings.backlog_messages
        # Each payload starts with its index, so redelivered duplicates are not counted.
        filler = b"x" * max(0, settings.size - 4)
        payloads = [_U32.pack(i) + filler for i in range(count)]
        produce_s, _ = _produce_async(producer, payloads, settings.callbacks, timeout=600)
        producer.close()
        del payloads

        consumer = subscribe()
        drained = drain_distinct(consumer, count, pulsar.Timeout)
        consumer.close()
        figures = _throughput(count, drained.seconds, settings.size)
        figures["client_cpu_s"] = round(drained.cpu, 3)
        figures["first_message_ms"] = drained.first_message_ms
        figures["produce_msgs_per_s"] = round(count / produce_s, 1)
        figures["subscription_type"] = settings.subscription_type
        figures["duplicates"] = drained.received - count
        figures["extra_after_end"] = drained.extra_after_end
        return figures
    finally:
        client.close()


def sync_latency(settings: Settings) -> Figures:
    """M sequential blocking send() calls, batching off; per-call latency."""
    client = make_client(settings)
    try:
        producer = client.create_producer(new_topic(settings, "sl"), batching_enabled=False)
        payload = b"x" * settings.size
        send = producer.send
        for _ in range(settings.sync_warmup):
            send(payload)
        latencies: list[float] = []
        clock = time.perf_counter_ns
        for _ in range(settings.sync_sends):
            t0 = clock()
            send(payload)
            latencies.append((clock() - t0) / 1e6)
        producer.close()
        latencies.sort()
        return {
            "messages": len(latencies),
            "p50_ms": round(percentile(latencies, 50), 4),
            "p95_ms": round(percentile(latencies, 95), 4),
            "p99_ms": round(percentile(latencies, 99), 4),
            "max_ms": round(latencies[-1], 4),
            "mean_ms": round(statistics.fmean(latencies), 4),
            "msgs_per_s": round(len(latencies) / (sum(latencies) / 1e3), 1),
        }
    finally:
        client.close()


RUNNERS: dict[str, Callable[[Settings], Figures]] = {
    "produce-batched": produce_batched,
    "produce-unbatched": produce_unbatched,
    "consume-backlog": consume_backlog,
    "sync-latency": sync_latency,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    d = Settings(service_url="")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    p.add_argument(
        "--scenario",
        action="append",
        choices=[*SCENARIOS, "all"],
        help="scenario to run; repeatable; default all",
    )
    p.add_argument("--size", type=int, default=d.size, help="payload bytes")
    p.add_argument("--batched-messages", type=int, default=d.batched_messages)
    p.add_argument("--unbatched-messages", type=int, default=d.unbatched_messages)
    p.add_argument("--backlog-messages", type=int, default=d.backlog_messages)
    p.add_argument("--sync-sends", type=int, default=d.sync_sends)
    p.add_argument("--sync-warmup", type=int, default=d.sync_warmup)
    p.add_argument(
        "--batched-max-pending",
        type=int,
        default=d.batched_max_pending,
        help="max_pending_messages of the batched producer (client default 1000)",
    )
    p.add_argument("--unbatched-max-pending", type=int, default=d.unbatched_max_pending)
    p.add_argument(
        "--subscription-type", choices=["Shared", "Exclusive"], default=d.subscription_type
    )
    p.add_argument("--receiver-queue-size", type=int, default=d.receiver_queue_size)
    p.add_argument("--namespace", default=d.namespace)
    p.add_argument(
        "--callbacks",
        choices=["each", "last"],
        default=d.callbacks,
        help="send_async callback on every message (default) or only on the last one",
    )
    p.add_argument("--label", default="", help="free text copied into every JSON line")
    p.add_argument("--log-level", default="WARNING", help="level of the client's log (stderr)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    settings = Settings(
        service_url=args.service_url,
        size=args.size,
        batched_messages=args.batched_messages,
        unbatched_messages=args.unbatched_messages,
        backlog_messages=args.backlog_messages,
        sync_sends=args.sync_sends,
        sync_warmup=args.sync_warmup,
        batched_max_pending=args.batched_max_pending,
        unbatched_max_pending=args.unbatched_max_pending,
        subscription_type=args.subscription_type,
        receiver_queue_size=args.receiver_queue_size,
        namespace=args.namespace,
        callbacks=args.callbacks,
    )
    if settings.size < 4:
        raise SystemExit("--size must be at least 4 (consume-backlog numbers its payloads)")
    chosen = args.scenario or ["all"]
    names = list(SCENARIOS) if "all" in chosen else list(dict.fromkeys(chosen))
    status = 0
    for name in names:
        line: Figures = {"scenario": name, "service_url": settings.service_url}
        if args.label:
            line["label"] = args.label
        try:
            line.update(RUNNERS[name](settings))
            line["ok"] = True
        except Exception as exc:
            line["ok"] = False
            line["error"] = f"{type(exc).__name__}: {exc}"
            status = 1
        line["size"] = settings.size
        print(json.dumps(line), flush=True)
    return status


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The C++ client can abort in its static destructors ("terminate called without an
    # active exception") after large async runs; the figures are already out, so skip them.
    os._exit(code)

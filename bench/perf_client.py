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
import struct
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulsar
from bench_common import drain_distinct, latency_figures, produce_async, timed_sends

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
    """An official client of the service URL, logging through Python's logging."""
    logger = logging.getLogger("pulsar")
    return pulsar.Client(
        settings.service_url,
        operation_timeout_seconds=settings.operation_timeout_s,
        logger=logger,
    )


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
        seconds, cpu = produce_async(producer, payloads, pulsar.Result.Ok, 600, settings.callbacks)
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
        produce_s, _ = produce_async(producer, payloads, pulsar.Result.Ok, 600, settings.callbacks)
        producer.close()
        del payloads

        consumer = subscribe()
        drained = drain_distinct(consumer, count, pulsar.Timeout)
        consumer.close()
        figures = _throughput(count, drained.seconds, settings.size)
        figures["client_cpu_s"] = round(drained.cpu, 3)
        figures.update(drained.figures(count))
        figures["produce_msgs_per_s"] = round(count / produce_s, 1)
        figures["subscription_type"] = settings.subscription_type
        return figures
    finally:
        client.close()


def sync_latency(settings: Settings) -> Figures:
    """M sequential blocking send() calls, batching off; per-call latency."""
    client = make_client(settings)
    try:
        producer = client.create_producer(new_topic(settings, "sl"), batching_enabled=False)
        payload = b"x" * settings.size
        latencies, _ = timed_sends(
            producer.send, payload, settings.sync_warmup, settings.sync_sends
        )
        producer.close()
        figures = latency_figures(latencies, 50, 95, 99)
        figures["msgs_per_s"] = round(len(latencies) / (sum(latencies) / 1e3), 1)
        return figures
    finally:
        client.close()


RUNNERS: dict[str, Callable[[Settings], Figures]] = {
    "produce-batched": produce_batched,
    "produce-unbatched": produce_unbatched,
    "consume-backlog": consume_backlog,
    "sync-latency": sync_latency,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
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
    """Run the chosen scenarios and print one JSON line each; 1 if any failed."""
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

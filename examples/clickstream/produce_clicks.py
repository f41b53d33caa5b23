#!/usr/bin/env python3
"""Publish simulated click events to the topic ``clicks``.

Each message is a JSON object ``{"user": "user-7", "page": "/products/3", "ts": 1767225600000}``
(``ts`` in epoch milliseconds), keyed by the user, with ``ts`` also set as the message's
event time. By default the events are spread evenly over the last ``--spread-minutes``
minutes, so a single run already fills several one-minute windows; ``--rate`` sends them in
real time instead (``ts`` = the moment of sending).

    python produce_clicks.py                          # 2,000 clicks of 12 users
    python produce_clicks.py --count 500 --users 4
    python produce_clicks.py --rate 20 --count 0      # 20 clicks/s until Ctrl-C
    STARQUAKE_URL=pulsar://127.0.0.1:16650 python produce_clicks.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time

from starquake import client as pulsar

DEFAULT_URL = "pulsar://localhost:6650"
PAGES = ["/", "/search", "/cart", "/checkout"] + [f"/products/{n}" for n in range(1, 9)]


def main() -> None:
    parser = argparse.ArgumentParser(description="Publish click events to a topic.")
    parser.add_argument(
        "--url",
        default=os.environ.get("STARQUAKE_URL", DEFAULT_URL),
        help="service URL (default: $STARQUAKE_URL or %(default)s)",
    )
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--count", type=int, default=2000, help="clicks to send (0: no end)")
    parser.add_argument("--users", type=int, default=12, help="distinct users")
    parser.add_argument(
        "--spread-minutes",
        type=float,
        default=5.0,
        help="spread the event times over this many past minutes (without --rate)",
    )
    parser.add_argument(
        "--rate", type=float, default=0.0, help="clicks per second in real time (0: all at once)"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (repeatable runs)")
    args = parser.parse_args()
    if args.count == 0 and args.rate <= 0:
        parser.error("--count 0 (no end) needs --rate")

    rng = random.Random(args.seed)
    users = [f"user-{n}" for n in range(1, args.users + 1)]
    client = pulsar.Client(args.url)
    # No batching: a batch of several users' clicks would go to one Key_Shared consumer as a
    # whole. (Key-based batching avoids that, but its batches carry interleaved sequence ids,
    # which the broker drops as duplicates once deduplication is on for the namespace, as the
    # Spark sink of clicks_per_minute.py turns it on.)
    producer = client.create_producer(
        args.topic, block_if_queue_full=True, max_pending_messages=5000
    )
    failures: list[pulsar.Result] = []
    lock = threading.Lock()

    def on_sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            with lock:
                failures.append(result)

    now_ms = int(time.time() * 1000)
    span_ms = int(args.spread_minutes * 60_000)
    sent = 0
    try:
        while args.count == 0 or sent < args.count:
            if args.rate > 0:
                ts = int(time.time() * 1000)
            else:  # evenly from now - span up to now, in order
                ts = now_ms - span_ms + (span_ms * sent) // max(args.count, 1)
            user = rng.choice(users)
            click = {"user": user, "page": rng.choice(PAGES), "ts": ts}
            producer.send_async(
                json.dumps(click).encode(), on_sent, partition_key=user, event_timestamp=ts
            )
            sent += 1
            if args.rate > 0:
                if sent % max(int(args.rate), 1) == 0:
                    producer.flush()
                    print(f"sent {sent} clicks", flush=True)
                time.sleep(1 / args.rate)
    except KeyboardInterrupt:
        pass
    finally:
        producer.flush()
        producer.close()
        client.close()
    if failures:
        raise SystemExit(f"{len(failures)} of {sent} clicks failed, e.g. {failures[0]}")
    print(f"published {sent} clicks of {len(users)} users to {args.topic} on {args.url}")


if __name__ == "__main__":
    main()

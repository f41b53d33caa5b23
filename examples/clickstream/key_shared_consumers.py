#!/usr/bin/env python3
"""A Key_Shared consumer group of two consumers (threads) on ``clicks``.

Both consumers share the subscription ``clicks-key-shared``; the broker hands every user
(message key) to exactly one of them, and keeps each user's clicks in order. The script
prints each click as it arrives, and at the end which consumer got which users.

Start it before ``produce_clicks.py`` (it waits up to ``--wait`` seconds for the first click),
or after: the subscription starts at the earliest message the first time it is created.
It stops once no click has arrived for ``--idle`` seconds.

    python key_shared_consumers.py
    python key_shared_consumers.py --quiet --idle 3
    STARQUAKE_URL=pulsar://127.0.0.1:16650 python key_shared_consumers.py
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import Counter

from starquake import client as pulsar

DEFAULT_URL = "pulsar://localhost:6650"


class Member:
    """One consumer of the group, receiving on its own thread."""

    def __init__(self, name: str, consumer: pulsar.Consumer) -> None:
        self.name = name
        self.consumer = consumer
        self.users: Counter[str] = Counter()
        self.last_ts: dict[str, int] = {}
        self.out_of_order = 0

    def run(self, group: Group) -> None:
        while not group.stop.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            click = json.loads(msg.data())
            user = msg.partition_key()
            self.users[user] += 1
            if click["ts"] < self.last_ts.get(user, 0):
                self.out_of_order += 1
            self.last_ts[user] = click["ts"]
            group.seen()
            if not group.quiet:
                print(f"{self.name}: {user} -> {click['page']}", flush=True)
            self.consumer.acknowledge(msg)


class Group:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.last_seen: float | None = None

    def seen(self) -> None:
        with self._lock:
            self.last_seen = time.monotonic()


def main() -> None:
    parser = argparse.ArgumentParser(description="Run a two-consumer Key_Shared group.")
    parser.add_argument(
        "--url",
        default=os.environ.get("STARQUAKE_URL", DEFAULT_URL),
        help="service URL (default: $STARQUAKE_URL or %(default)s)",
    )
    parser.add_argument("--topic", default="clicks")
    parser.add_argument("--subscription", default="clicks-key-shared")
    parser.add_argument("--wait", type=float, default=60, help="seconds to wait for a first click")
    parser.add_argument("--idle", type=float, default=5, help="stop after this many idle seconds")
    parser.add_argument("--quiet", action="store_true", help="print only the summary")
    args = parser.parse_args()

    client = pulsar.Client(args.url)
    group = Group(args.quiet)
    members = []
    for name in ("consumer-A", "consumer-B"):
        consumer = client.subscribe(
            args.topic,
            args.subscription,
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name=name,
            initial_position=pulsar.InitialPosition.Earliest,
            # A small queue: with a backlog waiting, the first consumer would otherwise take a
            # thousand clicks before the second one has joined.
            receiver_queue_size=50,
        )
        members.append(Member(name, consumer))
    threads = [threading.Thread(target=m.run, args=(group,), name=m.name) for m in members]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    try:
        while True:
            time.sleep(0.2)
            last = group.last_seen
            if last is None and time.monotonic() - started > args.wait:
                print(f"no click arrived within {args.wait:.0f} s")
                break
            if last is not None and time.monotonic() - last > args.idle:
                break
    except KeyboardInterrupt:
        pass
    finally:
        group.stop.set()
        for thread in threads:
            thread.join()
        for member in members:
            member.consumer.close()
        client.close()

    print()
    owners: dict[str, list[str]] = {}
    for member in members:
        total = sum(member.users.values())
        users = ", ".join(f"{u} ({n})" for u, n in sorted(member.users.items()))
        print(f"{member.name}: {total} clicks of {len(member.users)} users: {users or '-'}")
        for user in member.users:
            owners.setdefault(user, []).append(member.name)
    shared = sorted(u for u, names in owners.items() if len(names) > 1)
    if shared:
        # Possible when a consumer joins or leaves: a user's range moves to the other consumer.
        print(f"users seen by both consumers: {', '.join(shared)}")
    else:
        print("every user went to exactly one consumer")
    disorder = sum(m.out_of_order for m in members)
    if disorder:
        print(f"{disorder} clicks arrived before an earlier click of the same user")


if __name__ == "__main__":
    main()

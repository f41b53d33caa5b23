"""Whether a broker's process is still there, asked over NATS, long before its leases end.

Each broker answers requests on its own subject, ``sq.alive.<incarnation>``, for as long as
its connection to NATS lives. A process killed with kill -9 has its sockets closed by the
operating system, the NATS node it was connected to drops its subscriptions at once and the
other nodes learn it over their routes; from then on a request to its subject is answered
"no responders" immediately. That is the only answer read as *gone*: a late answer or an
error on the asking broker's side says nothing. A live broker whose NATS node died has no
subscription either until it reconnects to another node, which takes milliseconds; so a
broker is counted gone only when two requests :data:`RECHECK_AFTER` seconds apart both find
nobody. A verdict is about one incarnation (a restarted broker has a new one) and is asked
again after :data:`GONE_FOR` seconds (a broker wrongly counted gone, whose connection came
back, is then alive again instead of losing every bundle it takes).

A wrong verdict costs a bundle move, never data: the broker that takes the bundle over fences
its ledgers, so the previous owner's next append fails and it closes the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from nats.errors import Error as NatsError
from nats.errors import NoRespondersError

from starquake.cluster.registry import BrokerInfo

RECHECK_AFTER = 0.25  # seconds between the two requests that find nobody
ASK_TIMEOUT = 1.0  # a live broker's answer later than this: alive as far as we know
ALIVE_FOR = 1.0  # an answer counts for this long (lookups of many partitions ask once)
GONE_FOR = 10.0  # so does a verdict of gone
MAX_REMEMBERED = 4096  # incarnations kept in each cache


def presence_subject(info: BrokerInfo) -> str:
    return f"sq.alive.{info.incarnation}"


class BrokerPresence:
    """This broker's answer to the others, and its view of whether they are alive."""

    def __init__(self, nc: Any, me: BrokerInfo) -> None:
        self._nc = nc
        self._me = me
        self._subscription: Any = None
        self._alive_at: dict[str, float] = {}  # incarnation -> when it last answered
        self._gone_at: dict[str, float] = {}  # incarnation -> when it was found gone

    async def start(self) -> None:
        """Answer the others' requests from now on (until :meth:`stop`)."""
        if self._subscription is None:
            self._subscription = await self._nc.subscribe(
                presence_subject(self._me), cb=self._answer
            )

    async def _answer(self, msg: Any) -> None:
        with contextlib.suppress(NatsError):
            await msg.respond(b"")

    async def stop(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(NatsError):
                await subscription.unsubscribe()

    async def gone(self, info: BrokerInfo) -> bool:
        """True when ``info``'s process has no connection to NATS (twice, a moment apart)."""
        if info.incarnation == self._me.incarnation:
            return False
        now = time.monotonic()
        found_gone = self._gone_at.get(info.incarnation)
        if found_gone is not None and now - found_gone < GONE_FOR:
            return True
        answered = self._alive_at.get(info.incarnation)
        if answered is not None and now - answered < ALIVE_FOR:
            return False
        for attempt in range(2):
            if attempt:
                await asyncio.sleep(RECHECK_AFTER)
            try:
                await self._nc.request(presence_subject(info), b"", timeout=ASK_TIMEOUT)
            except NoRespondersError:
                continue
            except (NatsError, TimeoutError, OSError):
                return False  # cut off or slow: nothing known
            self._remember(self._alive_at, info.incarnation, time.monotonic())
            self._gone_at.pop(info.incarnation, None)
            return False
        self._remember(self._gone_at, info.incarnation, time.monotonic())
        self._alive_at.pop(info.incarnation, None)
        return True

    @staticmethod
    def _remember(cache: dict[str, float], key: str, value: float) -> None:
        if len(cache) >= MAX_REMEMBERED:
            cache.clear()
        cache[key] = value

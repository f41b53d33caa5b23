"""Progress on the broker: a durable subscription that follows a streaming query's commits.

With the option ``predefinedSubscription``, the driver keeps a durable subscription with that
name on every partition it reads and, when Spark commits a micro-batch, moves it to the
committed end (a seek: everything before that entry is acknowledged). The broker then keeps
what the query has not processed yet (its retention and trimming honour the subscription) and
reports the query's backlog. Spark's checkpoint stays the record of where the query reads.
The subscription is never deleted by the source: it belongs to the user who named it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from starquake.client import ConsumerType, InitialPosition, MessageId
from starquake.client.asyncio import Client, Consumer
from starquake.client.bulk import Position
from starquake.client.exceptions import NotConnected


class SubscriptionProgress:
    """One durable subscription per partition, moved to each committed offset."""

    def __init__(self, client: Client, name: str) -> None:
        self._client = client
        self.name = name
        self._consumers: dict[str, Consumer] = {}

    async def attach(self, partitions: list[str]) -> None:
        """Subscribe to the partitions not subscribed yet (a new subscription starts at the
        earliest message, so that nothing the query has still to read is trimmed)."""
        for partition in partitions:
            if partition in self._consumers:
                continue
            self._consumers[partition] = await self._client.subscribe(
                partition,
                self.name,
                consumer_type=ConsumerType.Shared,
                receiver_queue_size=0,  # it only marks progress: no message is delivered
                initial_position=InitialPosition.Earliest,
            )

    async def commit(self, end: Mapping[str, Position]) -> None:
        """Acknowledge everything before ``end`` on every partition."""
        await self.attach(sorted(end))
        for partition, position in end.items():
            if position[0] < 0:
                continue
            target = MessageId(-1, position[0], position[1], -1)
            consumer = self._consumers[partition]
            for attempt in range(100):
                try:
                    await consumer.seek(target)
                    break
                except NotConnected:  # the previous seek made it reconnect
                    if attempt == 99:
                        raise
                    await asyncio.sleep(0.05)

    async def close(self) -> None:
        for consumer in self._consumers.values():
            await consumer.close()
        self._consumers.clear()

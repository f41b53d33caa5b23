"""Finding partitions added to a partitioned topic while producers and consumers use it.

Pulsar lets an operator raise a topic's partition count at any time; the clients look the
count up again every ``partitions_update_interval_seconds`` (60 s by default) and attach to
the new partitions. A :class:`PartitionWatcher` does the looking for one topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.exceptions import PulsarException

if TYPE_CHECKING:
    from starquake.client.core._handler import ClientCore

log = logging.getLogger(CLIENT_LOGGER_NAME)

# (partitions known so far, partitions now) -> attach to the new ones
OnGrown = Callable[[int, int], Awaitable[None]]


class PartitionWatcher:
    """Looks up ``topic``'s partition count periodically and reports growth."""

    def __init__(self, core: ClientCore, topic: str, known: int, on_grown: OnGrown) -> None:
        self._core = core
        self.topic = topic
        self.known = known
        self._on_grown = on_grown
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._core.config.partitions_update_interval_seconds > 0 and self._task is None:
            self._task = self._core.spawn(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def check(self) -> None:
        """Look the count up now; attach to partitions added since the last look."""
        count = await self._core.lookup.get_partitioned_metadata(self.topic)
        if count > self.known:
            await self._on_grown(self.known, count)
            log.info("%s grew from %d to %d partitions", self.topic, self.known, count)
            self.known = count

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._core.config.partitions_update_interval_seconds)
            try:
                await self.check()
            except PulsarException as exc:
                log.warning("looking up the partitions of %s failed: %s", self.topic, exc)

"""The time-based entry-cache eviction sleeps while nothing is cached (an idle or produce-only
broker does not wake every eviction interval), and evicts again once entries are cached."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from starquake.broker.maintenance import MaintenanceContext, cache_eviction_loop
from starquake.storage.state import EntryCache, LedgerOwner, LedgerState


class CountingCache(EntryCache):
    """Counts the time-based eviction passes."""

    __slots__ = ("passes",)

    def __init__(self) -> None:
        super().__init__(1 << 30)
        self.passes = 0

    def evict_older_than(self, now: float, threshold: float) -> int:
        self.passes += 1
        return super().evict_older_than(now, threshold)


def _service(cache: EntryCache) -> MaintenanceContext:
    config = SimpleNamespace(
        managedLedgerCacheEvictionIntervalMs=1,
        managedLedgerCacheEvictionTimeThresholdMillis=30,
    )
    return cast(
        MaintenanceContext, SimpleNamespace(config=config, storage=SimpleNamespace(cache=cache))
    )


def test_eviction_sleeps_while_the_cache_is_empty_and_evicts_once_filled() -> None:
    cache = CountingCache()
    state = LedgerState(cast(LedgerOwner, None), 1, Path("."), 0.0)

    async def run() -> tuple[int, int, int, int]:
        task = asyncio.create_task(cache_eviction_loop(_service(cache)))
        await asyncio.sleep(0.2)  # 200 intervals with nothing cached
        idle_passes = cache.passes
        cache.add(state, b"entry")
        for _ in range(100):  # evicted once older than 30 ms
            await asyncio.sleep(0.01)
            if cache.empty:
                break
        evicted_after = cache.passes
        await asyncio.sleep(0.2)  # empty again: asleep again
        later = cache.passes
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return idle_passes, evicted_after, later, cache.entries

    idle_passes, evicted_after, later, entries = asyncio.run(run())
    assert idle_passes == 0
    assert entries == 0 and evicted_after >= 2  # a pass marked it, a later one evicted it
    assert later == evicted_after
    assert cache.on_filled is None  # the loop let go of the cache when it stopped

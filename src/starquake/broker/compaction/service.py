"""Topic compaction in the broker: triggering, status, the threshold monitor, and the
compacted views of topics as they are loaded and deleted.

A compaction is triggered by the admin API or, when the bytes added to a topic since its last
compaction pass its compaction threshold (the topic's or namespace's ``compaction_threshold``
policy, else ``brokerServiceCompactionThresholdInBytes``; 0 disables it), by a check every
``brokerServiceCompactionMonitorIntervalInSeconds``. One compaction runs per topic at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from starquake.broker import applied_policies
from starquake.broker.compaction.compactor import COMPACTION_CURSOR, Compactor, compaction_cursor
from starquake.broker.compaction.state import ERROR, RUNNING, SUCCESS
from starquake.broker.compaction.view import CompactedView
from starquake.broker.contexts import StorageContext
from starquake.broker.resources import ConflictError

if TYPE_CHECKING:
    from starquake.broker.topic import PersistentTopic

__all__ = ["CompactionService", "backlog_bytes"]

log = logging.getLogger(__name__)


def backlog_bytes(topic: PersistentTopic) -> int:
    """Bytes stored after the topic's compaction horizon (all of them before a compaction);
    for the ledger holding the horizon, its share of entries after it."""
    view = topic.compaction.view
    ledgers = topic.ledger.ledgers()
    if view is None:
        return sum(info.size_bytes for info in ledgers)
    horizon = view.horizon
    total = 0
    for info in ledgers:
        if info.ledger_id > horizon.ledger_id:
            total += info.size_bytes
        elif info.ledger_id == horizon.ledger_id and info.entries:
            after = info.entries - horizon.entry_id - 1
            total += info.size_bytes * max(after, 0) // info.entries
    return total


class CompactionContext(StorageContext, Protocol):
    """What the compactions read of the broker: its storage and its loaded topics."""

    @property
    def topics(self) -> Mapping[str, PersistentTopic]:
        """The loaded persistent topics by full name."""


class CompactionService:
    """The broker's compactions: at most one running per topic."""

    def __init__(self, service: CompactionContext) -> None:
        self.service = service
        self._jobs: dict[str, asyncio.Task[None]] = {}
        self._stopping = False

    # --- triggering ---------------------------------------------------------------------------

    def trigger(self, topic: PersistentTopic) -> None:
        """Start compacting ``topic``; ConflictError if a compaction of it is running."""
        state = topic.compaction
        if state.running or topic.full_name in self._jobs:
            raise ConflictError("Compaction already in progress")
        state.status = RUNNING
        state.last_error = ""
        task = asyncio.get_running_loop().create_task(self._run(topic))
        self._jobs[topic.full_name] = task
        task.add_done_callback(lambda done: self._forget_job(topic.full_name, done))

    def _forget_job(self, name: str, task: asyncio.Task[None]) -> None:
        if self._jobs.get(name) is task:
            del self._jobs[name]

    async def _run(self, topic: PersistentTopic) -> None:
        state = topic.compaction
        started = time.monotonic()
        log.info("compaction of %s started", topic.full_name)
        compactor = Compactor(self.service, topic, lambda: self._stopping or state.closed)
        try:
            view = await compactor.run()
        except Exception as exc:
            state.status = ERROR
            state.last_error = str(exc) or repr(exc)
            state.failed_at_ms = int(time.time() * 1000)
            if self._stopping or state.closed:
                log.info("compaction of %s stopped: the topic is closing", topic.full_name)
            else:
                log.error("compaction of %s failed: %s", topic.full_name, state.last_error)
        else:
            state.status = SUCCESS
            state.succeeded_at_ms = int(time.time() * 1000)
            state.removed_events = compactor.removed
            if view is None:
                log.info("compaction of %s: nothing new to compact", topic.full_name)
        finally:
            state.duration_ms = int((time.monotonic() - started) * 1000)

    async def _wait(self, name: str) -> None:
        task = self._jobs.get(name)
        if task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)

    # --- topic lifecycle ----------------------------------------------------------------------

    async def restore(self, topic: PersistentTopic) -> None:
        """Install the committed compacted view of a topic being loaded (and remove files of
        compactions that did not commit)."""
        await self._wait(topic.full_name)  # one still finishing for a previous instance
        compacted = await self.service.storage.compacted_ledgers.open_committed(topic.ledger)
        view = CompactedView(compacted) if compacted is not None else None
        if view is not None:
            topic.compaction.install(view)
            log.info(
                "compacted view of %s restored: ledger %d, %d entries up to %s",
                topic.full_name,
                view.ledger_id,
                view.entries,
                view.horizon,
            )
        self.pre_create_cursor(topic)

    def pre_create_cursor(self, topic: PersistentTopic) -> None:
        """As Pulsar does when a topic loads or its policies change: when a compaction
        threshold applies to ``topic`` (its or its namespace's ``compaction_threshold``, else
        ``brokerServiceCompactionThresholdInBytes``), create its ``__compaction`` subscription
        at the earliest position if missing, so that nothing published before the first
        automatic compaction is trimmed away before that compaction reads it."""
        if topic.closed or COMPACTION_CURSOR in topic.ledger.cursors:
            return
        if applied_policies.compaction_threshold(self.service, topic.name) > 0:
            compaction_cursor(topic)
            log.info("created the %s subscription of %s", COMPACTION_CURSOR, topic.full_name)

    async def forget(self, name: str) -> None:
        """A topic is being deleted: wait for its compaction to end, then delete its record
        (its compacted ledgers go with the managed ledger)."""
        await self._wait(name)
        await self.service.storage.compacted_ledgers.forget(name)

    async def stop(self) -> None:
        """Broker shutdown: running compactions give up before committing."""
        self._stopping = True
        for task in list(self._jobs.values()):
            with contextlib.suppress(Exception):
                await task

    # --- threshold monitor --------------------------------------------------------------------

    def check_thresholds(self) -> int:
        """Trigger the compaction of every loaded topic whose bytes since its last compaction
        exceed its compaction threshold; returns how many were triggered."""
        service = self.service
        triggered = 0
        for topic in list(service.topics.values()):
            if topic.closed or topic.compaction.running or topic.full_name in self._jobs:
                continue
            threshold = applied_policies.compaction_threshold(service, topic.name)
            if threshold > 0 and backlog_bytes(topic) > threshold:
                self.trigger(topic)
                triggered += 1
        return triggered

    async def monitor(self) -> None:
        """Check the thresholds every ``brokerServiceCompactionMonitorIntervalInSeconds``."""
        while True:
            await asyncio.sleep(self.service.config.brokerServiceCompactionMonitorIntervalInSeconds)
            try:
                self.check_thresholds()
            except Exception:
                log.exception("checking the compaction thresholds failed; retrying")

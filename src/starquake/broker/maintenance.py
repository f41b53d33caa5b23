"""The broker's periodic upkeep: rolling the stats windows, expiring messages by TTL, deleting
inactive topics, rolling idle ledgers over and trimming the consumed ones."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from starquake.broker import applied_policies, inactive_topics, system_topics, topic_stats
from starquake.broker.committer import GroupCommitter
from starquake.broker.inactive_topics import InactiveTopicsContext
from starquake.broker.ledger_storage import LedgerStorage
from starquake.broker.message_expiry import expire_older_than
from starquake.broker.observations import PublishLatency
from starquake.broker.topic import PersistentTopic
from starquake.storage import RetentionLimits

log = logging.getLogger("starquake.broker.service")


class MaintenanceContext(InactiveTopicsContext, Protocol):
    """What the upkeep reads and changes of the broker."""

    @property
    def topics(self) -> dict[str, PersistentTopic]:
        """The loaded persistent topics, by full name."""

    @property
    def committer(self) -> GroupCommitter:
        """The group committer (seals rolled-over ledgers, deletes trimmed ones)."""

    @property
    def publish_latency(self) -> PublishLatency:
        """The broker-wide publish latency histogram."""

    @property
    def storage(self) -> LedgerStorage:
        """Where the managed ledgers live (and their entry cache)."""

    async def persist_cursors(self) -> None:
        """Store every durable cursor change made so far."""


async def cache_eviction_loop(service: MaintenanceContext) -> None:
    """Every ``managedLedgerCacheEvictionIntervalMs``: evict the entries cached longer than
    ``managedLedgerCacheEvictionTimeThresholdMillis`` (0: no time limit). While nothing is
    cached (no consumer reads at the tail) it sleeps until an entry is: an idle or
    produce-only broker does not wake every 10 ms."""
    config = service.config
    cache = service.storage.cache
    filled = asyncio.Event()
    cache.on_filled = filled.set
    try:
        while True:
            if cache.empty:
                filled.clear()
                await filled.wait()
            await asyncio.sleep(config.managedLedgerCacheEvictionIntervalMs / 1000)
            threshold = config.managedLedgerCacheEvictionTimeThresholdMillis
            if threshold > 0:
                cache.evict_older_than(time.monotonic(), threshold / 1000)
    finally:
        cache.on_filled = None


async def stats_loop(service: MaintenanceContext) -> None:
    """Every ``statsUpdateFrequencyInSecs``: roll the rate and latency windows; (de)activate
    the cursors by their backlog."""
    while True:
        await asyncio.sleep(service.config.statsUpdateFrequencyInSecs)
        now = time.monotonic()
        threshold = service.config.managedLedgerCursorBackloggedThreshold
        for topic in service.all_topics():
            topic_stats.tick(topic, now)
            if isinstance(topic, PersistentTopic):
                topic.write_latency.tick()
                topic.entry_sizes.tick()
                check_backlogged_cursors(topic, threshold)
        service.publish_latency.tick()


def check_backlogged_cursors(topic: PersistentTopic, threshold: int) -> int:
    """As Pulsar does at each stats update: a subscription's cursor is active while it has a
    consumer and fewer than ``threshold`` entries left to read; otherwise new entries are not
    cached for it (it reads them from the files). Returns how many cursors are active."""
    active = 0
    last = topic.ledger.last_confirmed
    for subscription in list(topic.subscriptions.values()):
        cursor = subscription.cursor
        read = cursor.read_position
        to_read = topic.ledger.count_entries((read.ledger_id, read.entry_id - 1), last)
        if subscription.consumers and to_read < threshold:
            cursor.set_active()
            active += 1
        else:
            cursor.set_inactive()
    return active


async def expiry_loop(service: MaintenanceContext) -> None:
    """Every ``messageExpiryCheckIntervalInMinutes``: apply the message TTLs."""
    while True:
        await asyncio.sleep(service.config.messageExpiryCheckIntervalInMinutes * 60)
        try:
            if await expire_messages(service):
                await service.persist_cursors()
        except Exception:
            log.exception("expiring messages failed; retrying at the next check")


async def expire_messages(service: MaintenanceContext) -> int:
    """Apply the message TTLs: move durable subscriptions past expired messages."""
    moved = 0
    for topic in list(service.topics.values()):
        ttl = applied_policies.message_ttl(service, topic.name)
        if not ttl or system_topics.is_system_topic(topic.name):  # as Pulsar: no TTL there
            continue
        for subscription in list(topic.subscriptions.values()):
            if subscription.durable and await expire_older_than(subscription, ttl):
                moved += 1
    return moved


async def inactive_topics_loop(service: MaintenanceContext) -> None:
    """Every ``brokerDeleteInactiveTopicsFrequencySeconds``: delete inactive topics."""
    while True:
        await asyncio.sleep(service.config.brokerDeleteInactiveTopicsFrequencySeconds)
        try:
            await inactive_topics.delete_inactive_topics(service)
        except Exception:
            log.exception("deleting inactive topics failed; retrying at the next check")


async def trim_loop(service: MaintenanceContext) -> None:
    """Every ``managedLedgerTrimIntervalSeconds``: roll idle ledgers over, trim consumed ones."""
    while True:
        await asyncio.sleep(service.config.managedLedgerTrimIntervalSeconds)
        roll_over_ledgers(service)
        trim_ledgers(service)


def roll_over_ledgers(service: MaintenanceContext) -> int:
    """Apply the age rule to idle ledgers (appends apply it themselves)."""
    rolled = 0
    for topic in list(service.topics.values()):
        if topic.ledger.maybe_rollover():
            rolled += 1
    if rolled:
        service.committer.kick()  # seals the old ledgers
    return rolled


def trim_ledgers(service: MaintenanceContext) -> int:
    """Delete ledgers every durable subscription has consumed and the topic's retention
    policy no longer keeps; returns how many."""
    deleted = 0
    for topic in list(service.topics.values()):
        try:
            policy = applied_policies.retention(service, topic.name)
            limits = RetentionLimits(
                policy.time_minutes * 60 if policy.time_minutes >= 0 else -1,
                policy.size_mb * 1024 * 1024 if policy.size_mb >= 0 else -1,
            )
            deleted += topic.ledger.trim(limits, hold=topic.trim_hold())
            topic.forget_consumed_entry_infos()
        except Exception:
            log.exception("trimming %s failed", topic.full_name)
    if deleted:
        log.info("trimmed %d ledger(s)", deleted)
        service.committer.kick()  # the commit thread deletes the files
    return deleted

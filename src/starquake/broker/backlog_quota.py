"""Backlog quotas, enforced as Pulsar's BacklogQuotaManager enforces them.

A topic's backlog is measured from its slowest durable cursor (the one with the lowest
mark-delete position; readers' non-durable cursors never count, and with no durable cursor
there is no backlog). Two quota kinds apply (each resolved topic, then namespace, then
broker defaults by :func:`applied_policies.backlog_quota`):

- ``destination_storage``: exceeded when the estimated backlog size (bytes after the slowest
  mark-delete position, :meth:`ManagedLedger.estimated_size_after`) is at least ``limitSize``
  (a negative limit: no quota);
- ``message_age``: exceeded when the first entry after the slowest mark-delete position was
  published more than ``limitTime`` seconds ago (0 or less: no quota). This is Pulsar's
  behaviour with ``preciseTimeBasedBacklogQuotaCheck=true``; the estimate from ledger close
  times that Pulsar uses otherwise is not implemented.

Enforcement, by the quota's policy:

- On PRODUCER (:func:`check_producer`): with ``producer_request_hold`` the producer is refused
  with ``ProducerBlockedQuotaExceededError``, with ``producer_exception`` with
  ``ProducerBlockedQuotaExceededException``; ``consumer_backlog_eviction`` never refuses.
- Every ``backlogQuotaCheckIntervalInSeconds`` (when ``backlogQuotaCheckEnabled``; the size
  quota is checked first, the age quota only when the size is within its quota):
  ``producer_request_hold`` and ``producer_exception`` disconnect the topic's producers
  (CLOSE_PRODUCER), so that their reconnection meets the PRODUCER check;
  ``consumer_backlog_eviction`` moves cursors forward. For the size quota the slowest cursor
  skips entries (acknowledged or not) in proportion to the excess, aiming at 90 % of
  ``limitSize``; entries skipped this way are not counted as expired. For the age quota every
  durable subscription expires the messages published more than 90 % of ``limitTime`` ago
  (counted in ``totalMsgExpired``, as message TTL does; Pulsar expires its readers' messages
  too, which gains no space, so readers are left alone here).

System topics (``__change_events`` and the like) have no quota, as in Pulsar. Topic stats show
``backlogQuotaLimitSize``, ``backlogQuotaLimitTime`` (-1: no quota),
``oldestBacklogMessageAgeSeconds`` (-1: no backlog) and ``oldestBacklogMessageSubscriptionName``.

The ``__compaction`` cursor is a durable cursor of the topic's managed ledger, so, as in Pulsar,
it counts (and may be the slowest one, and be moved by eviction) like any subscription's.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from starquake.broker import applied_policies
from starquake.broker.applied_policies import BacklogQuota
from starquake.broker.contexts import PolicyContext
from starquake.broker.errors import BrokerServiceError
from starquake.broker.message_expiry import expire_older_than
from starquake.broker.policy_types import (
    DESTINATION_STORAGE,
    EVICTION,
    EXCEPTION,
    HOLD,
    MESSAGE_AGE,
)
from starquake.broker.system_topics import is_system_topic
from starquake.protocol.errors import ProtocolError, ServerError
from starquake.protocol.framing import entry_metadata
from starquake.storage import Entry, LedgerInfo, ManagedCursor, Position, read_at_hand

if TYPE_CHECKING:
    from starquake.broker.producer import Producer
    from starquake.broker.subscription import Subscription
    from starquake.common.topic_name import TopicName
    from starquake.storage import ManagedLedger

__all__ = [
    "BacklogQuotaExceededError",
    "check_all",
    "check_producer",
    "check_topic",
    "enforce",
    "exceeded",
    "load_oldest_backlog_entry",
    "monitor",
    "oldest_backlog_entry",
    "position_after",
    "size_backlog",
    "stats_fields",
]

log = logging.getLogger(__name__)

REDUCTION_FACTOR = 0.9
"""Eviction aims at this fraction of the quota, as Pulsar's does."""

_PRODUCER_ERRORS = {
    HOLD: ServerError.ProducerBlockedQuotaExceededError,
    EXCEPTION: ServerError.ProducerBlockedQuotaExceededException,
}


class QuotaTopic(Protocol):
    """What the quotas measure and act on in a persistent topic."""

    @property
    def name(self) -> TopicName:
        """The topic's name (its policies apply)."""

    @property
    def full_name(self) -> str:
        """The topic's full name."""

    @property
    def closed(self) -> bool:
        """Whether the topic was closed (unloaded or deleted)."""

    @property
    def ledger(self) -> ManagedLedger:
        """The topic's managed ledger (its cursors make the backlog)."""

    @property
    def producers(self) -> Mapping[int, Producer]:
        """The connected producers (disconnected by ``producer_exception``)."""

    @property
    def subscriptions(self) -> Mapping[str, Subscription]:
        """The subscriptions by name (woken when their cursor is moved)."""


class BacklogQuotaExceededError(BrokerServiceError):
    """A producer is refused because its topic is over a backlog quota (Pulsar's
    TopicBacklogQuotaExceededException); the code tells the client the policy."""

    def __init__(self, policy: str) -> None:
        super().__init__(
            "Cannot create producer on topic with backlog quota exceeded",
            _PRODUCER_ERRORS[policy],
        )
        self.policy = policy


# --- measuring ------------------------------------------------------------------------------


def _slowest_cursor(topic: QuotaTopic) -> ManagedCursor | None:
    cursors = topic.ledger.cursors.values()
    return min(cursors, key=lambda c: c.mark_delete_position, default=None)


def size_backlog(topic: QuotaTopic) -> int:
    """Estimated bytes of the topic's backlog: after its slowest durable cursor (0: none)."""
    cursor = _slowest_cursor(topic)
    if cursor is None:
        return 0
    return topic.ledger.estimated_size_after(cursor.mark_delete_position)


# Publish time of the first entry after a topic's slowest mark-delete position, by topic:
# (mark-delete position, publish time in ms). Reading it again only when the slowest
# mark-delete position moved keeps the periodic check to memory reads.
_oldest_cache: weakref.WeakKeyDictionary[QuotaTopic, tuple[Position, int]] = (
    weakref.WeakKeyDictionary()
)


def oldest_backlog_entry(topic: QuotaTopic) -> tuple[int, str] | None:
    """(publish time in ms, cursor name) of the oldest entry of the topic's backlog: the
    first entry after the slowest durable cursor's mark-delete position. None when there is
    no durable cursor or nothing after it, or when the entry is not known at once: it is then
    read meanwhile (producer admission and the stats cannot wait for a remote read; the
    periodic check awaits it, :func:`load_oldest_backlog_entry`)."""
    found = _oldest_wanted(topic)
    if not isinstance(found, _ToRead):
        return found
    cursor, mark_delete, position = found
    published: list[int | None] = []

    def read(entry: Entry | None) -> None:
        published.append(_remember_oldest(topic, mark_delete, entry))

    read_at_hand(topic.ledger.read_entry(position), read)
    published_ms = published[0] if published else None
    return None if published_ms is None else (published_ms, cursor.name)


async def load_oldest_backlog_entry(topic: QuotaTopic) -> tuple[int, str] | None:
    """As :func:`oldest_backlog_entry`, awaiting the read when it must wait."""
    found = _oldest_wanted(topic)
    if not isinstance(found, _ToRead):
        return found
    cursor, mark_delete, position = found
    published_ms = _remember_oldest(topic, mark_delete, await topic.ledger.read_entry(position))
    return None if published_ms is None else (published_ms, cursor.name)


class _ToRead(NamedTuple):
    """What to read for the oldest backlog entry."""

    cursor: ManagedCursor
    """The slowest durable cursor."""
    mark_delete: Position
    """Its mark-delete position."""
    position: Position
    """The entry after it."""


def _oldest_wanted(topic: QuotaTopic) -> tuple[int, str] | _ToRead | None:
    """The cached answer as (publish time, cursor name); or what to read for it; None if
    nothing is backlog."""
    cursor = _slowest_cursor(topic)
    if cursor is None:
        return None
    mark_delete = cursor.mark_delete_position
    cached = _oldest_cache.get(topic)
    if cached is not None and cached[0] == mark_delete:
        return cached[1], cursor.name
    ledger = topic.ledger
    position = ledger.next_position(mark_delete)
    if position > ledger.last_confirmed:
        return None
    return _ToRead(cursor, mark_delete, position)


def _remember_oldest(topic: QuotaTopic, mark_delete: Position, entry: Entry | None) -> int | None:
    """The publish time of ``entry`` (read after ``mark_delete``), cached; None if there is no
    entry or no readable metadata."""
    if entry is None:
        return None
    try:
        published = int(entry_metadata(entry.data).publish_time)
    except ProtocolError:
        return None
    _oldest_cache[topic] = (mark_delete, published)
    return published


def _size_exceeded(topic: QuotaTopic, quota: BacklogQuota) -> bool:
    return quota.limit_size >= 0 and size_backlog(topic) >= quota.limit_size


def _age_exceeded(topic: QuotaTopic, quota: BacklogQuota, now_ms: int) -> bool:
    if quota.limit_time <= 0:
        return False
    oldest = oldest_backlog_entry(topic)
    return oldest is not None and now_ms > oldest[0] + quota.limit_time * 1000


def _exempt(topic: QuotaTopic) -> bool:
    """Pulsar's system topics (``__change_events`` and the like) have no backlog quota."""
    return is_system_topic(topic.name)


def exceeded(service: PolicyContext, topic: QuotaTopic) -> tuple[str, BacklogQuota] | None:
    """The first quota the topic is over (size, then age) as (kind, quota), or None."""
    if _exempt(topic):
        return None
    quota = applied_policies.backlog_quota(service, topic.name, DESTINATION_STORAGE)
    if quota is not None and _size_exceeded(topic, quota):
        return DESTINATION_STORAGE, quota
    quota = applied_policies.backlog_quota(service, topic.name, MESSAGE_AGE)
    if quota is not None and _age_exceeded(topic, quota, int(time.time() * 1000)):
        return MESSAGE_AGE, quota
    return None


# --- producers ------------------------------------------------------------------------------


def check_producer(service: PolicyContext, topic: QuotaTopic) -> None:
    """Refuse a new producer (:class:`BacklogQuotaExceededError`) while the topic is over a
    quota whose policy holds or fails producers."""
    if _exempt(topic):
        return
    now_ms = int(time.time() * 1000)
    for kind in (DESTINATION_STORAGE, MESSAGE_AGE):
        quota = applied_policies.backlog_quota(service, topic.name, kind)
        if quota is None or quota.policy not in _PRODUCER_ERRORS:
            continue
        if kind == DESTINATION_STORAGE:
            over = _size_exceeded(topic, quota)
        else:
            over = _age_exceeded(topic, quota, now_ms)
        if over:
            raise BacklogQuotaExceededError(quota.policy)


# --- the periodic check ---------------------------------------------------------------------


def position_after(ledgers: Sequence[LedgerInfo], position: Position, count: int) -> Position:
    """The position ``count`` entries after ``position`` over ``ledgers`` (every stored
    entry counts, acknowledged or not); the last entry when fewer follow. ``position`` may
    lie in a deleted ledger (before every stored one)."""
    result = position
    remaining = count
    for info in ledgers:
        if info.ledger_id < position.ledger_id or not info.entries:
            continue
        first = position.entry_id + 1 if info.ledger_id == position.ledger_id else 0
        available = info.entries - first
        if available <= 0:
            continue
        if remaining <= available:
            return Position(info.ledger_id, first + remaining - 1)
        remaining -= available
        result = Position(info.ledger_id, info.entries - 1)
    return result


def _wake(topic: QuotaTopic, cursor: ManagedCursor) -> None:
    subscription = topic.subscriptions.get(cursor.name)
    if subscription is not None and subscription.dispatcher is not None:
        subscription.dispatcher.schedule()


def _evict_by_size(topic: QuotaTopic, quota: BacklogQuota) -> bool:
    """Skip entries on the slowest cursor until the backlog is at most 90 % of the quota;
    True if a cursor moved."""
    ledger = topic.ledger
    target = REDUCTION_FACTOR * quota.limit_size
    backlog = size_backlog(topic)
    previous: ManagedCursor | None = None
    moved = False
    while backlog > target:
        cursor = _slowest_cursor(topic)
        if cursor is None or cursor is previous:
            break
        mark_delete = cursor.mark_delete_position
        entries = ledger.count_entries(mark_delete, ledger.last_confirmed)
        skip = int((backlog - target) / backlog * entries)
        if skip <= 0:
            break
        cursor.mark_delete(position_after(ledger.ledgers(), mark_delete, skip))
        _wake(topic, cursor)
        log.info(
            "backlog quota of %s exceeded (%d bytes, limit %d): subscription %s skipped %d entries",
            topic.full_name,
            backlog,
            quota.limit_size,
            cursor.name,
            skip,
        )
        moved = True
        previous = cursor
        backlog = size_backlog(topic)
    return moved


async def _evict_by_age(topic: QuotaTopic, quota: BacklogQuota) -> bool:
    """Expire, on every durable subscription, the messages published more than 90 % of the
    quota's time ago; True if a cursor moved."""
    seconds = int(REDUCTION_FACTOR * quota.limit_time)
    expired = [
        s.name
        for s in list(topic.subscriptions.values())
        if s.durable and await expire_older_than(s, seconds)
    ]
    if expired:
        log.info(
            "backlog quota of %s exceeded (messages older than %d s): expired messages older "
            "than %d s on %s",
            topic.full_name,
            quota.limit_time,
            seconds,
            ", ".join(expired),
        )
    return bool(expired)


def _disconnect_producers(topic: QuotaTopic, kind: str, policy: str) -> None:
    producers = list(topic.producers.values())
    if not producers:
        return
    log.info(
        "backlog quota %s of %s exceeded: applying %s, disconnecting %d producer(s)",
        kind,
        topic.full_name,
        policy,
        len(producers),
    )
    for producer in producers:
        producer.disconnect()


async def enforce(topic: QuotaTopic, kind: str, quota: BacklogQuota) -> bool:
    """Apply ``quota``'s policy to a topic over it; True if a durable cursor moved."""
    if quota.policy == EVICTION:
        if kind == DESTINATION_STORAGE:
            return _evict_by_size(topic, quota)
        return await _evict_by_age(topic, quota)
    _disconnect_producers(topic, kind, quota.policy)
    return False


async def check_topic(service: PolicyContext, topic: QuotaTopic) -> bool:
    """Check one topic against its quotas and enforce them; True if a durable cursor moved."""
    if not _exempt(topic) and applied_policies.backlog_quota(service, topic.name, MESSAGE_AGE):
        await load_oldest_backlog_entry(topic)  # the age check below then has it at hand
    found = exceeded(service, topic)
    if found is None:
        return False
    return await enforce(topic, *found)


class BacklogContext(PolicyContext, Protocol):
    """What the periodic check reads of the broker: the policies and the loaded topics, and
    where it stores the cursors it moved."""

    @property
    def topics(self) -> Mapping[str, QuotaTopic]:
        """The loaded persistent topics by full name."""

    async def persist_cursors(self) -> None:
        """Store every durable cursor change made so far."""


async def check_all(service: BacklogContext) -> bool:
    """Check every loaded persistent topic; True if a durable cursor moved."""
    moved = False
    for topic in list(service.topics.values()):
        if topic.closed:
            continue
        try:
            moved |= await check_topic(service, topic)
        except Exception:
            log.exception("backlog quota check of %s failed", topic.full_name)
    return moved


async def monitor(service: BacklogContext) -> None:
    """The periodic check (started by the service); moved cursors are stored at once."""
    interval = service.config.backlogQuotaCheckIntervalInSeconds
    if not service.config.backlogQuotaCheckEnabled:
        return
    while True:
        await asyncio.sleep(interval)
        try:
            if await check_all(service):
                await service.persist_cursors()
        except Exception:
            log.exception("backlog quota check failed; retrying at the next interval")


# --- stats ----------------------------------------------------------------------------------


def stats_fields(service: PolicyContext, topic: QuotaTopic) -> dict[str, Any]:
    """The backlog quota fields of Pulsar's TopicStats: the limits that apply (-1: none) and
    the age of the oldest backlog message (-1 when there is none)."""
    size = applied_policies.backlog_quota(service, topic.name, DESTINATION_STORAGE)
    age = applied_policies.backlog_quota(service, topic.name, MESSAGE_AGE)
    fields: dict[str, Any] = {
        "backlogQuotaLimitSize": size.limit_size if size is not None else -1,
        "backlogQuotaLimitTime": age.limit_time if age is not None else -1,
        "oldestBacklogMessageAgeSeconds": -1,
    }
    oldest = oldest_backlog_entry(topic)
    if oldest is not None:
        published, cursor_name = oldest
        fields["oldestBacklogMessageAgeSeconds"] = max(int(time.time() - published / 1000), 0)
        fields["oldestBacklogMessageSubscriptionName"] = cursor_name
    return fields

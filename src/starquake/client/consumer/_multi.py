"""The consumer the API hands out: one or more :class:`ConsumerImpl` behind one queue.

A single non-partitioned topic has one inner consumer; a partitioned topic one per partition;
a topic list or a regex subscription one per partition of every topic. Regex subscriptions
re-list the namespace every ``pattern_auto_discovery_period`` seconds and follow new and
deleted topics (the pattern must fully match the topic name, as in the official clients).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re

from starquake.client.base._config import ConsumerConfig
from starquake.client.base._enums import ConsumerType, InitialPosition, RegexSubscriptionMode
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import Message, MessageId
from starquake.client.consumer._consumer import ConsumerImpl
from starquake.client.consumer._dlq import DeadLetterHandler
from starquake.client.consumer._subscribe import is_latest
from starquake.client.core._handler import ClientCore
from starquake.client.core._partition_updates import PartitionWatcher
from starquake.client.core._queue import MessageQueue
from starquake.client.core._transaction import Transaction
from starquake.client.exceptions import (
    ConsumerBusy,
    InvalidConfiguration,
    OperationNotSupported,
    PulsarException,
)
from starquake.client.producer._send_ops import partition_topic
from starquake.client.wire._pool import LookupService
from starquake.common.topic_name import TopicName

log = logging.getLogger(CLIENT_LOGGER_NAME)

_MODES = {
    RegexSubscriptionMode.PersistentOnly: 0,
    RegexSubscriptionMode.NonPersistentOnly: 1,
    RegexSubscriptionMode.AllTopics: 2,
}


def normalize_topic(topic: str) -> str:
    """The fully qualified name of ``topic``."""
    return str(TopicName.parse(topic))


async def create_subscription(core: ClientCore, topic: str, subscription: str) -> None:
    """Create ``subscription`` on ``topic`` (every partition), from the earliest message, if
    it does not exist yet: subscribe once and close."""
    config = ConsumerConfig(
        consumer_type=ConsumerType.Shared,
        receiver_queue_size=0,
        initial_position=InitialPosition.Earliest,
    )
    front = ConsumerFront(core, [topic], subscription, config)
    try:
        await front.start()
    except ConsumerBusy:  # it exists, with an exclusive consumer attached
        return
    await front.close()


class ConsumerFront:
    """A consumer (or reader) over any number of topic partitions."""

    def __init__(
        self,
        core: ClientCore,
        topics: list[str],
        subscription: str,
        config: ConsumerConfig,
        *,
        pattern: re.Pattern[str] | None = None,
        start_message_id: MessageId | None = None,
        consumer_name: str | None = None,
    ) -> None:
        self._core = core
        self.subscription = subscription
        self._config = config
        self._pattern = pattern
        self._start = start_message_id
        self._consumer_name = consumer_name
        self._topics = [normalize_topic(t) for t in topics]
        self.dead_letter: DeadLetterHandler | None = None
        if config.dead_letter_policy is not None or config.enable_retry:
            first = self._topics[0] if self._topics else self._pattern_topic()
            self.dead_letter = DeadLetterHandler(
                core,
                first,
                subscription,
                config.dead_letter_policy,
                enable_retry=config.enable_retry,
                retry_letter_topic=config.retry_letter_topic,
                create_subscription=functools.partial(create_subscription, core),
            )
            retry = self.dead_letter.retry_letter_topic
            if retry is not None and retry not in self._topics:
                self._topics.append(retry)
        self.queue: MessageQueue = core.queue_factory()
        self.consumers: dict[str, ConsumerImpl] = {}
        self._partitions: dict[str, list[str]] = {}
        self._watchers: dict[str, PartitionWatcher] = {}
        self._discovery: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def config(self) -> ConsumerConfig:
        """The configuration this consumer (or reader) was made with."""
        return self._config

    @property
    def has_fixed_topics(self) -> bool:
        """Whether the inner consumers never change after starting (no pattern to follow)."""
        return self._pattern is None

    @property
    def lookup(self) -> LookupService:
        """The client's lookup service (schemas of the topics read are fetched through it)."""
        return self._core.lookup

    @property
    def topic(self) -> str:
        """The topic (or pattern, or comma-joined topics) this consumer reads."""
        if self._pattern is not None:
            return self._pattern.pattern
        return ",".join(self._topics)

    @property
    def consumer_name(self) -> str:
        first = next(iter(self.consumers.values()), None)
        return first.consumer_name if first else (self._config.consumer_name or "")

    # --- start / topics ---------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe to every topic (raises, after cleaning up, if any subscription fails)."""
        try:
            if self._pattern is not None:
                self._topics = await self._discover()
            counts = await asyncio.gather(
                *(self._core.lookup.get_partitioned_metadata(t) for t in self._topics)
            )
            total = sum(max(n, 1) for n in counts)
            for topic, count in zip(self._topics, counts, strict=True):
                await self._add_topic(topic, count, total)
        except BaseException:
            await self.close()
            raise
        if self._pattern is not None and self._config.pattern_auto_discovery_period > 0:
            self._discovery = self._core.spawn(self._discovery_loop())

    def _queue_size(self, total_partitions: int) -> int:
        size = self._config.receiver_queue_size
        if total_partitions > 1:
            cap = self._config.max_total_receiver_queue_size_across_partitions // total_partitions
            size = max(1, min(size, cap))
        return size

    async def _add_topic(
        self, topic: str, num_partitions: int, total: int, first_partition: int = 0
    ) -> None:
        """Subscribe to ``topic`` (its partitions from ``first_partition`` on)."""
        indexes = range(first_partition, num_partitions) if num_partitions else range(1)
        names = [partition_topic(topic, i) if num_partitions else topic for i in indexes]
        subs = [
            ConsumerImpl(
                self._core,
                name,
                self.subscription,
                self._config,
                self.queue,
                partition=i if num_partitions else -1,
                queue_size=self._queue_size(total),
                start_message_id=self._start,
                consumer_name=self._consumer_name,
                dead_letter=self.dead_letter,
            )
            for i, name in zip(indexes, names, strict=True)
        ]
        self._partitions[topic] = self._partitions.get(topic, []) + names
        if num_partitions and first_partition == 0:
            self._watch(topic, num_partitions)
        for sub in subs:
            self.consumers[sub.topic] = sub
        results = await asyncio.gather(*(s.start() for s in subs), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    def _watch(self, topic: str, num_partitions: int) -> None:
        async def grown(known: int, now: int) -> None:
            total = len(self.consumers) + now - known
            await self._add_topic(topic, now, total, first_partition=known)

        watcher = PartitionWatcher(self._core, topic, num_partitions, grown)
        self._watchers[topic] = watcher
        watcher.start()

    async def _remove_topic(self, topic: str) -> None:
        watcher = self._watchers.pop(topic, None)
        if watcher is not None:
            watcher.stop()
        for name in self._partitions.pop(topic, []):
            sub = self.consumers.pop(name, None)
            if sub is not None:
                await sub.close()

    def _pattern_topic(self) -> str:
        """A topic name standing for the pattern (names the default DLQ / retry topics)."""
        assert self._pattern is not None
        text = self._pattern.pattern
        if "://" not in text:
            text = (
                f"persistent://public/default/{text}" if "/" not in text else f"persistent://{text}"
            )
        return re.sub(r"[^\w./:-]", "", text)

    def _namespace_and_regex(self) -> tuple[str, int, re.Pattern[str]]:
        """The namespace to list, the listing mode, and the pattern over names without their
        scheme: as the official clients do, the pattern's own scheme is ignored and
        ``regex_subscription_mode`` alone chooses persistent and/or non-persistent topics."""
        assert self._pattern is not None
        text = _without_scheme(self._pattern.pattern)
        if "/" not in text:
            text = f"public/default/{text}"
        parts = text.split("/")
        if len(parts) < 3:
            raise InvalidConfiguration(f"pattern {self._pattern.pattern!r} names no namespace")
        return (
            f"{parts[0]}/{parts[1]}",
            _MODES[self._config.regex_subscription_mode],
            re.compile(text, self._pattern.flags),
        )

    async def _discover(self) -> list[str]:
        namespace, mode, regex = self._namespace_and_regex()
        found = await self._core.lookup.get_topics_of_namespace(namespace, mode)
        bases: dict[str, None] = {}
        for name in found:
            base = str(TopicName.parse(name).partitioned_topic_name)
            if regex.fullmatch(_without_scheme(base)) or regex.fullmatch(_without_scheme(name)):
                bases[base] = None
        retry = self.dead_letter.retry_letter_topic if self.dead_letter is not None else None
        if retry is not None:
            bases[retry] = None
        return list(bases)

    async def _discovery_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._config.pattern_auto_discovery_period)
            try:
                await self.rediscover()
            except PulsarException as exc:
                log.warning("topic discovery for %s failed: %s", self.topic, exc)

    async def rediscover(self) -> None:
        """Re-list the namespace now; subscribe to new matches, drop vanished topics."""
        current = set(await self._discover())
        known = set(self._partitions)
        for topic in sorted(current - known):
            count = await self._core.lookup.get_partitioned_metadata(topic)
            await self._add_topic(topic, count, max(count, 1) + len(self.consumers))
            log.info("pattern %s: subscribed to new topic %s", self.topic, topic)
        for topic in sorted(known - current):
            await self._remove_topic(topic)

    # --- receive ----------------------------------------------------------------------------

    async def receive(self, max_wait: float | None = None) -> Message:
        """Next message (waits at most ``max_wait`` seconds, then raises Timeout)."""
        msg = await self.queue.get(max_wait)
        owner: ConsumerImpl = msg.received_by
        owner.on_dequeued(msg)
        return msg

    async def batch_receive(
        self, max_messages: int, max_bytes: int, timeout_ms: int
    ) -> list[Message]:
        """Messages as soon as ``max_messages`` / ``max_bytes`` are there, or at the timeout."""
        timeout = timeout_ms / 1000 if timeout_ms > 0 else None
        messages = await self.queue.get_batch(max_messages, max_bytes, timeout)
        for msg in messages:
            msg.received_by.on_dequeued(msg)
        return messages

    # --- acks -------------------------------------------------------------------------------

    def route(self, target: Message | MessageId) -> tuple[ConsumerImpl, MessageId]:
        """The inner consumer a message (id) belongs to."""
        if isinstance(target, Message):
            owner = target.received_by
            if isinstance(owner, ConsumerImpl) and owner.topic in self.consumers:
                return owner, target.message_id()
            target = target.message_id()
        if len(self.consumers) == 1:
            return next(iter(self.consumers.values())), target
        name = target.topic_name()
        if name is not None:
            name = normalize_topic(name)
            if name in self.consumers:
                return self.consumers[name], target
            if target.partition() >= 0:
                candidate = partition_topic(name, target.partition())
                if candidate in self.consumers:
                    return self.consumers[candidate], target
        if target.partition() >= 0 and len(self._partitions) == 1:
            names = next(iter(self._partitions.values()))
            if target.partition() < len(names):
                return self.consumers[names[target.partition()]], target
        raise OperationNotSupported(f"cannot tell which topic message id {target} belongs to")

    def acknowledge(self, target: Message | MessageId) -> None:
        consumer, mid = self.route(target)
        consumer.acknowledge(mid)

    def acknowledge_cumulative(self, target: Message | MessageId) -> None:
        consumer, mid = self.route(target)
        consumer.acknowledge_cumulative(mid)

    async def acknowledge_in_txn(
        self, target: Message | MessageId, txn: Transaction, cumulative: bool
    ) -> None:
        """Acknowledge ``target`` (up to it: ``cumulative``) in ``txn``."""
        consumer, mid = self.route(target)
        await consumer.acknowledge_in_txn(mid, txn, cumulative)

    def negative_acknowledge(self, target: Message | MessageId) -> None:
        consumer, mid = self.route(target)
        count = target.redelivery_count() if isinstance(target, Message) else 0
        consumer.negative_acknowledge(mid, count)

    async def reconsume_later(
        self, msg: Message, delay_ms: int, properties: dict[str, str] | None
    ) -> None:
        """Republish ``msg`` to the retry letter topic, then acknowledge it."""
        if self.dead_letter is None or self.dead_letter.retry_letter_topic is None:
            raise InvalidConfiguration("reconsume_later needs a consumer with enable_retry=True")
        consumer, mid = self.route(msg)
        await self.dead_letter.reconsume_later(msg, delay_ms, properties)
        consumer.acknowledge(mid)

    def redeliver_unacknowledged_messages(self) -> None:
        for consumer in self.consumers.values():
            consumer.redeliver_unacknowledged_messages()

    # --- requests ---------------------------------------------------------------------------

    async def seek(self, target: MessageId | int) -> None:
        """Seek every inner consumer (a message id of one partition seeks only that one)."""
        if isinstance(target, MessageId) and target.partition() >= 0 and len(self.consumers) > 1:
            consumer, mid = self.route(target)
            await consumer.seek(mid)
            return
        await asyncio.gather(*(c.seek(target) for c in self.consumers.values()))

    async def get_last_message_id(self) -> MessageId:
        if len(self.consumers) != 1:
            raise OperationNotSupported("get_last_message_id needs a single-topic consumer")
        return await next(iter(self.consumers.values())).get_last_message_id()

    async def has_message_available(self) -> bool:
        """Reader semantics: is there a message after the last one handed out?"""
        for consumer in self.consumers.values():
            if consumer.has_queued_messages():
                return True
        for consumer in self.consumers.values():
            if await _has_more(consumer, self._config.start_message_id_inclusive):
                return True
        return False

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self.consumers.values()))
        await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        discovery, self._discovery = self._discovery, None
        if discovery is not None:
            discovery.cancel()
            # wait for it to end, so that no pending task is left behind when the loop stops
            await asyncio.gather(discovery, return_exceptions=True)
        for watcher in self._watchers.values():
            watcher.stop()
        await asyncio.gather(*(c.close() for c in self.consumers.values()), return_exceptions=True)
        if self.dead_letter is not None:
            await self.dead_letter.close()
        self.queue.close()

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        return all(c.connected for c in self.consumers.values())


async def _has_more(consumer: ConsumerImpl, inclusive: bool) -> bool:
    last, mark_delete = await consumer.last_and_mark_delete()
    start = consumer.start_message_id
    if last.entry_id() < 0:
        return False
    ref = consumer.last_dequeued
    if ref is not None:
        return last > ref
    if consumer.seeking_by_time:  # as the official client: is anything after the broker's cursor?
        return mark_delete is not None and last.entry_key > mark_delete.entry_key
    if start is None or start.ledger_id() < 0:
        return True
    if consumer.latest_at_start is not None:
        return last > consumer.latest_at_start
    if is_latest(start):
        return await _has_more_after_latest(consumer, inclusive, last, mark_delete)
    return last >= start if inclusive else last > start


async def _has_more_after_latest(
    consumer: ConsumerImpl, inclusive: bool, last: MessageId, mark_delete: MessageId | None
) -> bool:
    """After a seek to ``latest``, before anything was read: as in Pulsar, the subscription's
    mark-delete position (where the seek put it) against the last message, not the
    messages the broker has dispatched so far. Inclusive readers move to the last message."""
    if inclusive:
        await consumer.seek(last)
        return True
    if mark_delete is None:
        return False
    return (mark_delete.ledger_id(), mark_delete.entry_id()) < (last.ledger_id(), last.entry_id())


def _without_scheme(name: str) -> str:
    """``tenant/namespace/topic`` of ``persistent://tenant/namespace/topic`` (and of a pattern
    written with a scheme)."""
    _, sep, rest = name.partition("://")
    return rest if sep else name

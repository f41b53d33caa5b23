"""What every dispatcher shares: the consumer list, scheduling and entry preparation.

A dispatcher moves entries from its subscription's cursor to consumers that have permits.
``schedule()`` coalesces the many triggers (flow, new entries, acks, redelivery requests) into
one dispatch pass per event-loop iteration. A pass is a coroutine because the managed ledger's
reads are: it starts in the caller's frame (:func:`~starquake.common.eager.start_eagerly`), and
with reads that do not suspend (the file backend's) it ends there too, costing no task. A read
that does suspend (remote storage) makes the pass go on in a task; while it is in flight
(Pulsar's ``havePendingRead``) no other pass starts: triggers meanwhile only ask for one more
pass after it. After every read a pass checks again what the wait may have changed: the
dispatcher closed, the cursor moved (the cursor's read then returns nothing), a reset
(``epoch``), consumers gone or given permits.

A consumer is *blocked* when its unacknowledged messages reach
``maxUnackedMessagesPerConsumer``; it is unblocked when they fall to half of that (Pulsar's rule).
The limits are the applied policies (topic, then namespace, then broker): read when the
dispatcher is made, and refreshed when a policy changes (:mod:`starquake.broker.policy_events`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from starquake.broker import applied_policies
from starquake.broker.consumer import Dispatch
from starquake.broker.entry_info import EntryInfo
from starquake.common.eager import start_eagerly
from starquake.storage import Entry, Position

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.contexts import PolicyContext
    from starquake.broker.delayed_delivery import InMemoryDelayedDeliveryTracker
    from starquake.broker.entry_info import EntryInfoCache
    from starquake.common.topic_name import TopicName
    from starquake.storage import ManagedCursor, ManagedLedger

log = logging.getLogger(__name__)


class DispatchedTopic(Protocol):
    """What a dispatcher reads of its subscription's topic."""

    @property
    def name(self) -> TopicName:
        """The topic's name."""

    @property
    def service(self) -> PolicyContext:
        """Where the topic's applied policies come from."""

    @property
    def ledger(self) -> ManagedLedger:
        """The topic's managed ledger."""

    @property
    def entry_infos(self) -> EntryInfoCache:
        """The parsed metadata of the topic's entries."""

    @property
    def terminated(self) -> Position | None:
        """Where the topic was terminated (None: open)."""

    @property
    def partition_index(self) -> int:
        """The partition's index (-1: not a partition)."""


class DispatchedSubscription(Protocol):
    """What a dispatcher reads and calls of the subscription it serves."""

    @property
    def topic(self) -> DispatchedTopic:
        """The subscription's topic."""

    @property
    def cursor(self) -> ManagedCursor:
        """The subscription's cursor."""

    @property
    def redelivery_counts(self) -> dict[Position, int]:
        """How often each unacknowledged position was redelivered."""

    @property
    def delayed_tracker(self) -> InMemoryDelayedDeliveryTracker | None:
        """The messages held back until their delivery time (None: delayed delivery off)."""

    def check_end_of_topic(self) -> None:
        """Tell the consumers once a terminated topic is consumed to its end."""

    def read_entries(
        self, max_entries: int, *, compacted: bool = False, max_bytes: int | None = None
    ) -> Coroutine[Any, Any, list[Entry]]:
        """Read the next entries at the cursor (the compacted view's with ``compacted``), at
        most ``max_bytes`` of them (at least one entry)."""

    def read_back(self, entry: Entry) -> None:
        """Put ``entry``, read but not sent, back before the next read."""

    def rewind(self) -> None:
        """Move the read position back to the first unacknowledged entry."""

    def held(self) -> bool:
        """Whether reading waits at the topic's max read position (an open transaction)."""

    def held_in_txn(self, position: Position) -> bool:
        """Whether an open transaction acknowledged ``position`` (not dispatched meanwhile)."""


class Dispatcher:
    """Base class; subclasses implement :meth:`dispatch` and :meth:`redeliver`."""

    def __init__(self, subscription: DispatchedSubscription, max_read_batch: int) -> None:
        self.subscription = subscription
        self.consumers: list[Consumer] = []
        self.max_read_batch = max_read_batch
        topic = subscription.topic
        config = topic.service.config
        self.max_read_bytes: int = config.dispatcherMaxReadSizeBytes
        """Bytes of entries read per round at most (beyond them by one entry at most)."""
        # the applied policies (topic, namespace, broker); refreshed when a policy changes
        self.max_unacked_per_consumer = applied_policies.max_unacked_per_consumer(
            topic.service, topic.name
        )
        self.max_unacked_per_subscription = applied_policies.max_unacked_per_subscription(
            topic.service, topic.name
        )
        self.subscription_blocked = False
        # Unacked messages of all consumers: summed at the start of a pass and after a read
        # during which acknowledgments came (``acks`` moved), kept up to date by send() in
        # between, so can_receive() is O(1).
        self._unacked_total = 0
        self.batch_index_ack = config.acknowledgmentAtBatchIndexLevelEnabled
        self._scheduled = False
        self._in_flight: asyncio.Task[None] | None = None
        """The pass waiting for a read (None: no read pending)."""
        self._again = False
        self._failures = 0
        """Passes failed in a row (their retries back off)."""
        self._retry: asyncio.TimerHandle | None = None
        """The pass retried after a failure, while one is due."""
        self.epoch = 0
        """Counts resets: what a pass read before one is stale."""
        self.acks = 0
        """Counts acknowledgments: entries read before one may be acknowledged by now."""
        self.closed = False
        self.messages_per_entry: float | None = None
        """Messages per entry of the last read: how many entries the permits can take (None:
        nothing read yet)."""

    # --- consumers ----------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Take a consumer in and dispatch to it."""
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Let a consumer go and dispatch to the others."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.schedule()

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        """Add a consumer's FLOW permits, then dispatch."""
        consumer.permits += permits
        self.schedule()

    def can_receive(self, consumer: Consumer) -> bool:
        """Permits left and not blocked by an unacknowledged-message limit."""
        if consumer.permits <= 0:
            return False
        sub_limit = self.max_unacked_per_subscription
        if sub_limit > 0:
            total = self._unacked_total
            if self.subscription_blocked:
                if total > sub_limit // 2:
                    return False
                self.subscription_blocked = False
            elif total >= sub_limit:
                self.subscription_blocked = True
                return False
        limit = self.max_unacked_per_consumer
        if limit > 0:
            if consumer.blocked:
                if consumer.unacked > limit // 2:
                    return False
                consumer.blocked = False
            elif consumer.unacked >= limit:
                consumer.blocked = True
                return False
        return True

    def entry_done(self, position: Position) -> None:
        """An entry dispatched to a consumer was acknowledged or handed back."""

    def on_acked(self, consumer: Consumer) -> None:
        """Acks arrived from ``consumer``: it may be below its unacked limit again."""
        self.acks += 1
        if consumer.blocked or self.subscription_blocked:
            self.schedule()

    # --- triggers ----------------------------------------------------------------------------

    def schedule(self) -> None:
        """Run :meth:`dispatch` soon (once, however often this is called before it runs)."""
        if self._scheduled or self.closed:
            return
        self._scheduled = True
        try:
            asyncio.get_running_loop().call_soon(self._run)
        except RuntimeError:  # no running loop (synchronous tests): dispatch now
            self._run()

    def _run(self) -> None:
        self._scheduled = False
        if self.closed:
            return
        if self._in_flight is not None:
            self._again = True  # one more pass once the pending read is done
            return
        if self.max_unacked_per_subscription > 0:
            self._unacked_total = sum(c.unacked for c in self.consumers)
        try:
            task = start_eagerly(self.dispatch())
        except Exception as exc:  # the read failed before it had to wait
            self._failed(exc)
            return
        if task is None:  # no read waited: the pass is over
            self._passed()
        else:
            self._in_flight = task
            task.add_done_callback(self._pass_done)

    def _passed(self) -> None:
        self._failures = 0
        self._after_pass()

    def _failed(self, exc: BaseException) -> None:
        """Retry the pass after a backoff, as Pulsar's dispatchers retry failed reads (logged
        once per run of failures): a read may fail for a while (an I/O error, no descriptor
        left) and the subscription must go on once it works again."""
        self._failures += 1
        config = self.subscription.topic.service.config
        delay = (
            min(
                config.dispatcherReadFailureBackoffInitialTimeInMs
                * 2 ** min(self._failures - 1, 20),
                config.dispatcherReadFailureBackoffMaxTimeInMs,
            )
            / 1000
        )
        if self._failures == 1:
            log.warning(
                "dispatch of %s failed: %s (retrying in %.0f s, backing off while it fails)",
                self.subscription.topic.name,
                exc,
                delay,
            )
        if self._retry is None:  # one retry at a time, however many triggers fail meanwhile
            self._retry = asyncio.get_running_loop().call_later(delay, self._retry_pass)

    def _retry_pass(self) -> None:
        self._retry = None
        self.schedule()

    def _after_pass(self) -> None:
        if not self.closed and self.subscription.topic.terminated is not None:
            self.subscription.check_end_of_topic()

    def _pass_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight = None
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            self._failed(exc)
        else:
            self._passed()
        if self._again:
            self._again = False
            self.schedule()

    def recount(self) -> None:
        """Sum the consumers' unacknowledged messages (acks may have come during a read)."""
        if self.max_unacked_per_subscription > 0:
            self._unacked_total = sum(c.unacked for c in self.consumers)

    def send(self, consumer: Consumer, items: list[Dispatch]) -> None:
        """Dispatch ``items`` to ``consumer``, keeping the subscription's unacked total."""
        before = consumer.unacked
        consumer.send_entries(items)
        self._unacked_total += consumer.unacked - before

    def send_plan(self, plan: dict[int, tuple[Consumer, list[Dispatch]]]) -> bool:
        """Send what a pass assigned: permits were charged while planning, so give them back
        first (send_entries charges them again); returns whether anything was sent."""
        for consumer, items in plan.values():
            consumer.permits += sum(item[2] for item in items)
            self.send(consumer, items)
        return bool(plan)

    async def dispatch(self) -> None:
        """Send what the consumers have permits for (each subscription type decides how)."""
        raise NotImplementedError

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Send ``positions`` (all of the consumer's unacked entries when None) again."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget dispatch state after the cursor moved (seek); consumers start over."""
        self.epoch += 1
        for consumer in self.consumers:
            for position in consumer.take_pending():
                self.entry_done(position)
        self.schedule()

    def close(self) -> None:
        """Stop dispatching."""
        self.closed = True

    # --- helpers -----------------------------------------------------------------------------

    def entries_to_read(self, permits: int) -> int:
        """How many entries to read for ``permits`` messages: as many as the permits can take
        at the messages per entry of the last read, at most ``max_read_batch`` (the estimate
        of Pulsar's ``preciseDispatcherFlowControl``). The Shared dispatcher always reads so:
        its consumers are sent what their permits take whatever it reads, and the entries read
        past them were put back unsent (on a backlog that is not in the entry cache, read from
        the files again, round after round). Before the first read one entry tells how large
        they are (the pass reads on)."""
        per_entry = self.messages_per_entry
        if per_entry is None:
            return 1
        wanted = permits if per_entry <= 1.0 else -int(-permits // per_entry)
        return max(1, min(wanted, self.max_read_batch))

    def note_read(self, entries: int, messages: int) -> None:
        """A read brought ``entries`` entries holding ``messages`` messages."""
        if entries:
            self.messages_per_entry = messages / entries

    def info(self, entry: Entry) -> EntryInfo:
        """What the broker needs to know of a stored entry (cached per topic)."""
        return self.subscription.topic.entry_infos.get(entry.position, entry.data)

    def prepared(self, consumer: Consumer, entry: Entry, info: EntryInfo) -> Dispatch:
        """The dispatch tuple of an entry going to ``consumer``: redelivery count and remaining
        batch ack set (a chunk of a chunked message is counted for the consumer's stats)."""
        if info.chunk_uuid:
            consumer.chunk_counter += 1
        position = entry.position
        ack_set = None
        if self.batch_index_ack and info.num_messages > 1:
            ack_set = self.subscription.cursor.get_batch_ack_set(position)
        count = self.subscription.redelivery_counts.get(position, 0)
        return (position, entry.data, info.num_messages, count, ack_set)

    def note_redelivered(self, positions: list[Position]) -> None:
        """Count one more delivery of each of these positions."""
        counts = self.subscription.redelivery_counts
        for position in positions:
            counts[position] = counts.get(position, 0) + 1

"""A consumer attached to a subscription: its permits and the entries it holds unacknowledged."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from starquake.broker.entry_info import LastMessage
from starquake.broker.rates import RateWindow
from starquake.protocol.commands import message_frame_header
from starquake.protocol.enums import SubType
from starquake.storage import Position


class ConsumerTransport(Protocol):
    """What a consumer needs from its connection (ServerCnx implements it)."""

    def write_frames(self, frames: list[bytes | memoryview]) -> None:
        """Queue several frames to the client."""
        ...

    def write(self, frame: bytes) -> None:
        """Queue one frame to the client."""
        ...

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Close ``consumer`` from the broker side."""
        ...

    def pending_write_bytes(self) -> int:
        """Bytes written to the connection that the peer has not taken yet."""
        ...

    @property
    def remote_address(self) -> str:
        """The client's address, ``host:port``."""
        ...

    @property
    def client_version(self) -> str:
        """The client library and version announced in CONNECT."""
        ...


class SubscribedTopic(Protocol):
    """What the connection reads, through a consumer's subscription, of its topic."""

    @property
    def full_name(self) -> str:
        """The topic's full name (``persistent://tenant/namespace/topic``)."""

    @property
    def partition_index(self) -> int:
        """The partition's index, or -1 for a topic that is not a partition."""

    @property
    def is_persistent(self) -> bool:
        """Whether messages are stored (``persistent://``)."""

    async def last_message_position(self) -> LastMessage:
        """The position of the last message and its batch index."""

    def batch_size_of(self, position: Position) -> int | None:
        """How many messages the entry at ``position`` holds (None: not known at once)."""

    def unsubscribe(self, name: str) -> None:
        """Delete a subscription that has no connected consumers."""


class DispatcherApi(Protocol):
    """The dispatcher calls a connection makes."""

    @property
    def consumers(self) -> list[Consumer]:
        """The consumers the dispatcher sends to."""

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        """Add permits that a consumer's FLOW grants, then dispatch."""

    def schedule(self) -> None:
        """Dispatch soon (once per loop iteration however often it is asked)."""


class SubscriptionApi(Protocol):
    """A subscription as connections see it."""

    @property
    def name(self) -> str:
        """The subscription's name."""

    @property
    def durable(self) -> bool:
        """Whether the subscription's cursor survives a restart."""

    @property
    def topic(self) -> SubscribedTopic:
        """The topic the subscription belongs to."""

    @property
    def consumers(self) -> list[Consumer]:
        """The connected consumers."""

    @property
    def dispatcher(self) -> DispatcherApi | None:
        """The dispatcher of the current subscription type; None before any consumer."""

    last_consumed_flow_timestamp: int
    """When a consumer last asked for messages (epoch milliseconds; 0: never)."""

    expired_counter: int
    """Messages expired by the message TTL."""

    expiry_rates: RateWindow
    """The rate of messages expired by the message TTL."""

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer (raises if its type or limits forbid it)."""

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unacknowledged messages go to others."""

    def acknowledge_individual(self, consumer: Consumer, positions: Sequence[Position]) -> None:
        """Acknowledge these messages one by one."""

    def acknowledge_batch_index(
        self, consumer: Consumer, position: Position, ack_set: Sequence[int], batch_size: int
    ) -> None:
        """Acknowledge some messages of a batch (``ack_set``: those left)."""

    def acknowledge_cumulative(self, consumer: Consumer, position: Position) -> None:
        """Acknowledge everything up to and including ``position``."""

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Send again a consumer's unacknowledged messages (all of them if None)."""

    def backlog(self) -> int:
        """How many messages wait to be acknowledged."""


# (position, entry bytes, messages in the entry, redelivery count, batch ack set or None)
Dispatch = tuple[Position, bytes | memoryview, int, int, Sequence[int] | None]


class Consumer:
    """One consumer: flow-control permits and the entries dispatched to it but not yet acked.

    ``pending_acks`` maps each dispatched entry's position to the number of its messages still
    unacknowledged; it is how a leaving consumer's unacked messages are found for redelivery and
    what ``maxUnackedMessagesPerConsumer`` counts.
    """

    __slots__ = (
        "ack_rates",
        "allow_out_of_order",
        "avg_messages_per_entry",
        "blocked",
        "bytes_out_counter",
        "chunk_counter",
        "chunk_rates",
        "cnx",
        "connected_since",
        "consumer_id",
        "key_hash_ranges",
        "last_acked_timestamp",
        "last_consumed_flow_timestamp",
        "last_consumed_timestamp",
        "metadata",
        "msg_ack_counter",
        "msg_out_counter",
        "msg_redeliver_counter",
        "name",
        "partition_index",
        "pending_acks",
        "permits",
        "priority_level",
        "rates",
        "read_compacted",
        "read_position_when_joining",
        "redeliver_rates",
        "sub_type",
        "subscription",
        "unacked",
    )

    def __init__(
        self,
        subscription: SubscriptionApi,
        cnx: ConsumerTransport,
        consumer_id: int,
        name: str,
        sub_type: SubType,
        priority_level: int,
        partition_index: int,
    ) -> None:
        self.subscription = subscription
        self.cnx = cnx
        self.consumer_id = consumer_id
        self.name = name
        self.sub_type = sub_type
        self.priority_level = priority_level
        self.partition_index = partition_index
        self.permits = 0
        self.pending_acks: dict[Position, int] = {}
        self.unacked = 0
        self.blocked = False
        self.msg_out_counter = 0
        self.bytes_out_counter = 0
        self.rates = RateWindow()
        self.msg_redeliver_counter = 0
        """Messages this consumer asked to have redelivered."""
        self.redeliver_rates = RateWindow()
        self.msg_ack_counter = 0
        """Messages this consumer acknowledged (outside transactions)."""
        self.ack_rates = RateWindow()
        self.chunk_counter = 0
        """Chunks of chunked messages dispatched to this consumer."""
        self.chunk_rates = RateWindow()
        self.read_compacted = False
        self.connected_since = time.time()
        self.key_hash_ranges: list[tuple[int, int]] | None = None
        self.allow_out_of_order = False
        self.read_position_when_joining: Position | None = None
        self.metadata: dict[str, str] = {}
        # For the stats, as Pulsar keeps them (epoch milliseconds; 0: never): when messages
        # were last dispatched, acknowledged, and asked for (FLOW); and a moving average of
        # the messages per dispatched entry, updated once per dispatch.
        self.last_consumed_timestamp = 0
        self.last_acked_timestamp = 0
        self.last_consumed_flow_timestamp = 0
        self.avg_messages_per_entry = 0.0

    def rate_figures(self, now: float) -> dict[str, float]:
        """The consumer's rates under the names of Pulsar's consumer stats (the admin API's and
        the binary protocol's CONSUMER_STATS answer)."""
        rate, throughput = self.rates.rates(now, self.msg_out_counter, self.bytes_out_counter)
        redeliver, _ = self.redeliver_rates.rates(now, self.msg_redeliver_counter, 0)
        acks, _ = self.ack_rates.rates(now, self.msg_ack_counter, 0)
        return {
            "msgRateOut": rate,
            "msgThroughputOut": throughput,
            "msgRateRedeliver": redeliver,
            "messageAckRate": acks,
        }

    @property
    def unacked_messages(self) -> int:
        """Messages dispatched to this consumer and not acknowledged yet."""
        return self.unacked

    def send_entries(self, entries: Sequence[Dispatch]) -> None:
        """Dispatch stored entries as MESSAGE frames in one write, charging their message counts."""
        frames: list[bytes | memoryview] = []
        append = frames.append
        pending = self.pending_acks
        consumer_id = self.consumer_id
        partition = self.partition_index
        sent = 0
        size = 0
        for position, data, num_messages, redelivery_count, ack_set in entries:
            append(
                message_frame_header(
                    consumer_id,
                    position.ledger_id,
                    position.entry_id,
                    len(data),
                    redelivery_count,
                    partition,
                    ack_set or (),
                )
            )
            append(data)
            previous = pending.get(position)
            if previous is not None:
                self.unacked -= previous
            pending[position] = num_messages
            sent += num_messages
            size += len(data)
        # Charge the permits before writing: a write that crosses the connection's high-water
        # mark holds back the consumer's remaining permits at once, and those must not
        # include the ones these messages use.
        self.permits -= sent
        self.unacked += sent
        self.msg_out_counter += sent
        self.bytes_out_counter += size
        if entries:
            self.dispatched(sent / len(entries))
        self.cnx.write_frames(frames)

    def dispatched(self, messages_per_entry: float) -> None:
        """Entries went to the client (``messages_per_entry`` on average): note the time and
        fold the figure into the average, weighting the newest dispatch by 0.9 (as Pulsar)."""
        self.last_consumed_timestamp = int(time.time() * 1000)
        average = self.avg_messages_per_entry
        if average < 1:  # no dispatch yet
            self.avg_messages_per_entry = messages_per_entry
        else:
            self.avg_messages_per_entry = round(average * 0.1 + messages_per_entry * 0.9)

    def acked(self, position: Position) -> bool:
        """Forget ``position`` (acknowledged); True if it was pending here."""
        count = self.pending_acks.pop(position, None)
        if count is None:
            return False
        self.unacked -= count
        return True

    def partially_acked(self, position: Position, remaining: int) -> None:
        """Some messages of the batch at ``position`` were acknowledged; ``remaining`` are not."""
        count = self.pending_acks.get(position)
        if count is not None and remaining < count:
            self.pending_acks[position] = remaining
            self.unacked -= count - remaining

    def take_pending(self, positions: Sequence[Position] | None = None) -> list[Position]:
        """Remove and return pending positions (all when ``positions`` is None)."""
        pending = self.pending_acks
        chosen = list(pending) if positions is None else [p for p in positions if p in pending]
        for position in chosen:
            self.unacked -= pending.pop(position)
        return chosen

    def count_redelivery(self, positions: Sequence[Position] | None) -> None:
        """Count the messages a redelivery request covers (those still pending here)."""
        if positions is None:
            self.msg_redeliver_counter += self.unacked
        else:
            pending = self.pending_acks
            self.msg_redeliver_counter += sum(pending.get(p, 0) for p in positions)

    def clear_pending(self) -> None:
        """Forget every pending entry (they are redelivered elsewhere)."""
        self.pending_acks.clear()
        self.unacked = 0

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, id={self.consumer_id}, sub={self.subscription.name!r})"

"""A consumer attached to a subscription: its permits and the entries it holds unacknowledged."""

from __future__ import annotations

import time
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

from starquake.protocol.commands import message_frame_header
from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.subscription import Subscription


class SubType(IntEnum):
    """Subscription types, numbered as on the wire."""

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3


class ConsumerTransport(Protocol):
    """What a consumer needs from its connection (ServerCnx implements it)."""

    def write_frames(self, frames: list[bytes]) -> None: ...

    def write(self, frame: bytes) -> None: ...

    def disconnect_consumer(self, consumer: Consumer) -> None: ...

    @property
    def remote_address(self) -> str: ...


class Consumer:
    """One consumer: flow-control permits and the entries dispatched to it but not yet acked.

    ``pending_acks`` maps each dispatched entry's position to its message count; it is how a
    leaving consumer's unacked messages are found for redelivery.
    """

    __slots__ = (
        "cnx",
        "connected_since",
        "consumer_id",
        "msg_out_counter",
        "name",
        "partition_index",
        "pending_acks",
        "permits",
        "priority_level",
        "read_compacted",
        "sub_type",
        "subscription",
    )

    def __init__(
        self,
        subscription: Subscription,
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
        self.msg_out_counter = 0
        self.read_compacted = False
        self.connected_since = time.time()

    @property
    def unacked_messages(self) -> int:
        return sum(self.pending_acks.values())

    def send_entries(self, entries: list[tuple[Position, bytes, int, int]]) -> None:
        """Dispatch stored entries as MESSAGE frames in one write, charging their message counts.

        Each item is ``(position, entry bytes, number of messages, redelivery count)``.
        """
        frames: list[bytes] = []
        append = frames.append
        pending = self.pending_acks
        consumer_id = self.consumer_id
        partition = self.partition_index
        sent = 0
        for position, data, num_messages, redelivery_count in entries:
            append(
                message_frame_header(
                    consumer_id,
                    position.ledger_id,
                    position.entry_id,
                    len(data),
                    redelivery_count,
                    partition,
                )
            )
            append(data)
            pending[position] = num_messages
            sent += num_messages
        self.cnx.write_frames(frames)
        self.permits -= sent
        self.msg_out_counter += sent

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, id={self.consumer_id}, sub={self.subscription.name!r})"

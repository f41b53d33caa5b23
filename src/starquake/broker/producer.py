"""A producer attached to a topic through one connection."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias

from starquake.broker.rates import RateWindow
from starquake.protocol import commands
from starquake.protocol.errors import ServerError

if TYPE_CHECKING:
    from starquake.broker.entry_info import EntryInfo
    from starquake.broker.transactions.buffer import TopicTransactionBuffer
    from starquake.storage import Position

RunEntry: TypeAlias = "tuple[int, int, EntryInfo, bytes, bool]"
"""An entry to publish with others: sequence id, highest sequence id, info, the entry, and
whether it is the last chunk of its message."""


class ProducerTransport(Protocol):
    """What a producer needs from its connection (ServerCnx implements it)."""

    def write(self, frame: bytes) -> None:
        """Queue one frame to the client."""
        ...

    def receipt_sent(self, producer_id: int) -> None:
        """A send of ``producer_id`` is answered (receipt or error)."""
        ...

    def receipts_sent(self, producer_id: int, count: int) -> None:
        """The ``count`` oldest sends of ``producer_id`` awaiting receipts are answered."""
        ...

    def disconnect_producer(self, producer: Producer) -> None:
        """Close ``producer`` from the broker side."""
        ...

    @property
    def remote_address(self) -> str:
        """The client's address, ``host:port``."""
        ...

    @property
    def client_version(self) -> str:
        """The client library and version announced in CONNECT."""
        ...


class ProducerTopic(Protocol):
    """What the connection uses, through a producer, of the topic it writes to."""

    @property
    def full_name(self) -> str:
        """The topic's full name (``persistent://tenant/namespace/topic``)."""

    def last_sequence_id(self, producer_name: str) -> int:
        """The last sequence id stored for a producer name (-1: none)."""

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        info: EntryInfo,
        entry: bytes,
        *,
        last_chunk: bool = True,
    ) -> Position | None:
        """Store or hand on a message (its position; None: not stored here); its receipt goes
        to the producer when done."""

    @property
    def takes_runs(self) -> bool:
        """:meth:`publish_run` may be used now (nothing checks each entry on its own)."""

    def publish_run(self, producer: Producer, run: Sequence[RunEntry]) -> None:
        """:meth:`publish` each entry of ``run``, in order, in one call (the SENDs of one read);
        every entry is stored, or none (the error is raised)."""

    @property
    def txn(self) -> TopicTransactionBuffer | None:
        """The topic's transaction buffer (None: no transactions on this topic)."""

    def remove_producer(self, producer: Producer) -> None:
        """Forget a producer that closed or disconnected."""


class Producer:
    """A producer: its id on the connection, its name and the topic it writes to."""

    __slots__ = (
        "access_mode",
        "attached",
        "bytes_in_counter",
        "chunk_counter",
        "chunk_rates",
        "closed",
        "cnx",
        "connected_since",
        "epoch",
        "msg_in_counter",
        "name",
        "producer_id",
        "rates",
        "schema_version",
        "topic",
    )

    def __init__(
        self,
        topic: ProducerTopic,
        cnx: ProducerTransport,
        producer_id: int,
        name: str,
        access_mode: int,
        epoch: int,
    ) -> None:
        self.topic = topic
        self.cnx = cnx
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.epoch = epoch
        self.closed = False
        self.attached = False
        """Admitted by its topic and not removed since (a WaitForExclusive producer waits
        unattached): only then are its SENDs taken."""
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.connected_since = time.time()
        self.rates = RateWindow()
        self.chunk_counter = 0
        """Chunks of chunked messages published (as Pulsar counts them: each chunk)."""
        self.chunk_rates = RateWindow()
        self.schema_version = b""

    def on_receipt(self, frame: bytes) -> None:
        """Send a SEND_RECEIPT frame (unless the producer closed meanwhile)."""
        self.cnx.receipt_sent(self.producer_id)
        if not self.closed:
            self.cnx.write(frame)

    def on_receipts(self, frames: bytes, count: int) -> None:
        """Send ``count`` SEND_RECEIPT frames (``frames``, back to back) of the oldest sends
        awaiting them, in order (unless the producer closed meanwhile)."""
        self.cnx.receipts_sent(self.producer_id, count)
        if not self.closed:
            self.cnx.write(frames)

    def on_send_error(self, sequence_id: int, code: ServerError, message: str) -> None:
        """Answer the send ``sequence_id`` with SEND_ERROR (unless the producer closed)."""
        self.cnx.receipt_sent(self.producer_id)
        if not self.closed:
            self.cnx.write(commands.send_error(self.producer_id, sequence_id, code, message))

    def disconnect(self) -> None:
        """Close this producer from the broker side (the client re-creates it)."""
        self.cnx.disconnect_producer(self)

    def __repr__(self) -> str:
        return f"Producer({self.name!r}, id={self.producer_id}, topic={self.topic.full_name!r})"

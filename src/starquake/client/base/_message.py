"""Message ids and received messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from starquake.protocol.wire import pb

__all__ = ["Message", "MessageId"]

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1


def _signed(value: int) -> int:
    return value - _U64 if value > _I64_MAX else value


class MessageId:
    """Where a message is stored: ledger, entry, partition and index inside a batch.

    ``serialize()`` produces the same bytes as the official client (a ``MessageIdData``), so ids
    can be stored by one client and used by the other.
    """

    __slots__ = (
        "_batch_index",
        "_batch_size",
        "_chunk_ids",
        "_entry_id",
        "_first_chunk",
        "_ledger_id",
        "_partition",
        "_service",
        "_topic",
    )

    earliest: ClassVar[MessageId]
    latest: ClassVar[MessageId]

    def __init__(
        self, partition: int = -1, ledger_id: int = -1, entry_id: int = -1, batch_index: int = -1
    ) -> None:
        for value, bits in ((partition, 32), (ledger_id, 64), (entry_id, 64), (batch_index, 32)):
            if not isinstance(value, int) or not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
                raise TypeError(  # as the official client's binding
                    "MessageId(): incompatible constructor arguments: expected (int32 partition, "
                    "int64 ledger_id, int64 entry_id, int32 batch_index), got "
                    f"{(partition, ledger_id, entry_id, batch_index)!r}"
                )
        self._partition = partition
        self._ledger_id = ledger_id
        self._entry_id = entry_id
        self._batch_index = batch_index
        self._batch_size = 0
        self._topic: str | None = None
        self._first_chunk: MessageId | None = None
        self._chunk_ids: tuple[MessageId, ...] = ()
        # which of the client's clusters delivered the message (-1: not known)
        self._service = -1

    def ledger_id(self) -> int:
        """The ledger id."""
        return self._ledger_id

    def entry_id(self) -> int:
        """The entry id within the ledger."""
        return self._entry_id

    def batch_index(self) -> int:
        """Index of the message inside its batch, or -1."""
        return self._batch_index

    def partition(self) -> int:
        """Partition index, or -1 for a non-partitioned topic."""
        return self._partition

    def topic_name(self, topic: str | None = None) -> str | None:
        """Get (or, with an argument, set) the topic the id belongs to (multi-topic use)."""
        if topic is not None:
            self._topic = topic
        return self._topic

    # --- internal helpers ---------------------------------------------------------------------

    @property
    def service(self) -> int:
        """Which of the client's clusters delivered the message (-1: not known): after a
        cluster switch the same ledger and entry ids name other messages."""
        return self._service

    @property
    def batch_size(self) -> int:
        """Number of messages in the batch this id points into (0 when unknown)."""
        return self._batch_size

    @classmethod
    def from_parts(
        cls,
        ledger_id: int,
        entry_id: int,
        partition: int = -1,
        batch_index: int = -1,
        batch_size: int = 0,
        topic: str | None = None,
        service: int = -1,
    ) -> MessageId:
        """An id from its parts, as the broker reports them (a hot path: no checks);
        ``service`` numbers the cluster it came from (see ``ClientCore.service``)."""
        mid = object.__new__(cls)  # the fields of __init__, set once
        mid._partition = partition
        mid._ledger_id = ledger_id
        mid._entry_id = entry_id
        mid._batch_index = batch_index
        mid._batch_size = batch_size
        mid._topic = topic
        mid._first_chunk = None
        mid._chunk_ids = ()
        mid._service = service
        return mid

    @classmethod
    def from_chunks(cls, chunks: list[MessageId], topic: str | None = None) -> MessageId:
        """The id of a message sent in chunks: the last chunk's position, remembering them all.

        As the official ``ChunkMessageIdImpl``: acknowledging it acknowledges every chunk.
        """
        last = chunks[-1]
        mid = cls.from_parts(
            last._ledger_id, last._entry_id, last._partition, topic=topic, service=last._service
        )
        mid._first_chunk = chunks[0]
        mid._chunk_ids = tuple(chunks)
        return mid

    @property
    def first_chunk_message_id(self) -> MessageId | None:
        """For a chunked message, the id of its first chunk (None otherwise)."""
        return self._first_chunk

    @property
    def chunk_message_ids(self) -> tuple[MessageId, ...]:
        """Every chunk's id (the id itself for an ordinary message)."""
        if self._chunk_ids:
            return self._chunk_ids
        if self._first_chunk is not None:
            return (self._first_chunk, self)
        return (self,)

    @classmethod
    def from_proto(
        cls, data: pb.MessageIdData, partition: int | None = None, topic: str | None = None
    ) -> MessageId:
        """Build from a wire ``MessageIdData`` (``partition`` overrides the field when given)."""
        part = data.partition if data.HasField("partition") else -1
        mid = cls.from_parts(
            _signed(data.ledgerId),
            _signed(data.entryId),
            part if partition is None else partition,
            data.batch_index if data.HasField("batch_index") else -1,
            data.batch_size if data.HasField("batch_size") else 0,
            topic,
        )
        if data.HasField("first_chunk_message_id"):
            first = cls.from_proto(data.first_chunk_message_id, partition, topic)
            mid._first_chunk = first
            mid._chunk_ids = (first, mid.plain())
        return mid

    def plain(self) -> MessageId:
        """This id without its chunk information."""
        if self._first_chunk is None:
            return self
        return MessageId.from_parts(
            self._ledger_id,
            self._entry_id,
            self._partition,
            topic=self._topic,
            service=self._service,
        )

    def to_proto(self, *, with_batch: bool = True) -> pb.MessageIdData:
        """The wire ``MessageIdData``; ``with_batch=False`` names the whole entry."""
        data = pb.MessageIdData(ledgerId=self._ledger_id % _U64, entryId=self._entry_id % _U64)
        if self._partition >= 0:
            data.partition = self._partition
        if with_batch:
            if self._batch_index >= 0:
                data.batch_index = self._batch_index
            if self._batch_size > 0:
                data.batch_size = self._batch_size
        return data

    @property
    def entry_key(self) -> tuple[int, int]:
        """``(ledger_id, entry_id)``: identifies the stored entry."""
        return (self._ledger_id, self._entry_id)

    def _order_key(self) -> tuple[int, int, int]:
        return (self._ledger_id, self._entry_id, self._batch_index)

    # --- serialization ------------------------------------------------------------------------

    def serialize(self) -> bytes:
        """Bytes that :meth:`deserialize` (ours or the official client's) turns back into the id.

        A chunked message's id is its last chunk's, with the first chunk's id in
        ``first_chunk_message_id`` (the official client's layout).
        """
        data = self.to_proto()
        if self._first_chunk is not None:
            data.first_chunk_message_id.CopyFrom(self._first_chunk.to_proto())
        return data.SerializeToString()

    @staticmethod
    def deserialize(message_id_bytes: bytes, topic: str | None = None) -> MessageId:
        """Parse bytes made by :meth:`serialize` (or by the official client)."""
        data = pb.MessageIdData.FromString(bytes(message_id_bytes))
        return MessageId.from_proto(data, topic=topic)

    @classmethod
    def wrap(cls, msg_id: Any) -> MessageId:
        """The id ``msg_id`` stands for, as this class: the official client wraps its C
        extension's ids so; here any id with ``serialize()`` (ours, or one of the official
        client's) is taken over."""
        if isinstance(msg_id, MessageId):
            return msg_id
        serialize = getattr(msg_id, "serialize", None)
        if not callable(serialize):
            raise TypeError(f"cannot wrap {type(msg_id).__name__} as a MessageId")
        return cls.deserialize(serialize())

    # --- comparisons --------------------------------------------------------------------------

    def __str__(self) -> str:
        text = f"({self._ledger_id},{self._entry_id},{self._partition},{self._batch_index})"
        if self._first_chunk is not None:  # the official client prints "first;last"
            return f"{self._first_chunk};{text}"
        return text

    def __repr__(self) -> str:
        return f"MessageId{self}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._order_key() == other._order_key() and self._partition == other._partition

    def __hash__(self) -> int:
        return hash((self._ledger_id, self._entry_id, self._batch_index, self._partition))

    def __lt__(self, other: MessageId) -> bool:
        return self._order_key() < other._order_key()

    def __le__(self, other: MessageId) -> bool:
        return self._order_key() <= other._order_key()

    def __gt__(self, other: MessageId) -> bool:
        return self._order_key() > other._order_key()

    def __ge__(self, other: MessageId) -> bool:
        return self._order_key() >= other._order_key()


MessageId.earliest = MessageId(-1, -1, -1, -1)
MessageId.latest = MessageId(-1, _I64_MAX, _I64_MAX, -1)


class Message:
    """A message: received from a consumer or reader, or handed to a custom message router."""

    __slots__ = (
        "_consumer",
        "_data",
        "_encryption_context",
        "_event_timestamp",
        "_message_id",
        "_null_value",
        "_ordering_key",
        "_partition_key",
        "_producer_name",
        "_properties",
        "_publish_timestamp",
        "_redelivery_count",
        "_schema_version",
        "_topic_name",
        "_value_decoder",
    )

    def __init__(
        self,
        data: bytes,
        *,
        properties: dict[str, str] | None = None,
        partition_key: str = "",
        ordering_key: bytes = b"",
        publish_timestamp: int = 0,
        event_timestamp: int = 0,
        message_id: MessageId | None = None,
        topic_name: str = "",
        redelivery_count: int = 0,
        producer_name: str = "",
        schema_version: bytes = b"",
        null_value: bool = False,
        consumer: Any = None,
    ) -> None:
        self._data = data
        self._properties = properties if properties is not None else {}
        self._partition_key = partition_key
        self._ordering_key = ordering_key
        self._publish_timestamp = publish_timestamp
        self._event_timestamp = event_timestamp
        self._message_id = message_id if message_id is not None else MessageId()
        self._topic_name = topic_name
        self._redelivery_count = redelivery_count
        self._producer_name = producer_name
        self._schema_version = schema_version
        self._null_value = null_value
        self._consumer = consumer
        self._value_decoder: Any = None
        self._encryption_context: Any = None

    @classmethod
    def from_wire(
        cls,
        meta: pb.MessageMetadata,
        single: pb.SingleMessageMetadata | None,
        data: bytes,
        msg_id: MessageId,
        redelivery: int,
        consumer: Any,
        encryption: Any = None,
    ) -> Message:
        """A message from a MESSAGE command (``single``: its entry in a batch, if batched)."""
        own: pb.MessageMetadata | pb.SingleMessageMetadata = meta if single is None else single
        msg = cls(
            data,
            properties={kv.key: kv.value for kv in own.properties},
            partition_key=own.partition_key,
            ordering_key=own.ordering_key,
            publish_timestamp=meta.publish_time,
            event_timestamp=own.event_time,
            message_id=msg_id,
            topic_name=consumer.topic,
            redelivery_count=redelivery,
            producer_name=meta.producer_name,
            schema_version=meta.schema_version,
            null_value=own.null_value,
            consumer=consumer,
        )
        msg._encryption_context = encryption
        return msg

    @classmethod
    def from_wire_batch(
        cls,
        meta: pb.MessageMetadata,
        entries: list[tuple[pb.SingleMessageMetadata, bytes, MessageId]],
        redelivery: int,
        consumer: Any,
        encryption: Any = None,
    ) -> list[Message]:
        """The messages of one batch (:meth:`from_wire` for each, reading ``meta`` once)."""
        publish_time = meta.publish_time
        producer_name = meta.producer_name
        schema_version = meta.schema_version
        topic = consumer.topic
        messages: list[Message] = []
        append = messages.append
        for single, data, msg_id in entries:
            msg = object.__new__(cls)
            msg._data = data
            props = single.properties
            msg._properties = {kv.key: kv.value for kv in props} if props else {}
            msg._partition_key = single.partition_key
            msg._ordering_key = single.ordering_key
            msg._publish_timestamp = publish_time
            msg._event_timestamp = single.event_time
            msg._message_id = msg_id
            msg._topic_name = topic
            msg._redelivery_count = redelivery
            msg._producer_name = producer_name
            msg._schema_version = schema_version
            msg._null_value = single.null_value
            msg._consumer = consumer
            msg._value_decoder = None
            msg._encryption_context = encryption
            append(msg)
        return messages

    def data(self) -> bytes:
        """The payload bytes."""
        return self._data

    # --- internal helpers (not in the official client) ----------------------------------------

    @property
    def received_by(self) -> Any:
        """The consumer (one topic or partition) that received the message, or None."""
        return self._consumer

    @property
    def ordering_key_bytes(self) -> bytes:
        """The ordering key as sent (b"" when unset)."""
        return self._ordering_key

    def set_value_decoder(self, decoder: Callable[[bytes], Any] | None) -> None:
        """Make :meth:`value` decode the payload with ``decoder`` (None: the bytes themselves)."""
        self._value_decoder = decoder

    # --- the official client's accessors -----------------------------------------------------

    def encryption_context(self) -> Any:
        """The :class:`EncryptionContext` of an encrypted message (whether decrypted or not),
        or None if the message was not encrypted."""
        return self._encryption_context

    def value(self) -> Any:
        """The payload decoded by the consumer's schema (the bytes themselves by default)."""
        if self._value_decoder is not None:
            return self._value_decoder(self._data)
        return self._data

    def properties(self) -> dict[str, str]:
        """Application-defined properties."""
        return self._properties

    def partition_key(self) -> str:
        """The partition key ("" when unset)."""
        return self._partition_key

    def ordering_key(self) -> str:
        """The ordering key ("" when unset), as the official client returns it."""
        return self._ordering_key.decode("utf-8", "surrogateescape")

    def publish_timestamp(self) -> int:
        """Publish time in milliseconds since the epoch."""
        return self._publish_timestamp

    def event_timestamp(self) -> int:
        """Event time in milliseconds (0 when unset)."""
        return self._event_timestamp

    def message_id(self) -> MessageId:
        """The id of this message."""
        return self._message_id

    def topic_name(self) -> str:
        """The topic (partition) the message came from."""
        return self._topic_name

    def redelivery_count(self) -> int:
        """How many times the broker delivered this message before."""
        return self._redelivery_count

    def schema_version(self) -> str:
        """The schema version as the official client hands it over: its 8 bytes (a big-endian
        number) as a str ("" when none). The bytes are :meth:`schema_version_bytes`."""
        raw = self._schema_version
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:  # versions of 128 and up: one char per byte
            return raw.decode("latin-1")

    def schema_version_bytes(self) -> bytes:
        """The schema version bytes (b"" when none)."""
        return self._schema_version

    def producer_name(self) -> str:
        """Name of the producer that published the message."""
        return self._producer_name

    def has_null_value(self) -> bool:
        """True for a null-value (tombstone) message."""
        return self._null_value

    def __repr__(self) -> str:
        return f"Message(id={self._message_id}, topic={self._topic_name!r}, size={len(self._data)})"

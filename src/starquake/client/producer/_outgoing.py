"""Messages on their way to the broker: the message built from ``send``, its metadata, batches.

A batch container gathers batched messages (one batch per key with key-based batching)
until they are full or the publish delay passed; the producer then sends each batch as one
entry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starquake.client.base._config import ProducerConfig
from starquake.client.base._enums import BatchingType
from starquake.client.base._message import MessageId
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.client.core._transaction import Transaction


@dataclass(slots=True)
class OutgoingMessage:
    """A message on its way to the broker (built from the ``send`` arguments)."""

    content: bytes | None
    properties: dict[str, str] = field(default_factory=dict)
    partition_key: str | None = None
    ordering_key: bytes | None = None
    sequence_id: int | None = None
    event_timestamp: int | None = None
    deliver_at: int | None = None
    replication_clusters: list[str] | None = None
    disable_replication: bool = False
    txn: Transaction | None = None
    """The transaction the message is sent in (None: none)."""

    @property
    def size(self) -> int:
        return len(self.content or b"")

    @property
    def key(self) -> str | bytes | None:
        return self.ordering_key if self.ordering_key else self.partition_key


def now_ms() -> int:
    """The wall clock in milliseconds (publish times)."""
    return int(time.time() * 1000)


def single_metadata(msg: OutgoingMessage, seq: int, size: int) -> pb.SingleMessageMetadata:
    """The per-message metadata of ``msg`` inside a batch."""
    single = pb.SingleMessageMetadata(payload_size=size, sequence_id=seq)
    _set_message_fields(single, msg)
    return single


def _set_message_fields(
    meta: pb.MessageMetadata | pb.SingleMessageMetadata, msg: OutgoingMessage
) -> None:
    """The fields a message's metadata and its metadata inside a batch have in common."""
    for k, v in msg.properties.items():
        meta.properties.add(key=k, value=v)
    if msg.partition_key is not None:
        meta.partition_key = msg.partition_key
    if msg.ordering_key is not None:
        meta.ordering_key = msg.ordering_key
    if msg.event_timestamp:
        meta.event_time = msg.event_timestamp
    if msg.content is None:
        meta.null_value = True


def entry_metadata(
    producer_name: str, schema_version: bytes, seq: int, num_messages: int | None = None
) -> pb.MessageMetadata:
    """The metadata every entry a producer sends starts with (``num_messages``: a batch's)."""
    meta = pb.MessageMetadata(producer_name=producer_name, sequence_id=seq, publish_time=now_ms())
    if num_messages is not None:
        meta.num_messages_in_batch = num_messages
    if schema_version:
        meta.schema_version = schema_version
    return meta


def message_metadata(
    producer_name: str, schema_version: bytes, msg: OutgoingMessage, seq: int
) -> pb.MessageMetadata:
    """The metadata of ``msg`` sent on its own (not batched)."""
    meta = entry_metadata(producer_name, schema_version, seq)
    _set_message_fields(meta, msg)
    if msg.deliver_at is not None:
        meta.deliver_at_time = msg.deliver_at
    if msg.replication_clusters:
        meta.replicate_to.extend(msg.replication_clusters)
    if msg.disable_replication:
        meta.replicate_to.append("__local__")
    if msg.txn is not None:
        meta.txnid_most_bits, meta.txnid_least_bits = msg.txn.txn_id
    return meta


def batch_metadata(
    producer_name: str, schema_version: bytes, first: OutgoingMessage, seq: int, count: int
) -> pb.MessageMetadata:
    """The metadata of a batch entry of ``count`` messages, ``first`` (sequence ``seq``) first:
    the first message's entry-level fields, without its per-message ones."""
    meta = message_metadata(producer_name, schema_version, first, seq)
    del meta.properties[:]
    meta.ClearField("event_time")
    meta.ClearField("null_value")
    meta.num_messages_in_batch = count
    return meta


@dataclass(slots=True)
class Batch:
    """The messages of one batch entry, in order, with the futures of their ids."""

    items: list[tuple[pb.SingleMessageMetadata, bytes, OutgoingMessage]] = field(
        default_factory=list
    )
    futures: list[asyncio.Future[MessageId]] = field(default_factory=list)
    sequence_ids: list[int] = field(default_factory=list)
    size: int = 0


class BatchContainers:
    """The open batches of a producer; ``emit`` sends a batch that is complete or due.

    With key-based batching there is one batch per key, and the limits (message count, bytes)
    apply to all of them together, as in Pulsar's clients: when they are reached, or the
    publish delay passed, every batch goes out, in the order of their highest sequence ids.
    Each such batch is sent under its highest sequence id (Pulsar's Java client does the
    same), so that with deduplication on, where the broker drops an entry whose sequence id is
    not above the last one it stored, a batch whose messages interleave with another key's is
    never taken for a duplicate.
    """

    def __init__(self, config: ProducerConfig, emit: Callable[[Batch], None]) -> None:
        self._config = config
        self._emit = emit
        self._batches: dict[str | bytes | None, Batch] = {}
        self._key_based = config.batching_type == BatchingType.KeyBased
        self._count = 0
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None

    def add(self, msg: OutgoingMessage, seq: int, fut: asyncio.Future[MessageId]) -> None:
        """Batch ``msg``; emit the batches when they are full, else arm the publish delay."""
        config = self._config
        key = msg.key if self._key_based else None
        size = msg.size
        if self._count and self._size + size > config.batching_max_allowed_size_in_bytes:
            self.flush()
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = Batch()
        single = single_metadata(msg, seq, size)
        batch.items.append((single, msg.content or b"", msg))
        batch.futures.append(fut)
        batch.sequence_ids.append(seq)
        batch.size += size
        self._count += 1
        self._size += size
        if (
            self._count >= config.batching_max_messages
            or self._size >= config.batching_max_allowed_size_in_bytes
        ):
            self.flush()
        elif self._timer is None:
            delay = config.batching_max_publish_delay_ms / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Emit every open batch now (in the order of their highest sequence ids)."""
        batches = sorted(
            (b for b in self._batches.values() if b.items), key=lambda b: max(b.sequence_ids)
        )
        self._batches.clear()
        self._count = self._size = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for batch in batches:
            self._emit(batch)

    def take_all(self) -> list[Batch]:
        """Remove the open batches (their messages fail) and return them."""
        batches = list(self._batches.values())
        self._batches.clear()
        self._count = self._size = 0
        return batches

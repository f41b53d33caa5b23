"""Messages on their way to the broker: the message built from ``send``, its metadata, batches.

A batch container gathers batched messages (one container per key with key-based batching)
until it is full or the publish delay passed; the producer then sends it as one entry.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starquake.client._config import ProducerConfig
from starquake.client._enums import BatchingType
from starquake.client._message import MessageId
from starquake.protocol.wire import pb


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
    """The open batches of a producer; ``emit`` sends a batch that is complete or due."""

    def __init__(self, config: ProducerConfig, emit: Callable[[Batch], None]) -> None:
        self._config = config
        self._emit = emit
        self._batches: dict[str | bytes | None, Batch] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, msg: OutgoingMessage, seq: int, fut: asyncio.Future[MessageId]) -> None:
        """Batch ``msg``; emit its batch when that is full, else arm the publish delay."""
        config = self._config
        key = msg.key if config.batching_type == BatchingType.KeyBased else None
        batch = self._batches.get(key)
        size = msg.size
        if (
            batch is not None
            and batch.items
            and (batch.size + size > config.batching_max_allowed_size_in_bytes)
        ):
            self._flush(key)
            batch = None
        if batch is None:
            batch = self._batches[key] = Batch()
        single = single_metadata(msg, seq, size)
        batch.items.append((single, msg.content or b"", msg))
        batch.futures.append(fut)
        batch.sequence_ids.append(seq)
        batch.size += size
        if (
            len(batch.items) >= config.batching_max_messages
            or batch.size >= config.batching_max_allowed_size_in_bytes
        ):
            self._flush(key)
        elif self._timer is None:
            delay = config.batching_max_publish_delay_ms / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Emit every open batch now."""
        for key in list(self._batches):
            self._flush(key)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _flush(self, key: str | bytes | None) -> None:
        batch = self._batches.pop(key, None)
        if batch is not None and batch.items:
            self._emit(batch)

    def take_all(self) -> list[Batch]:
        """Remove the open batches (their messages fail) and return them."""
        batches = list(self._batches.values())
        self._batches.clear()
        return batches

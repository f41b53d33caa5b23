"""What dispatchers need to know about a stored entry, parsed once per topic.

An entry's MessageMetadata tells how many messages it carries (permits count messages), its
sticky key (Key_Shared routing), its delivery time (delayed delivery) and whether it is a chunk.
The topic fills an :class:`EntryInfoCache` when it publishes (the metadata is parsed then anyway)
and dispatchers of every subscription read from it; entries read back from disk are parsed on a
miss. Only topics with an active consumer fill it, and it is bounded: oldest entries are
evicted first.
"""

from __future__ import annotations

import base64
import binascii
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import entry_metadata
from starquake.protocol.wire import pb
from starquake.storage import Position

NONE_KEY = b"NONE_KEY"


class EntryInfo(NamedTuple):
    """Dispatch-relevant facts of one entry."""

    num_messages: int
    sticky_key: bytes
    deliver_at: int  # ms since the epoch; 0 = deliver now
    publish_time: int
    is_chunk: bool
    chunk_uuid: str = ""  # the chunked message a chunk belongs to ("" when not a chunk)
    last_chunk: bool = True


def sticky_key_of(metadata: pb.MessageMetadata) -> bytes:
    """Ordering key, else partition key (base64-decoded when flagged), else ``NONE_KEY``."""
    if metadata.HasField("ordering_key"):
        return metadata.ordering_key
    if metadata.HasField("partition_key"):
        # getattr: not UTF-8, it is bytes, and the compiled build checks an attribute typed str
        key = text_of(getattr(metadata, "partition_key"))  # noqa: B009
        if metadata.partition_key_b64_encoded:
            try:
                return base64.b64decode(key)
            except (binascii.Error, ValueError):
                return key.encode()
        return key.encode()
    return NONE_KEY


def text_of(value: object) -> str:
    """A proto2 string field's text. One that is not UTF-8 comes from protobuf as its bytes;
    it reads as Pulsar's Java broker reads it, each bad sequence as U+FFFD."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def info_of(metadata: pb.MessageMetadata) -> EntryInfo:
    """What the broker needs of an entry, read off its message metadata."""
    num = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    is_chunk = metadata.HasField("chunk_id") and metadata.num_chunks_from_msg > 1
    return EntryInfo(
        num,
        sticky_key_of(metadata),
        metadata.deliver_at_time if metadata.HasField("deliver_at_time") else 0,
        metadata.publish_time,
        is_chunk,
        metadata.uuid if is_chunk else "",
        not is_chunk or metadata.chunk_id >= metadata.num_chunks_from_msg - 1,
    )


_UNPARSABLE = EntryInfo(1, NONE_KEY, 0, 0, False)

MAX_ENTRY_INFOS = 10_000
"""Entries whose info a topic keeps at most (about 300 bytes each with their positions): the
infos serve the consumers near the tail; one far behind parses what it reads."""


def _metadata_head(view: memoryview) -> bytes:
    """The bytes of a stored entry up to the end of its metadata (what its info is read from:
    the payload is not copied); empty when the entry is too short to tell."""
    pos = 6 if len(view) >= 2 and view[0] == 0x0E else 0
    if len(view) < pos + 4:
        return b""
    return bytes(view[: pos + 4 + int.from_bytes(view[pos : pos + 4], "big")])


class EntryInfoCache:
    """Position -> :class:`EntryInfo`, bounded, insertion-ordered eviction.

    An OrderedDict, not a dict: removing a dict's oldest entries one by one leaves a run of
    deleted slots that every ``next(iter(...))`` walks again, so dropping n entries cost
    O(n^2) (200,000 entries blocked the event loop for about a minute).
    """

    __slots__ = ("_items", "_max", "_scanner")

    def __init__(
        self,
        max_items: int = MAX_ENTRY_INFOS,
        scanner: Callable[[bytes], EntryInfo | None] | None = None,
    ) -> None:
        self._items: OrderedDict[Position, EntryInfo] = OrderedDict()
        self._max = max_items
        self._scanner = scanner
        """Reads a stored entry's info without protobuf, or declines (None)."""

    def put(self, position: Position, info: EntryInfo) -> None:
        """Remember an entry's info, forgetting the oldest once full."""
        items = self._items
        if len(items) >= self._max:
            items.popitem(last=False)
        items[position] = info

    def known(self, position: Position) -> EntryInfo | None:
        """An entry's info if it is cached."""
        return self._items.get(position)

    def get(self, position: Position, data: bytes | memoryview) -> EntryInfo:
        """An entry's info, from the cache or parsed from ``data`` (by the scanner given, else
        or when it declines, through protobuf)."""
        info = self._items.get(position)
        if info is None:
            scanner = self._scanner
            if scanner is not None:
                head = data if isinstance(data, bytes) else _metadata_head(data)
                info = scanner(head) if head else None
            if info is None:
                try:
                    info = info_of(entry_metadata(data))
                except ProtocolError:
                    info = _UNPARSABLE
            self.put(position, info)
        return info

    def discard_up_to(self, position: Position) -> int:
        """Forget the entries at or before ``position`` (every subscription is past them;
        a later read parses them again). Returns how many were dropped."""
        items = self._items
        dropped = 0
        while items:
            if next(iter(items)) > position:
                break
            items.popitem(last=False)
            dropped += 1
        return dropped

    def clear(self) -> None:
        """Forget every entry's info."""
        self._items.clear()


class LastMessage(NamedTuple):
    """The last message of a topic (or of its compacted view): its entry's position and its
    batch index (-1: the entry is not a batch, or there is none)."""

    position: Position
    batch_index: int


def last_message_at(position: Position, data: bytes | memoryview | None) -> LastMessage:
    """The last message of the entry at ``position`` holding ``data`` (None: not readable)."""
    if data is None:
        return LastMessage(position, -1)
    try:
        metadata = entry_metadata(data)
    except ProtocolError:
        return LastMessage(position, -1)
    if metadata.HasField("num_messages_in_batch"):
        return LastMessage(position, metadata.num_messages_in_batch - 1)
    return LastMessage(position, -1)

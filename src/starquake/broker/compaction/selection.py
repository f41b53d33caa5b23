"""Which messages a compacted view keeps: the latest message of each key (pure logic).

Pulsar's rules: messages are keyed by their partition key; the latest message of a key wins;
a message with an empty payload (or ``null_value`` set) deletes its key, and is not kept
itself; messages without a key are left out unless ``topicCompactionRetainNullKey`` is set.
A chunked message counts as one message, the one of its last chunk; all its chunks are kept
together.

The selection is built in one pass over the messages in log order (:class:`LatestPerKey`),
then each entry is planned against it (:func:`plan_entry`): kept whole, dropped, or, for a
batch, kept with only some of its messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from starquake.storage import Position

__all__ = [
    "DROP",
    "KEEP_ALL",
    "EntryFacts",
    "LatestPerKey",
    "MessageFacts",
    "MessageRef",
    "Selection",
    "plan_entry",
]


class MessageRef(NamedTuple):
    """A message: its entry's position and its index in the batch (-1: not batched)."""

    position: Position
    batch_index: int


class MessageFacts(NamedTuple):
    """What the selection needs to know about one message."""

    ref: MessageRef
    key: str | None
    """Partition key (None: the message has none)."""
    empty: bool
    """No payload, or ``null_value``: a deletion of its key."""
    chunk_uuid: str | None = None
    """For a chunk of a chunked message, the message's uuid."""
    last_chunk: bool = True
    """False for the chunks of a chunked message before its last one."""


class EntryFacts(NamedTuple):
    """The messages of one entry; ``readable`` False when it could not be parsed (it is then
    kept whole, as Pulsar keeps a batch it cannot decode), ``marker`` for server markers (never
    kept), ``batch_size`` the messages in a batch (0: not a batch)."""

    position: Position
    messages: Sequence[MessageFacts]
    batch_size: int = 0
    readable: bool = True
    marker: bool = False


class Selection(NamedTuple):
    """The kept messages, and the uuids of the chunked messages kept (all their chunks go)."""

    kept: frozenset[MessageRef]
    kept_chunks: frozenset[str]

    def keeps(self, message: MessageFacts) -> bool:
        """Whether compaction keeps this message (a chunk goes with its message)."""
        if message.chunk_uuid is not None and not message.last_chunk:
            return message.chunk_uuid in self.kept_chunks
        return message.ref in self.kept


class LatestPerKey:
    """Phase one of a compaction: feed every message in log order, then take the selection."""

    def __init__(self, retain_null_key: bool = False) -> None:
        self.retain_null_key = retain_null_key
        self._latest: dict[str, MessageFacts] = {}
        self._null_keyed: list[MessageRef] = []
        self._null_chunks: set[str] = set()
        self.messages = 0
        """Messages seen (chunks of one chunked message count once)."""

    def add(self, messages: Iterable[MessageFacts]) -> None:
        """Take these messages in: each key's latest one wins, an empty payload deletes it."""
        latest = self._latest
        for message in messages:
            if message.chunk_uuid is not None and not message.last_chunk:
                continue  # a chunked message counts by its last chunk
            self.messages += 1
            key = message.key
            if key is None:
                if self.retain_null_key:
                    self._null_keyed.append(message.ref)
                    if message.chunk_uuid is not None:
                        self._null_chunks.add(message.chunk_uuid)
                continue
            if message.empty:
                latest.pop(key, None)
            else:
                latest[key] = message

    def add_entries(self, entries: Iterable[EntryFacts]) -> None:
        """Take in the messages of readable entries, skipping markers."""
        for entry in entries:
            if entry.readable and not entry.marker:
                self.add(entry.messages)

    @property
    def keys(self) -> int:
        """Keys that currently have a live value."""
        return len(self._latest)

    def result(self) -> Selection:
        """The messages and chunked messages kept so far."""
        kept = {m.ref for m in self._latest.values()}
        kept.update(self._null_keyed)
        chunks = {m.chunk_uuid for m in self._latest.values() if m.chunk_uuid is not None}
        chunks |= self._null_chunks
        return Selection(frozenset(kept), frozenset(chunks))


KEEP_ALL: tuple[int, ...] | None = None
"""Plan: keep the entry as it is."""
DROP: tuple[int, ...] = ()
"""Plan: leave the entry out."""


def plan_entry(entry: EntryFacts, selection: Selection) -> tuple[int, ...] | None:
    """What to do with an entry: :data:`KEEP_ALL`, :data:`DROP`, or the batch indexes to keep
    (sorted; fewer than the batch holds)."""
    if not entry.readable:
        return KEEP_ALL
    if entry.marker or not entry.messages:
        return DROP
    if not entry.batch_size:
        return KEEP_ALL if selection.keeps(entry.messages[0]) else DROP
    kept = tuple(m.ref.batch_index for m in entry.messages if selection.keeps(m))
    if not kept:
        return DROP
    if len(kept) == entry.batch_size:
        return KEEP_ALL
    return kept

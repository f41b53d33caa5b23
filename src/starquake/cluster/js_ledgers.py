"""Ledgers in NATS JetStream: records of entries, one writer per ledger, fencing, reads, trim.

The layout (see ``docs/cluster-design.md``): ``streams`` shared streams ``SQ_LEDGERS_{i}``;
ledger ``L`` is the subject ``sq.ledger.{L mod streams}.{L}`` of stream ``L mod streams``. A
*record* is one message holding consecutive entries of one ledger (a group commit), stored as
received: a 4-byte big-endian length before each entry; its header ``Sq-Entries`` says
``first:count``. Entry ids are dense from 0.

One writer per ledger, without clocks: every record is published with
``Nats-Expected-Last-Subject-Sequence`` set to the stream sequence of the ledger's previous
record, so records are a chain. A new owner *fences* the ledger by appending a fence record
(header ``Sq-Fence``, expecting nothing, so it always lands); the replaced writer's next append
expects a sequence that is no longer the last, JetStream refuses it, and the writer learns it
is fenced. Everything before the first fence is the ledger's content; nothing after it ever
is. Ledger ids come from the sequence of the stream ``SQ_IDS``: unique and increasing across
the cluster. Every failure to reach JetStream is a StorageError (fencing: LedgerFencedError);
an append whose connection drops before JetStream answers fails then, not at its timeout (the
answer could only come on that connection), and so does one tried while disconnected.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from nats.js.api import DeliverPolicy, StreamConfig
from nats.js.errors import APIError, NotFoundError

from starquake.cluster.jetstream import (
    WRONG_LAST_SEQUENCE,
    ConnectionLoss,
    connect,
    jetstream_context,
    snapshot,
    storage_errors,
    until_ready,
)
from starquake.storage import LedgerFencedError, StorageError

ENTRIES_HEADER = "Sq-Entries"
FENCE_HEADER = "Sq-Fence"
EXPECT_LAST = "Nats-Expected-Last-Subject-Sequence"
SIZE_HEADER = "Nats-Msg-Size"  # a headers-only delivery's body size
_LENGTH = struct.Struct(">I")


def encode_record(entries: list[bytes]) -> bytes:
    """The body of a record: each entry after its 4-byte big-endian length."""
    return b"".join(_LENGTH.pack(len(e)) + e for e in entries)


def decode_record(body: bytes, count: int) -> list[bytes]:
    """The ``count`` entries of a record body; StorageError if it does not hold them."""
    entries = []
    offset = 0
    view = memoryview(body)
    for _ in range(count):
        if offset + 4 > len(body):
            raise StorageError("record shorter than its entry count")
        (size,) = _LENGTH.unpack_from(body, offset)
        offset += 4
        if offset + size > len(body):
            raise StorageError("record entry runs past the record")
        entries.append(bytes(view[offset : offset + size]))
        offset += size
    if offset != len(body):
        raise StorageError("record has bytes after its last entry")
    return entries


@dataclass
class LedgerIndex:
    """Where a ledger's records are: their first entry ids and stream sequences, in order."""

    firsts: list[int] = field(default_factory=list)
    sequences: list[int] = field(default_factory=list)
    entries: int = 0  # entries in the ledger (the next entry id)
    last_sequence: int = 0  # of the chain's last message (record or fence); 0: none
    size: int = 0  # bytes of the records' bodies (each entry with its 4-byte length)

    def add(self, first: int, count: int, sequence: int, size: int = 0) -> None:
        self.firsts.append(first)
        self.sequences.append(sequence)
        self.entries = first + count
        self.last_sequence = sequence
        self.size += size


# How many records a read fetches at once
READ_WINDOW = 16


class JetStreamLedgers:
    """The ledgers of a cluster in JetStream (one instance per broker process)."""

    def __init__(
        self, nc: Any, streams: int, timeout: float = 10, loss: ConnectionLoss | None = None
    ) -> None:
        self._nc = nc
        self._js = jetstream_context(nc, timeout)
        self.streams = streams
        self._loss = loss or ConnectionLoss()

    @classmethod
    async def connect(
        cls,
        servers: list[str],
        *,
        streams: int = 4,
        replicas: int = 1,
        give_up_after: float = 30,
        request_timeout: float = 10,
    ) -> JetStreamLedgers:
        """Connect, creating the ledger streams and the id stream if they do not exist;
        ``request_timeout``: how long a call waits for JetStream's answer (then a StorageError)."""
        deadline = time.monotonic() + give_up_after
        loss = ConnectionLoss()
        nc = await connect(servers, give_up_after, loss=loss)
        store = cls(nc, streams, request_timeout, loss)
        configs = [StreamConfig(name="SQ_IDS", subjects=["sq.ids"], max_msgs=1)]
        configs += [
            StreamConfig(name=f"SQ_LEDGERS_{i}", subjects=[f"sq.ledger.{i}.>"])
            for i in range(streams)
        ]
        try:
            for config in configs:
                config.num_replicas = replicas
                await until_ready(
                    deadline,
                    f"cannot create stream {config.name}",
                    functools.partial(store._js.add_stream, config),
                )
        except StorageError:
            await nc.close()
            raise
        return store

    def _stream(self, ledger_id: int) -> str:
        return f"SQ_LEDGERS_{self.stream_of(ledger_id)}"

    def _subject(self, ledger_id: int) -> str:
        return f"sq.ledger.{self.stream_of(ledger_id)}.{ledger_id}"

    async def allocate_ledger_id(self, stream: int | None = None) -> int:
        """A ledger id never handed out before, greater than every id handed out before it,
        whose records go to ledger stream ``stream`` (None: the streams in turn).

        The id is ``n * streams + stream`` for the id stream's next sequence ``n``: a
        managed ledger that just fenced a ledger on a stream (so that stream has a leader)
        starts the next one there, instead of on whichever stream its id falls, which may
        be electing a leader (4-9 s) after a storage node died. (The ids of a cluster
        created with plain sequences, ``n`` alone, are all below these.)"""
        with storage_errors("cannot allocate a ledger id"):
            ack = await self._js.publish("sq.ids", b"")
        sequence = int(ack.seq)
        return sequence * self.streams + (sequence if stream is None else stream) % self.streams

    def stream_of(self, ledger_id: int) -> int:
        """The ledger stream holding ``ledger_id``'s records."""
        return ledger_id % self.streams

    def writer(self, ledger_id: int, index: LedgerIndex | None = None) -> LedgerWriter:
        """The writer of a new ledger (or of a recovered one that was not fenced)."""
        return LedgerWriter(self, ledger_id, index or LedgerIndex())

    async def publish_record(self, ledger_id: int, body: bytes, headers: dict[str, str]) -> int:
        """Append one message to the ledger's chain: its stream sequence. LedgerFencedError
        when the chain's last message is not the one ``headers`` expects."""
        what = f"ledger {ledger_id}"
        with storage_errors(what):  # no answer: stored or not
            try:
                publish = self._js.publish(self._subject(ledger_id), body, headers=headers)
                ack = await self._loss.call(what, publish)
            except APIError as exc:
                if exc.err_code in WRONG_LAST_SEQUENCE:
                    raise LedgerFencedError(f"ledger {ledger_id} was fenced") from None
                raise
        return int(ack.seq)

    async def scan(self, ledger_id: int) -> tuple[LedgerIndex, bool]:
        """The ledger's index up to its fence (if any) and whether it is fenced: the records'
        headers only, read in batches (a ledger of thousands of records in a few round
        trips)."""
        index = LedgerIndex()
        with storage_errors(f"ledger {ledger_id}"):
            messages = await snapshot(
                self._js,
                self._stream(ledger_id),
                self._subject(ledger_id),
                DeliverPolicy.ALL,
                headers_only=True,
            )
        for msg in messages:
            sequence = int(msg.metadata.sequence.stream)
            headers = msg.headers or {}
            if FENCE_HEADER in headers:
                index.last_sequence = sequence
                return index, True
            first, _, count = headers.get(ENTRIES_HEADER, "").partition(":")
            size = int(headers.get(SIZE_HEADER, 0))
            index.add(int(first), int(count), sequence, size)
        return index, False

    async def fence(self, ledger_id: int) -> LedgerIndex:
        """Make ``ledger_id`` read-only for its writer, wherever that runs, and return what it
        holds: the writer's later appends fail; everything it stored before is kept.

        The fence record expects nothing, so it always lands, in one round trip, even while
        the writer keeps appending; whatever the writer stored before it is in the ledger,
        and its next append, which expects its own last record, is refused."""
        await self.publish_record(ledger_id, b"", {FENCE_HEADER: "1"})
        index, fenced = await self.scan(ledger_id)
        assert fenced, "a scan stops at the first fence"
        return index

    async def read(
        self, ledger_id: int, index: LedgerIndex, first: int, max_entries: int
    ) -> list[tuple[int, bytes]]:
        """Up to ``max_entries`` entries from ``first`` (only records of ``index``); the
        records are fetched ``READ_WINDOW`` at a time, concurrently."""
        out: list[tuple[int, bytes]] = []
        if first >= index.entries or max_entries <= 0:
            return out
        stop = min(first + max_entries, index.entries)  # the first entry id not wanted
        begin = bisect.bisect_right(index.firsts, first) - 1
        end = bisect.bisect_left(index.firsts, stop)  # the first record not wanted
        for window in range(begin, end, READ_WINDOW):
            positions = range(window, min(window + READ_WINDOW, end))
            bodies = await asyncio.gather(
                *(self._record(ledger_id, index.sequences[p]) for p in positions)
            )
            for position, body in zip(positions, bodies, strict=True):
                start = index.firsts[position]
                following = position + 1
                last = index.firsts[following] if following < len(index.firsts) else index.entries
                for offset, data in enumerate(decode_record(body, last - start)):
                    if first <= start + offset < stop:
                        out.append((start + offset, data))
        return out

    async def _record(self, ledger_id: int, sequence: int) -> bytes:
        with storage_errors(f"ledger {ledger_id}"):
            try:
                msg = await self._js.get_msg(self._stream(ledger_id), seq=sequence)
            except NotFoundError:
                raise StorageError(f"ledger {ledger_id}: a record is gone (trimmed)") from None
        return bytes(msg.data or b"")

    async def delete(self, ledger_id: int, *, keep_fence: bool = False) -> None:
        """Remove every record of ``ledger_id`` (trimming). ``keep_fence``: keep the
        subject's last message, the fence of a ledger whose replaced writer may still try its
        first append (which expects an empty subject and would land once the fence is gone)."""
        with storage_errors(f"ledger {ledger_id}"):
            await self._js.purge_stream(
                self._stream(ledger_id),
                subject=self._subject(ledger_id),
                keep=1 if keep_fence else None,
            )

    async def close(self) -> None:
        await self._nc.close()


class LedgerWriter:
    """Appends records to one ledger, one at a time (each expects the previous one)."""

    def __init__(self, ledgers: JetStreamLedgers, ledger_id: int, index: LedgerIndex) -> None:
        self._ledgers = ledgers
        self.ledger_id = ledger_id
        self.index = index
        self.fenced = False
        self._lock = asyncio.Lock()

    async def append(self, entries: list[bytes]) -> tuple[int, int]:
        """Store ``entries`` as one record once the stream's replicas have it: their first and
        last entry ids. LedgerFencedError once another owner fenced the ledger."""
        if not entries:
            raise ValueError("a record holds at least one entry")
        async with self._lock:
            if self.fenced:
                raise LedgerFencedError(f"ledger {self.ledger_id} was fenced")
            first = self.index.entries
            headers = {
                ENTRIES_HEADER: f"{first}:{len(entries)}",
                EXPECT_LAST: str(self.index.last_sequence),
            }
            body = encode_record(entries)
            try:
                sequence = await self._ledgers.publish_record(self.ledger_id, body, headers)
            except BaseException:
                # fenced, or no answer: the record may be stored or not, so this writer
                # stops; whoever reopens the ledger fences it and finds out
                self.fenced = True
                raise
            self.index.add(first, len(entries), sequence, len(body))
            return first, first + len(entries) - 1

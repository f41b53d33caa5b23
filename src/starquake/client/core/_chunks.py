"""Chunked messages: splitting on the producer side, reassembly on the consumer side.

A payload larger than the broker's ``max_message_size`` (from CONNECTED) is compressed first,
then cut into chunks; every chunk is its own SEND (``is_chunk=true``) with the message's
sequence id and a MessageMetadata carrying::

    uuid                  "<producer_name>-<sequence_id>"   same on every chunk
    num_chunks_from_msg   n
    total_chunk_msg_size  size of the whole (compressed) payload
    chunk_id              0 .. n-1

The consumer buffers chunks per uuid (chunks of several messages may interleave) and hands
over one message once chunk n-1 arrived; its id is the last chunk's and remembers every chunk's
position, so acknowledging it acknowledges them all (the official ``ChunkMessageIdImpl``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.base._message import MessageId
from starquake.protocol.wire import pb

log = logging.getLogger(CLIENT_LOGGER_NAME)

_REMEMBERED_DROPS = 1000


def chunk_count(size: int, chunk_size: int) -> int:
    """How many chunks a payload of ``size`` bytes needs (1: send it whole)."""
    if chunk_size <= 0 or size <= chunk_size:
        return 1
    return -(-size // chunk_size)


def chunk_metadata(
    meta: pb.MessageMetadata, uuid: str, num_chunks: int, total_size: int
) -> pb.MessageMetadata:
    """``meta`` with the chunk fields that are the same on every chunk (chunk_id = 0)."""
    chunked = pb.MessageMetadata()
    chunked.CopyFrom(meta)
    chunked.uuid = uuid
    chunked.num_chunks_from_msg = num_chunks
    chunked.total_chunk_msg_size = total_size
    chunked.chunk_id = 0
    return chunked


def is_chunk(meta: pb.MessageMetadata) -> bool:
    """True for one chunk of a message split in several (never a batch)."""
    return meta.num_chunks_from_msg > 1 and not meta.HasField("num_messages_in_batch")


@dataclass(slots=True)
class _Pending:
    num_chunks: int
    total_size: int
    received: float
    ids: list[MessageId] = field(default_factory=list)
    parts: list[bytes] = field(default_factory=list)

    @property
    def last_chunk_id(self) -> int:
        return len(self.ids) - 1


# discard(ids, acknowledge): acknowledge the chunks silently, or have them redelivered.
Discard = Callable[[list[MessageId], bool], None]


class ChunkAssembler:
    """Buffers the chunks of incomplete messages of one consumer.

    - ``max_pending`` (``max_pending_chunked_message``; 0 = unbounded) bounds the messages being
      assembled. Past it the oldest is dropped: its chunks are acknowledged silently when
      ``auto_ack_oldest`` (``auto_ack_oldest_chunked_message_on_queue_full``), otherwise
      negatively acknowledged so that the broker sends the whole message again later. Chunks of
      a dropped message that arrive afterwards get the same treatment.
    - Messages still incomplete ``expire_ms`` after their first chunk arrived are dropped and
      their chunks acknowledged (as the official clients do).
    - A chunk whose message is unknown (e.g. its first chunk was before a seek position) or out
      of order is not delivered and stays unacknowledged.
    """

    def __init__(
        self, max_pending: int, auto_ack_oldest: bool, expire_ms: int, discard: Discard
    ) -> None:
        self._max_pending = max_pending
        self._auto_ack = auto_ack_oldest
        self._expire = expire_ms / 1000
        self._discard = discard
        self._pending: collections.OrderedDict[str, _Pending] = collections.OrderedDict()
        self._dropped: collections.OrderedDict[str, bool] = collections.OrderedDict()
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._pending)

    def add(
        self, meta: pb.MessageMetadata, payload: bytes, mid: MessageId
    ) -> tuple[bytes, list[MessageId]] | None:
        """Take one chunk; return ``(whole payload, chunk ids)`` once the message is complete."""
        uuid, chunk_id = meta.uuid, meta.chunk_id
        ctx = self._pending.get(uuid)
        if chunk_id == 0:
            self._dropped.pop(uuid, None)
            if ctx is not None:  # the whole message is coming again (redelivery or resend)
                del self._pending[uuid]
            self._make_room()
            ctx = self._pending[uuid] = _Pending(
                meta.num_chunks_from_msg, meta.total_chunk_msg_size, time.monotonic()
            )
            self._arm()
        elif ctx is None:
            ack = self._dropped.get(uuid)
            if ack is not None:
                self._discard([mid], ack)
            else:
                log.warning("dropping chunk %d of unknown chunked message %s", chunk_id, uuid)
            return None
        elif any(known == mid for known in ctx.ids):
            return None  # a duplicate of a chunk we hold
        elif chunk_id != ctx.last_chunk_id + 1:
            log.warning("chunk %d of %s arrived after chunk %d", chunk_id, uuid, ctx.last_chunk_id)
            del self._pending[uuid]
            return None
        ctx.ids.append(mid)
        ctx.parts.append(payload)
        if len(ctx.ids) < ctx.num_chunks:
            return None
        del self._pending[uuid]
        whole = b"".join(ctx.parts)
        if len(whole) != ctx.total_size:
            log.warning(
                "chunked message %s: %d bytes, expected %d", uuid, len(whole), ctx.total_size
            )
        return whole, ctx.ids

    def _make_room(self) -> None:
        if self._max_pending <= 0:
            return
        while len(self._pending) >= self._max_pending:
            uuid, oldest = self._pending.popitem(last=False)
            log.info("too many incomplete chunked messages: dropping %s", uuid)
            self._drop(uuid, oldest, self._auto_ack)

    def _drop(self, uuid: str, ctx: _Pending, ack: bool) -> None:
        self._dropped[uuid] = ack
        while len(self._dropped) > _REMEMBERED_DROPS:
            self._dropped.popitem(last=False)
        if ctx.ids:
            self._discard(list(ctx.ids), ack)

    def _arm(self) -> None:
        if self._timer is None and self._expire > 0:
            delay = min(max(self._expire / 4, 0.01), 1.0)
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.expire(time.monotonic())
        if self._pending:
            self._arm()

    def expire(self, now: float) -> None:
        """Drop (and acknowledge) the messages whose first chunk came ``expire_ms`` ago."""
        for uuid in [u for u, ctx in self._pending.items() if now - ctx.received > self._expire]:
            log.info("incomplete chunked message %s expired", uuid)
            self._drop(uuid, self._pending.pop(uuid), True)

    def clear(self) -> None:
        """Forget everything buffered (the broker will send it all again)."""
        self._pending.clear()
        self._dropped.clear()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.clear()

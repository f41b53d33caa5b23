"""What a producer keeps of a message it sent (a :class:`SendOp`, until the receipt) and how a
message too large for one frame is cut into chunks."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from dataclasses import dataclass

from starquake.client.base._message import MessageId
from starquake.client.crypto._crypto import MessageEncryptor
from starquake.client.exceptions import MessageTooBig, from_server_error
from starquake.common.topic_name import TopicName
from starquake.protocol.wire import pb


@dataclass(slots=True)
class SendOp:
    """One SEND awaiting its receipt: its frame (written again after a reconnect) and the
    futures its receipt completes."""

    sequence_id: int
    highest_sequence_id: int
    num_messages: int
    frame: bytes
    futures: list[asyncio.Future[MessageId]]
    created: float
    batched: bool
    permits: int  # pending-queue slots released by the receipt (0 for all but a last chunk)
    chunks: list[MessageId] | None = None  # shared by the chunks of one message
    last_chunk: bool = False

    def complete(self, mid: pb.MessageIdData, partition: int) -> None:
        """Complete the futures with the ids of the receipt's ``mid`` (an entry, or the last
        chunk of a message). As in the official client, the ids a send returns name no
        topic: a multi-topic consumer cannot tell which of its topics such an id belongs to."""
        ledger, entry = mid.ledgerId, mid.entryId
        ledger = ledger - (1 << 64) if ledger >= 1 << 63 else ledger
        entry = entry - (1 << 64) if entry >= 1 << 63 else entry
        chunks = self.chunks
        if chunks is not None:
            chunks.append(MessageId.from_parts(ledger, entry, partition))
        for index, fut in enumerate(self.futures):
            if not fut.done():
                if chunks is not None:
                    result = MessageId.from_chunks(chunks)
                elif self.batched:
                    result = MessageId.from_parts(
                        ledger, entry, partition, index, self.num_messages
                    )
                else:
                    result = MessageId.from_parts(ledger, entry, partition)
                fut.set_result(result)


def take_refused(pending: collections.deque[SendOp], error: pb.CommandSendError) -> int:
    """A SEND_ERROR of code NotAllowedError: the broker will never store that send (a message
    of a transaction that ended, too big a message...). As the Java client does, the send
    fails when it is the oldest pending one, and is not sent again (a reconnect would only
    have it refused again, for ever). Returns the queue slots it held (0: none taken)."""
    op = pending[0] if pending else None
    if op is None or error.sequence_id not in (op.sequence_id, op.highest_sequence_id):
        return 0
    pending.popleft()
    exc = from_server_error(int(error.error), error.message)
    for fut in op.futures:
        if not fut.done():
            fut.set_exception(exc)
    return op.permits


def partition_topic(topic: str, index: int) -> str:
    """Name of partition ``index`` of ``topic``."""
    return str(TopicName.parse(topic).partition(index))


def chunk_size(
    chunked: pb.MessageMetadata, max_message_size: int, enc: MessageEncryptor | None
) -> int:
    """The payload bytes one chunk may carry, with the chunk metadata ``chunked`` (and the
    encryption overhead) in a frame of ``max_message_size``; MessageTooBig if none."""
    size = max_message_size - chunked.ByteSize() - 8  # room for larger varints
    if enc is not None:
        size -= enc.overhead()
    if size <= 0:
        raise MessageTooBig(f"message metadata alone exceeds {max_message_size} bytes")
    return size


def chunk_parts(
    chunked: pb.MessageMetadata,
    payload: bytes,
    size: int,
    total: int,
    enc: MessageEncryptor | None,
) -> Iterator[bytes]:
    """The ``total`` chunks of ``payload``, each encrypted on its own (as the official clients
    do); ``chunked.chunk_id`` is set to each chunk's while it is being used."""
    view = memoryview(payload)
    for chunk_id in range(total):
        chunked.chunk_id = chunk_id
        part = bytes(view[chunk_id * size : (chunk_id + 1) * size])
        if enc is not None:
            part = enc.encrypt(chunked, part)
        yield part

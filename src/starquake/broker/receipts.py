"""Send receipts a persistent topic owes its producers, sent once their entries are durable.

Publishing queues a :class:`PendingReceipt` per entry (in append order); when a group commit
made entries durable, :func:`send_receipts` answers those up to its last position, in order.
Consecutive receipts of one producer go to its connection together (one write, one count of
the answered bytes), so a commit of n entries makes a few calls, not n.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from starquake.protocol.commands import send_receipt
from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.dedup import MessageDeduplication
    from starquake.broker.producer import Producer


class PendingReceipt(NamedTuple):
    """A receipt to send once ``position`` is durable. One is made per entry on the publish
    path: a tuple (no more than one allocation), unpacked in the hot loop."""

    position: Position
    producer: Producer
    sequence_id: int
    highest_sequence_id: int
    last_chunk: bool
    """Whether the entry is the last chunk of its message."""
    duplicate: bool
    """A duplicate: nothing was stored; the receipt is -1:-1, sent in order."""
    received: float
    """When its SEND was read (monotonic seconds)."""


def send_receipts(
    pending: deque[PendingReceipt],
    last: Position,
    partition: int,
    dedup: MessageDeduplication | None,
    count_latency: Callable[[float, int], None],
) -> None:
    """Answer the receipts of ``pending`` whose entries are durable (up to ``last``), in order.

    ``dedup`` (deduplication on) learns of each stored entry; ``count_latency(received, n)``
    counts n entries whose SEND was read at ``received`` (entries read in one go share their
    read time: counted once per run of equal read times)."""
    frames: list[bytes | memoryview] = []
    to: Producer | None = None
    run_read = -1.0
    run = 0
    while pending and pending[0].position <= last:
        position, producer, sequence_id, highest, last_chunk, duplicate, received = (
            pending.popleft()
        )
        if producer is not to:
            if to is not None:
                to.on_receipts(frames)
                frames = []
            to = producer
        if duplicate:
            frames.append(send_receipt(producer.producer_id, sequence_id, -1, -1, highest))
            continue
        if received != run_read:
            if run:
                count_latency(run_read, run)
            run_read = received
            run = 0
        run += 1
        if dedup is not None:
            dedup.on_persisted(
                producer.name, sequence_id, highest, position, is_last_chunk=last_chunk
            )
        frames.append(
            send_receipt(
                producer.producer_id,
                sequence_id,
                position.ledger_id,
                position.entry_id,
                highest,
                partition,
            )
        )
    if to is not None:
        to.on_receipts(frames)
    if run:
        count_latency(run_read, run)

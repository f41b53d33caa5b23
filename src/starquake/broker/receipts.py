"""Send receipts a persistent topic owes its producers, sent once their entries are durable.

Publishing queues a :class:`PendingReceipt` per entry (in append order); when a group commit
made entries durable, :func:`send_receipts` answers those up to its last position, in order.
Consecutive receipts of one producer go to its connection together (one bytes object, one
write, one count of the answered bytes), so a commit of n entries makes a few calls, not n.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

# At run time, not only for the checker: the compiled PendingReceipt's annotations refer to the
# compiled Producer class, which must be set up first whichever module is imported first.
from starquake.broker.producer import Producer
from starquake.protocol.commands import (
    add_send_receipt,
    receipt_partition_tail,
    receipt_producer_head,
)
from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.dedup import MessageDeduplication


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
    parts: list[bytes] = []
    count = 0
    to: Producer | None = None
    head = b""
    partition_tail = receipt_partition_tail(partition)
    run_read = -1.0
    run = 0
    while pending and pending[0].position <= last:
        position, producer, sequence_id, highest, last_chunk, duplicate, received = (
            pending.popleft()
        )
        if producer is not to:
            if to is not None:
                to.on_receipts(b"".join(parts), count)
                parts = []
                count = 0
            to = producer
            head = receipt_producer_head(producer.producer_id)
        count += 1
        if duplicate:
            add_send_receipt(parts, head, sequence_id, -1, -1, highest, b"")
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
        add_send_receipt(
            parts, head, sequence_id, position.ledger_id, position.entry_id, highest, partition_tail
        )
    if to is not None:
        to.on_receipts(b"".join(parts), count)
    if run:
        count_latency(run_read, run)

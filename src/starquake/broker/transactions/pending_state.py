"""A subscription's pending acks: what open transactions acknowledged there (no I/O here).

An acknowledgment carrying a transaction id is held, not applied: the message is not
acknowledged on the cursor (nor dispatched again, when acknowledged individually) until the
transaction ends. A commit hands the
acks over to be applied as ordinary ones; an abort releases them (the messages are delivered
again, as unacknowledged ones are). The conflicts are Pulsar's (``PendingAckHandleImpl``), each
a TransactionConflict:

- an individual ack of a message already acknowledged, or already pending in a transaction
  (the same one included); for a batch, of an index already acknowledged or pending;
- a cumulative ack at or before the mark-delete position, or while another transaction holds
  a cumulative ack, or not past the cumulative ack its own transaction already holds.

A batch message's ack names its indexes; an entry is whole when ``indexes`` is None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from starquake.broker.transactions.errors import TransactionConflictError, TxnId, txn_text
from starquake.storage import Position

Indexes = frozenset[int] | None
"""The batch indexes an ack covers (None: the whole entry)."""


@dataclass(frozen=True)
class TxnAck:
    """One message (or some indexes of a batch entry) acknowledged in a transaction."""

    position: Position
    indexes: Indexes = None
    batch_size: int = 0


@dataclass
class Ended:
    """What a transaction held on the subscription when it ended."""

    individual: dict[Position, TxnAck] = field(default_factory=dict)
    cumulative: Position | None = None

    def positions(self) -> list[Position]:
        """The positions it acknowledged individually, in order."""
        return sorted(self.individual)


IsAcked = Callable[[Position, Indexes], bool]
"""Whether the cursor already acknowledged a position (or any of these batch indexes)."""


class PendingAckState:
    """The pending acks of one subscription (see the module docstring)."""

    def __init__(self, where: str) -> None:
        self._where = where
        self.by_txn: dict[TxnId, dict[Position, TxnAck]] = {}
        self.holders: dict[Position, dict[TxnId, Indexes]] = {}
        self.cumulative: tuple[TxnId, Position] | None = None

    def __bool__(self) -> bool:
        return bool(self.holders) or self.cumulative is not None

    def transactions(self) -> set[TxnId]:
        """The transactions holding acks here."""
        held = set(self.by_txn)
        if self.cumulative is not None:
            held.add(self.cumulative[0])
        return held

    def holds(self, position: Position) -> bool:
        """Whether ``position`` must not be dispatched: a transaction acknowledged all of it
        individually. A pending cumulative ack holds nothing back (as the mark-delete position
        has not moved, a new consumer gets those messages again, their acks conflicting until
        the transaction ends): skipping them would have it process, and cumulatively
        acknowledge, later messages first, covering them before an abort delivers them
        again."""
        holders = self.holders.get(position)
        return holders is not None and any(indexes is None for indexes in holders.values())

    # --- acknowledgments ----------------------------------------------------------------------

    def check_individual(self, txn: TxnId, acks: Iterable[TxnAck], is_acked: IsAcked) -> None:
        """Raise TransactionConflict if any of ``acks`` conflicts (nothing is changed)."""
        for ack in acks:
            where = f"{self._where} Transaction:{txn_text(txn)} try to ack message:{ack.position}"
            if is_acked(ack.position, ack.indexes):
                raise TransactionConflictError(f"{where} already acked before.")
            holders = self.holders.get(ack.position)
            if not holders:
                continue
            if ack.indexes is None or any(
                held is None or held & ack.indexes for held in holders.values()
            ):
                raise TransactionConflictError(f"{where} in pending ack status.")

    def add_individual(self, txn: TxnId, acks: Iterable[TxnAck]) -> None:
        """Hold ``acks`` for ``txn`` (checked before, or replayed)."""
        mine = self.by_txn.setdefault(txn, {})
        for ack in acks:
            previous = mine.get(ack.position)
            if previous is not None and previous.indexes is not None and ack.indexes is not None:
                ack = TxnAck(ack.position, previous.indexes | ack.indexes, ack.batch_size)
            mine[ack.position] = ack
            self.holders.setdefault(ack.position, {})[txn] = ack.indexes

    def check_cumulative(self, txn: TxnId, position: Position, mark_delete: Position) -> None:
        """Raise TransactionConflict if a cumulative ack of ``txn`` up to ``position``
        conflicts."""
        where = f"{self._where} Transaction:{txn_text(txn)} try to cumulative ack position: "
        if position <= mark_delete:
            raise TransactionConflictError(
                f"{where}{position} within range of cursor's markDeletePosition: {mark_delete}"
            )
        current = self.cumulative
        if current is not None and (current[0] != txn or position <= current[1]):
            raise TransactionConflictError(
                f"{where}{position} within range of current currentPosition: {current[1]}"
            )

    def set_cumulative(self, txn: TxnId, position: Position) -> None:
        """Hold a cumulative ack of ``txn`` up to ``position`` (checked before, or replayed:
        a replayed one behind the one held is ignored)."""
        current = self.cumulative
        if current is None or (current[0] == txn and position > current[1]):
            self.cumulative = (txn, position)

    def clear_position(self, position: Position) -> None:
        """``position`` was acknowledged outside any transaction: nothing is pending on it any
        more (as Pulsar, the ordinary ack wins; the transaction's end changes nothing there)."""
        holders = self.holders.pop(position, None)
        for txn in holders or ():
            mine = self.by_txn.get(txn)
            if mine is not None:
                mine.pop(position, None)
                if not mine:
                    del self.by_txn[txn]

    # --- ends ---------------------------------------------------------------------------------

    def end(self, txn: TxnId) -> Ended:
        """Forget what ``txn`` holds here (it committed or aborted); what it held."""
        ended = Ended(self.by_txn.pop(txn, {}))
        for position in ended.individual:
            holders = self.holders.get(position)
            if holders is not None:
                holders.pop(txn, None)
                if not holders:
                    del self.holders[position]
        if self.cumulative is not None and self.cumulative[0] == txn:
            ended.cumulative = self.cumulative[1]
            self.cumulative = None
        return ended


class HeldAcks(Protocol):
    """What a subscription knows of its pending-ack handle: the state it keeps."""

    @property
    def state(self) -> PendingAckState:
        """The pending acks."""

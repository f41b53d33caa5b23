"""A subscription's pending-ack handle: acks in transactions, kept durable until they end.

Every ack in a transaction is appended to the subscription's pending-ack log (the managed
ledger of ``<topic>-<subscription>__transaction_pending_ack``, Pulsar's name) and waited for
until durable before it is answered; so is the end of each transaction there. When the topic
loads, the log is replayed: the acks of transactions still open are pending again, and a commit
that was logged but whose acks may not have reached the stored cursor is applied again (an
``applied`` record follows once the cursor is stored, so it is applied once).

While an individual ack is pending its message is not dispatched (see
:meth:`~starquake.broker.subscription.Subscription.held_in_txn`); a commit acknowledges it as
an ordinary ack would, an abort delivers it again as unacknowledged messages are (Shared:
redelivered to whoever has permits; Exclusive and Failover: the cursor rewinds, as Pulsar's
``redeliverUnacknowledgedMessages``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starquake.broker.dispatch.shared import SharedDispatcher
from starquake.broker.dispatch.single_active import SingleActiveConsumerDispatcher
from starquake.broker.transactions.durable import DurableAppends
from starquake.broker.transactions.errors import TransactionConflictError, TxnId, txn_text
from starquake.broker.transactions.pending_state import Ended, Indexes, PendingAckState, TxnAck
from starquake.protocol.framing import encode_entry, parse_entry
from starquake.protocol.wire import pb
from starquake.storage import (
    InvalidPositionError,
    ManagedCursor,
    ManagedLedger,
    Position,
    StorageError,
)

if TYPE_CHECKING:
    from starquake.broker.subscription import Subscription

log = logging.getLogger(__name__)

PENDING_ACK_SUFFIX = "__transaction_pending_ack"
LOG_PRODUCER = "__pending_ack"
ENDED_KEPT = 10_000
"""Ended transactions remembered per subscription (a repeated end does nothing)."""


def pending_ack_topic(topic: str, subscription: str) -> str:
    """The name of a subscription's pending-ack log topic (as Pulsar names it)."""
    return f"{topic}-{subscription}{PENDING_ACK_SUFFIX}"


def _record(op: str, txn: TxnId, **fields: Any) -> bytes:
    body = {"op": op, "txn": list(txn), **fields}
    metadata = pb.MessageMetadata(
        producer_name=LOG_PRODUCER, sequence_id=0, publish_time=int(time.time() * 1000)
    )
    return encode_entry(metadata, json.dumps(body, separators=(",", ":")).encode())


def _ack_fields(ack: TxnAck) -> list[Any]:
    indexes = None if ack.indexes is None else sorted(ack.indexes)
    return [ack.position.ledger_id, ack.position.entry_id, indexes, ack.batch_size]


def _ack_of(fields: list[Any]) -> TxnAck:
    ledger_id, entry_id, indexes, size = fields
    return TxnAck(
        Position(int(ledger_id), int(entry_id)),
        None if indexes is None else frozenset(int(i) for i in indexes),
        int(size),
    )


class PendingAckHandle:
    """The pending acks of one subscription, with their log (see the module docstring)."""

    def __init__(
        self,
        subscription: Subscription,
        ledger: ManagedLedger,
        appends: DurableAppends,
        check_open: Callable[[TxnId], None],
        persist_cursors: Callable[[], Awaitable[None]],
        log_cursor: ManagedCursor | None = None,
    ) -> None:
        """``log_cursor`` (the log's durable cursor) is moved past the records of transactions
        ended here (stored with the next cursor store): a later load replays from it."""
        self.subscription = subscription
        self._log_cursor = log_cursor
        self._first: dict[TxnId, Position] = {}
        """The position of the first record of each transaction not done with here."""
        self._ledger = ledger
        self._appends = appends
        self._check_open = check_open
        self._persist_cursors = persist_cursors
        where = f"[{subscription.topic.full_name}][{subscription.name}]"
        self.state = PendingAckState(where)
        self.ended: dict[TxnId, bool] = {}
        self._ending: dict[TxnId, asyncio.Future[None]] = {}

    # --- acknowledgments ----------------------------------------------------------------------

    def _is_acked(self, position: Position, indexes: Indexes) -> bool:
        cursor = self.subscription.cursor
        if cursor.is_acked(position):
            return True
        if indexes is None:
            return False
        remaining = cursor.get_batch_ack_set(position)  # bits set: not acknowledged yet
        if remaining is None:
            return False
        words = len(remaining)
        return any(i // 64 < words and not (remaining[i // 64] >> (i % 64)) & 1 for i in indexes)

    async def ack_individual(self, txn: TxnId, acks: list[TxnAck]) -> None:
        """Hold ``acks`` for ``txn`` once they are durable; TransactionConflict (nothing held)
        when one conflicts."""
        self._check_txn(txn)
        self.state.check_individual(txn, acks, self._is_acked)
        self.state.add_individual(txn, acks)
        self._take_from_consumers([a.position for a in acks if a.indexes is None])
        # As Pulsar, kept in memory even if the append fails: the transaction is then
        # aborted (by the client or at its timeout), which releases the messages.
        await self._append(txn, _record("ack", txn, acks=[_ack_fields(a) for a in acks]))

    async def ack_cumulative(self, txn: TxnId, position: Position) -> None:
        """Hold a cumulative ack of ``txn`` up to ``position`` once it is durable."""
        self._check_txn(txn)
        self.state.check_cumulative(txn, position, self.subscription.cursor.mark_delete_position)
        self.state.set_cumulative(txn, position)
        await self._append(
            txn, _record("cumulative", txn, pos=[position.ledger_id, position.entry_id])
        )

    async def _append(self, txn: TxnId, record: bytes) -> None:
        position, durable = self._appends.append(record)
        self._track(txn, position)
        await durable

    def _track(self, txn: TxnId, position: Position) -> None:
        first = self._first.get(txn)
        self._first[txn] = position if first is None else min(first, position)

    def _done(self, txn: TxnId, last: Position) -> None:
        """``txn``'s records are not needed any more: move the log's cursor to just before the
        first record still needed (none: before ``last``, the log's last record)."""
        self._first.pop(txn, None)
        cursor = self._log_cursor
        floor = min(self._first.values(), default=last)
        if cursor is None or floor.entry_id == 0:
            return  # at a ledger's start: moved at a later end
        target = Position(floor.ledger_id, floor.entry_id - 1)
        if target > cursor.mark_delete_position:
            cursor.mark_delete(target)

    def _check_txn(self, txn: TxnId) -> None:
        if txn in self.ended or txn in self._ending:
            raise TransactionConflictError(
                f"Transaction {txn_text(txn)} already ended on {self.subscription.name}"
            )
        self._check_open(txn)

    def _take_from_consumers(self, positions: list[Position]) -> None:
        """The consumers no longer count these messages as theirs (Pulsar removes a message
        acknowledged in a transaction from its consumer's pending acks)."""
        subscription = self.subscription
        dispatcher = subscription.dispatcher
        for consumer in subscription.consumers:
            for position in positions:
                if consumer.acked(position) and dispatcher is not None:
                    dispatcher.entry_done(position)

    # --- ends ---------------------------------------------------------------------------------

    async def end(self, txn: TxnId, commit: bool) -> None:
        """END_TXN_ON_SUBSCRIPTION: log the end, then apply (commit) or release (abort) what
        ``txn`` held here. Ending it again does nothing."""
        if txn in self.ended:
            return
        running = self._ending.get(txn)
        if running is not None:
            await asyncio.shield(running)
            return
        if txn not in self.state.transactions():
            return  # nothing held here: nothing to log
        done = asyncio.get_running_loop().create_future()
        self._ending[txn] = done
        try:
            position = await self._appends.append_durable(_record("end", txn, commit=commit))
            ended = self.state.end(txn)
            self._remember(txn, commit)
            if commit:
                apply_commit(self.subscription, ended)
                await self._confirm_applied(txn)
            else:
                release(self.subscription, ended)
                self._done(txn, position)
            done.set_result(None)
        except BaseException as exc:
            done.set_exception(exc)
            done.exception()
            raise
        finally:
            self._ending.pop(txn, None)

    def _remember(self, txn: TxnId, commit: bool) -> None:
        self.ended[txn] = commit
        if len(self.ended) > ENDED_KEPT:
            del self.ended[next(iter(self.ended))]

    async def _confirm_applied(self, txn: TxnId) -> None:
        """Store the cursor, then log that the commit reached it (not replayed again)."""
        try:
            await self._persist_cursors()
            position, _ = self._appends.append(_record("applied", txn))
            self._done(txn, position)
        except Exception as exc:  # replayed at the next load instead: applying is idempotent
            log.warning("pending acks of %s: cursor not stored yet: %s", txn_text(txn), exc)

    # --- recovery -----------------------------------------------------------------------------

    async def recover(self) -> int:
        """Replay the log (see the module docstring); returns how many records were read."""
        to_apply: dict[TxnId, Ended] = {}
        read = 0
        ledger = self._ledger
        start = ledger.first_position()
        if self._log_cursor is not None and start is not None:
            start = max(start, ledger.next_position(self._log_cursor.mark_delete_position))
        last = ledger.last_confirmed
        while start is not None and start <= last:
            entries = await ledger.read_entries(start, 1000)
            if not entries:
                break
            for entry in entries:
                try:
                    record = json.loads(bytes(parse_entry(entry.data).payload))
                    self._replay(record, to_apply)
                    self._replayed(record, entry.position)
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("pending-ack log entry %s skipped: %s", entry.position, exc)
            read += len(entries)
            start = ledger.next_position(entries[-1].position)
            await asyncio.sleep(0)
        for txn, ended in to_apply.items():
            apply_commit(self.subscription, ended)
            await self._confirm_applied(txn)
        return read

    def release_forgotten(self, known: Callable[[TxnId], bool]) -> int:
        """After a replay: release the acks of transactions their coordinator no longer knows
        (it ended them while this subscription was gone: deleted, then made again); returns
        how many. A coordinator ends every subscription before it forgets a transaction, so
        these acks are stale: the messages are delivered again rather than held for ever."""
        stale = [txn for txn in self.state.transactions() if not known(txn)]
        for txn in stale:
            release(self.subscription, self.state.end(txn))
            self._remember(txn, False)
            position, _ = self._appends.append(_record("end", txn, commit=False))
            self._done(txn, position)
        return len(stale)

    def _replayed(self, record: dict[str, Any], position: Position) -> None:
        """Track a replayed record's transaction until it is done with here."""
        most, least = record["txn"]
        txn = (int(most), int(least))
        if record["op"] in ("ack", "cumulative") and txn not in self.ended:
            self._track(txn, position)
        elif (record["op"] == "end" and not record["commit"]) or record["op"] == "applied":
            self._first.pop(txn, None)

    def _replay(self, record: dict[str, Any], to_apply: dict[TxnId, Ended]) -> None:
        op = record["op"]
        most, least = record["txn"]
        txn = (int(most), int(least))
        if op == "ack":
            if txn not in self.ended:
                self.state.add_individual(txn, [_ack_of(a) for a in record["acks"]])
        elif op == "cumulative":
            position = Position(*(int(p) for p in record["pos"]))
            if txn not in self.ended and position > self.subscription.cursor.mark_delete_position:
                self.state.set_cumulative(txn, position)
        elif op == "end":
            ended = self.state.end(txn)
            self._remember(txn, bool(record["commit"]))
            if record["commit"]:
                to_apply[txn] = ended
        elif op == "applied":
            to_apply.pop(txn, None)


# --- what an end does to the subscription -----------------------------------------------------


def _ack_set_without(indexes: frozenset[int], size: int) -> list[int]:
    """Unacknowledged-bits words of a batch of ``size`` with ``indexes`` acknowledged."""
    words = [0] * ((size + 63) // 64)
    for i in range(size):
        if i not in indexes:
            words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def apply_commit(subscription: Subscription, ended: Ended) -> None:
    """Acknowledge what a committed transaction held, as ordinary acks would."""
    cursor = subscription.cursor
    before = cursor.mark_delete_position
    whole = [p for p, ack in ended.individual.items() if ack.indexes is None]
    if whole:
        cursor.delete(whole)  # refused: gone since (trimmed, or the topic was reset)
    for position, ack in ended.individual.items():
        if ack.indexes is None:
            continue
        size = ack.batch_size or subscription.topic.batch_size_of(position) or 0
        if size <= 0:
            size = (max(ack.indexes) // 64 + 1) * 64
        with contextlib.suppress(InvalidPositionError, StorageError):  # gone since
            cursor.ack_batch_indexes(position, _ack_set_without(ack.indexes, size), size)
    target = ended.cumulative
    if target is not None and target > cursor.mark_delete_position:
        last = subscription.topic.ledger.last_confirmed
        cursor.mark_delete(min(target, last))
        for consumer in subscription.consumers:
            for pending in [p for p in consumer.pending_acks if p <= target]:
                consumer.acked(pending)
    counts = subscription.redelivery_counts
    for position in ended.individual:
        counts.pop(position, None)
    subscription.after_txn_ack(before)


def release(subscription: Subscription, ended: Ended) -> None:
    """Deliver again what an aborted transaction held (as unacknowledged messages)."""
    cursor = subscription.cursor
    dispatcher = subscription.dispatcher
    positions = [p for p in ended.positions() if not cursor.is_acked(p)]
    if ended.cumulative is None and isinstance(dispatcher, SharedDispatcher):
        # only what the reads passed over while it was held: the reads still reach the rest
        read_to = cursor.read_position
        passed = [p for p in positions if p < read_to]
        if passed:
            dispatcher.note_redelivered(passed)
            dispatcher.add_replay(passed)
            dispatcher.schedule()
        return
    if isinstance(dispatcher, SingleActiveConsumerDispatcher) and dispatcher.active is not None:
        dispatcher.redeliver(dispatcher.active, None)
        return
    subscription.rewind()
    if dispatcher is not None:
        dispatcher.schedule()

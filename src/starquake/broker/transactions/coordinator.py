"""One transaction coordinator: its transactions, kept durable in its transaction log.

The log is the managed ledger of ``persistent://pulsar/system/__transaction_log_<id>``: every
change is appended there (and waited for until durable) before it is applied and answered, so a
restart (even after a kill -9) replays it to the same state. Ending a transaction logs
COMMITTING or ABORTING first, then ends it on every partition it produced to and every
subscription it acknowledged on (END_TXN_ON_SUBSCRIPTION: its pending acks), then logs
COMMITTED or ABORTED: after a crash in between, recovery drives it to its end again (ending a
transaction on a partition twice does nothing). A transaction still OPEN when its timeout
passes is aborted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starquake.broker.transactions.durable import DurableAppends
from starquake.broker.transactions.errors import EndRefusedError, TxnId, txn_text
from starquake.broker.transactions.state import (
    CoordinatorState,
    Record,
    TxnMeta,
    TxnStatus,
    decode_record,
    encode_record,
)
from starquake.protocol.framing import encode_entry, parse_entry
from starquake.protocol.wire import pb
from starquake.storage import ManagedCursor, ManagedLedger, Position

log = logging.getLogger(__name__)

PartitionEnder = Callable[[TxnId, list[str], list[tuple[str, str]], bool], Awaitable[None]]
"""Ends a transaction (True: commit) on the given partitions and (topic, subscription)s."""
RETRY_SECONDS = 1.0
"""Pause between attempts to drive a recovered COMMITTING/ABORTING transaction to its end."""
LOG_PRODUCER = "__txn_coordinator"
MAX_TIMER_SECONDS = 86_400.0
DEFAULT_TTL_MS = 60_000
"""The timeout of a transaction whose NEW_TXN names none."""


@dataclass
class TxnCounts:
    """What a coordinator did since the broker started (Pulsar's transaction metrics)."""

    created: int = 0
    committed: int = 0
    aborted: int = 0
    timed_out: int = 0


class TransactionCoordinator:
    """Coordinator ``tc_id`` (see the module docstring)."""

    def __init__(
        self,
        tc_id: int,
        ledger: ManagedLedger,
        appends: DurableAppends,
        ender: PartitionEnder,
        cursor: ManagedCursor | None = None,
        persist_cursors: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``cursor`` (the log's durable cursor) is moved past the records of ended
        transactions (stored by ``persist_cursors``): a restart replays from it."""
        self.state = CoordinatorState(tc_id)
        self._ledger = ledger
        self._cursor = cursor
        self._persist_cursors = persist_cursors
        self._first: dict[int, Position] = {}
        self._storing = False
        """The position of each ongoing transaction's first record."""
        self._appends = appends
        self._ender = ender
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ending: dict[int, asyncio.Task[None]] = {}
        self._driving: set[int] = set()
        self.closed = False
        self.counts = TxnCounts()
        self.recover_start_ms = 0
        self.recover_end_ms = 0

    @property
    def tc_id(self) -> int:
        """The coordinator's id (the transactions' most significant bits)."""
        return self.state.tc_id

    async def _log(self, record: Record) -> None:
        """Append ``record`` to the log, wait until it is durable, then apply it."""
        metadata = pb.MessageMetadata(
            producer_name=LOG_PRODUCER,
            sequence_id=int(record["seq"]),
            publish_time=int(time.time() * 1000),
        )
        record = {**record, "next": self.state.next_sequence}
        position = await self._appends.append_durable(encode_entry(metadata, encode_record(record)))
        self.state.apply(record)
        self._track(record, position)
        if record["op"] == "status" and int(record["seq"]) not in self.state.txns:
            self._advance(position)

    def _track(self, record: Record, position: Position) -> None:
        sequence = int(record["seq"])
        if record["op"] == "new":
            self._first[sequence] = position
        elif sequence not in self.state.txns:
            self._first.pop(sequence, None)

    def _advance(self, last: Position) -> None:
        """Move the log's cursor to just before the first record of the oldest ongoing
        transaction (none: before the last record, kept for the next sequence number)."""
        cursor = self._cursor
        floor = min(self._first.values(), default=last)
        if cursor is None or floor.entry_id == 0:
            return  # at a ledger's start: moved at a later end
        target = Position(floor.ledger_id, floor.entry_id - 1)
        moved = target > cursor.mark_delete_position and cursor.mark_delete(target)
        if moved and self._persist_cursors is not None and not self._storing:
            self._storing = True
            self._spawn(self._store_cursor(self._persist_cursors))

    async def _store_cursor(self, persist: Callable[[], Awaitable[None]]) -> None:
        """Store the moved cursor (one store at a time: a later move rides on the next)."""
        try:
            await persist()
        except Exception as exc:  # stored with a later move: only a longer replay meanwhile
            log.warning("transaction log cursor not stored: %s", exc)
        finally:
            self._storing = False

    # --- requests -----------------------------------------------------------------------------

    async def new_txn(self, ttl_ms: int, owner: str | None = None) -> TxnId:
        """Open a transaction of ``owner`` (the role that asked; None without authentication)
        that is aborted unless it ends within ``ttl_ms`` (0: the default,
        :data:`DEFAULT_TTL_MS`)."""
        sequence = self.state.reserve_sequence()
        now = int(time.time() * 1000)
        timeout_at = now + (ttl_ms or DEFAULT_TTL_MS)
        await self._log(CoordinatorState.new_record(sequence, timeout_at, now, owner))
        self.counts.created += 1
        self._schedule_timeout(self.state.txns[sequence])
        return self.state.txn_id(sequence)

    async def add_partitions(self, txn: TxnId, partitions: list[str]) -> None:
        """Record the partitions ``txn`` produces to (it must be OPEN)."""
        meta = self.state.check_open(txn)
        new = [p for p in dict.fromkeys(partitions) if p not in meta.partitions]
        if new:
            await self._log(CoordinatorState.partitions_record(meta.sequence, new))

    async def add_subscriptions(self, txn: TxnId, subscriptions: list[tuple[str, str]]) -> None:
        """Record the subscriptions ``txn`` acknowledges on (it must be OPEN)."""
        meta = self.state.check_open(txn)
        new = [s for s in dict.fromkeys(subscriptions) if s not in meta.subscriptions]
        if new:
            await self._log(CoordinatorState.subscriptions_record(meta.sequence, new))

    async def end(self, txn: TxnId, commit: bool) -> None:
        """Commit or abort ``txn``: returns once every partition ended it and the outcome is
        logged. An end already under way with the same outcome is waited for."""
        target = TxnStatus.COMMITTING if commit else TxnStatus.ABORTING
        meta = self.state.check_move(txn, target)
        running = self._ending.get(meta.sequence)
        if running is None:
            running = asyncio.get_running_loop().create_task(self._end(meta, commit))
            self._ending[meta.sequence] = running
            running.add_done_callback(lambda _: self._ending.pop(meta.sequence, None))
        try:
            await asyncio.shield(running)
        except EndRefusedError as exc:  # not retried (see EndRefusedError)
            log.error("ending transaction %s failed, not retried: %s", txn_text(txn), exc)
            raise
        except Exception:
            if meta.status is target and meta.sequence not in self._driving:
                self._spawn(self._drive(txn, commit))  # it is logged as ending: finish it
            raise

    async def _end(self, meta: TxnMeta, commit: bool) -> None:
        txn = self.state.txn_id(meta.sequence)
        target = TxnStatus.COMMITTING if commit else TxnStatus.ABORTING
        if meta.status is not target:
            await self._log(CoordinatorState.status_record(meta.sequence, target))
        timer = self._timers.pop(meta.sequence, None)
        if timer is not None:
            timer.cancel()
        await self._ender(txn, list(meta.partitions), list(meta.subscriptions), commit)
        final = TxnStatus.COMMITTED if commit else TxnStatus.ABORTED
        await self._log(CoordinatorState.status_record(meta.sequence, final))
        if commit:
            self.counts.committed += 1
        else:
            self.counts.aborted += 1
        log.debug("transaction %s %s", txn_text(txn), final.value)

    # --- timeouts and recovery ----------------------------------------------------------------

    def _schedule_timeout(self, meta: TxnMeta) -> None:
        # At most a day at once (a timer far out is checked again then): event loops bound
        # their timers.
        delay = min(max(0.0, meta.timeout_at_ms / 1000 - time.time()), MAX_TIMER_SECONDS)
        loop = asyncio.get_running_loop()
        self._timers[meta.sequence] = loop.call_later(delay, self._timed_out, meta.sequence)

    def _timed_out(self, sequence: int) -> None:
        self._timers.pop(sequence, None)
        meta = self.state.txns.get(sequence)
        if self.closed or meta is None or meta.status is not TxnStatus.OPEN:
            return
        if meta.timeout_at_ms / 1000 > time.time():
            self._schedule_timeout(meta)
            return
        txn = self.state.txn_id(sequence)
        log.info("transaction %s timed out: aborting it", txn_text(txn))
        self.counts.timed_out += 1
        self._spawn(self._drive(txn, commit=False))

    def _spawn(self, work: Awaitable[None]) -> None:
        async def run() -> None:
            await work

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drive(self, txn: TxnId, commit: bool) -> None:
        """End ``txn``, retrying until it is ended (or the coordinator closes)."""
        self._driving.add(txn[1])
        attempts = 0
        try:
            while not self.closed:
                try:
                    await self.end(txn, commit)
                    return
                except EndRefusedError:
                    return  # logged by end()
                except Exception as exc:  # retried: the partitions may be back soon
                    if txn[1] not in self.state.txns:
                        return
                    attempts += 1
                    if attempts & (attempts - 1) == 0:  # 1st, 2nd, 4th, 8th...: not every second
                        log.warning(
                            "ending transaction %s failed (%d attempts), retrying: %s",
                            txn_text(txn),
                            attempts,
                            exc,
                        )
                await asyncio.sleep(RETRY_SECONDS)
        finally:
            self._driving.discard(txn[1])

    async def recover(self) -> int:
        """Replay the log; then drive the transactions being ended to their end and time out
        the open ones. Returns how many records were replayed."""
        replayed = 0
        self.recover_start_ms = int(time.time() * 1000)
        start: Position | None = self._ledger.first_position()
        if self._cursor is not None and start is not None:
            start = max(start, self._ledger.next_position(self._cursor.mark_delete_position))
        last = self._ledger.last_confirmed
        while start is not None and start <= last:
            entries = await self._ledger.read_entries(start, 1000)
            if not entries:
                break
            for entry in entries:
                try:
                    record = decode_record(bytes(parse_entry(entry.data).payload))
                    self.state.apply(record)
                    self._track(record, entry.position)
                    replayed += 1
                except Exception as exc:
                    log.error("transaction log entry %s skipped: %s", entry.position, exc)
            start = self._ledger.next_position(entries[-1].position)
            await asyncio.sleep(0)
        for meta in list(self.state.txns.values()):
            txn = self.state.txn_id(meta.sequence)
            if meta.status is TxnStatus.COMMITTING:
                self._spawn(self._drive(txn, commit=True))
            elif meta.status is TxnStatus.ABORTING:
                self._spawn(self._drive(txn, commit=False))
            else:
                self._schedule_timeout(meta)
        self.recover_end_ms = int(time.time() * 1000)
        return replayed

    async def close(self) -> None:
        """Stop the timers and the recovery work."""
        self.closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

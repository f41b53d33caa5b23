"""Exactly-once writes through Pulsar transactions (``exactlyOnceMode=transaction``), for
brokers whose namespaces have deduplication off but transactions on.

**One transaction per task attempt.** Each attempt of a write task opens its own
transaction, records it in the write's log (:mod:`._txn_log`), sends its rows in it, then a
marker in it, and returns the transaction's id to the driver without committing. Attempts do
not share a transaction: the rows of a failed or speculative attempt would then be committed
with the rest, twice. Spark hands the driver's ``commit`` the message of one successful
attempt per partition; their transactions are committed, every other attempt's is aborted.

**The driver's commit** (:func:`commit_batch`): read the log of the micro-batch. ``done``:
an earlier run committed it (the driver died before Spark logged the commit): abort the new
transactions, write nothing. Otherwise finish what an earlier run began: commit again each
transaction of an earlier ``intent`` (a commit under way is waited for); one the coordinator
no longer knows has ended, and its marker says whether it was committed. Abort every other
transaction ever opened for the micro-batch. Then record an ``intent`` naming the new
transactions of the partitions not committed yet, commit them, and record ``done``.

**In a task**, the rows are kept until the transaction is sent: if a producer reconnected
(which resends unconfirmed messages, which a broker without deduplication may store twice) or
a send failed, the attempt aborts its transaction and writes the rows again in a new one.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from starquake.client.asyncio import Client, Transaction
from starquake.client.exceptions import (
    AuthorizationError,
    InvalidTxnStatusError,
    NotAllowedError,
    PulsarException,
    TopicNotFound,
    TransactionCoordinatorNotFoundError,
    TransactionNotFound,
)
from starquake.spark._options import WriteOptions
from starquake.spark._producers import ProducerResent
from starquake.spark._runtime import Session
from starquake.spark._sink import PulsarSinkError, hold_topic
from starquake.spark._txn_log import (
    LogState,
    TxnRef,
    forget_batches,
    log_topics,
    marker_committed,
    read_log,
    record,
    send_marker,
)

__all__ = ["TxnCommitMessage", "abort_batch", "check_transactions", "commit_batch", "write_task"]

log = logging.getLogger("starquake.spark")

ATTEMPTS = 3
"""Transactions a task tries before it fails (a broker restart costs one)."""


@dataclass
class TxnCommitMessage(WriterCommitMessage):
    """What one task attempt wrote, in its (open) transaction."""

    partition_id: int
    rows: int
    ref: TxnRef
    write: str | None  # the write's id (streaming: the query id), or None (no log)


RowWriter = Callable[[Client, Iterator[pa.RecordBatch], str, Transaction], Awaitable[int]]
"""Writes a task's rows in a transaction as the named producer; the rows sent."""


def _session(opts: WriteOptions) -> Session:
    return Session(opts.service_url, {**opts.client_args, "enable_transaction": True})


def _off_error(opts: WriteOptions, exc: Exception) -> PulsarSinkError:
    return PulsarSinkError(
        f"exactlyOnceMode=transaction needs transactions on the broker at {opts.service_url} "
        "(transactionCoordinatorEnabled=true in broker.conf / standalone.conf; with "
        "authentication on, the role needs consume permission on "
        f"persistent://pulsar/system/transaction_coordinator_assign): opening one failed: {exc}. "
        "Or write with exactlyOnceMode=deduplication"
    )


async def _new_txn(client: Client, opts: WriteOptions) -> Transaction:
    """A new transaction; the error naming the settings when the broker has none (other
    errors, such as a broker restarting, are raised as they are: a task tries again)."""
    try:
        return await client.new_transaction(timeout_ms=opts.transaction_timeout_ms)
    except (
        TransactionCoordinatorNotFoundError,
        NotAllowedError,
        AuthorizationError,
        TopicNotFound,
    ) as exc:
        raise _off_error(opts, exc) from exc


def check_transactions(opts: WriteOptions) -> None:
    """At planning time: open and abort a transaction, so that a broker without them fails
    the write with an error naming the settings (not in a task)."""
    with _session(opts) as session:
        txn = session.run(_new_txn(session.client, opts))
        session.run(txn.abort())


def write_task(
    opts: WriteOptions,
    write: str | None,
    batch: int,
    partition: int,
    batches: Iterator[pa.RecordBatch],
    write_rows: RowWriter,
) -> TxnCommitMessage:
    """One task attempt: the rows ``batches`` of micro-batch ``batch`` (Spark partition
    ``partition``) of write ``write`` in a new transaction, left open for the driver (None:
    a batch write without ``writeId``, which keeps no log)."""
    kept = list(batches)  # written again in a new transaction if one fails
    with _session(opts) as session:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return session.run(
                    _attempt(session.client, opts, write, batch, partition, kept, write_rows)
                )
            except (PulsarException, ProducerResent, OSError) as exc:
                if attempt == ATTEMPTS:
                    raise
                log.warning(
                    "task %d of micro-batch %d: transaction %d of %d failed, writing again: %s",
                    partition,
                    batch,
                    attempt,
                    ATTEMPTS,
                    exc,
                )
                session.run(asyncio.sleep(1.0 * attempt))
    raise AssertionError("unreachable")


async def _attempt(
    client: Client,
    opts: WriteOptions,
    write: str | None,
    batch: int,
    partition: int,
    kept: list[pa.RecordBatch],
    write_rows: RowWriter,
) -> TxnCommitMessage:
    txn = await _new_txn(client, opts)
    most, least = txn.txn_id
    ref = TxnRef(txn.txn_id, partition, b"")
    try:
        topics = _topics(opts, write)
        if topics is not None:
            await _hold(client, opts, topics)
            await record(client, topics[0], {"kind": "open", "batch": batch, **ref.to_json()})
        name = f"spark-txn-{most}-{least}-{uuid.uuid4().hex[:8]}"
        rows = await write_rows(client, iter(kept), name, txn)
        if topics is not None:
            marker = await send_marker(
                client,
                topics[1],
                txn,
                {"batch": batch, "partition": partition, "txn": [most, least]},
            )
            ref = TxnRef(txn.txn_id, partition, marker.serialize())
    except BaseException:
        try:
            await asyncio.wait_for(txn.abort(), 10)
        except Exception:  # the broker aborts it when it times out
            log.info("aborting %r failed; it ends at its timeout", txn)
        raise
    return TxnCommitMessage(partition, rows, ref, write)


def _topics(opts: WriteOptions, write: str | None) -> tuple[str, str] | None:
    if write is None or opts.transaction_log_topic is None:
        return None
    return log_topics(opts.transaction_log_topic, write)


async def _hold(client: Client, opts: WriteOptions, topics: tuple[str, str]) -> None:
    if opts.sink_subscription:
        for topic in topics:
            await hold_topic(client, topic, opts.sink_subscription)


def _refs(messages: list[Any]) -> dict[tuple[int, int], TxnRef]:
    return {m.ref.txn: m.ref for m in messages if isinstance(m, TxnCommitMessage)}


def commit_batch(opts: WriteOptions, write: str | None, batch: int, messages: list[Any]) -> int:
    """The driver's commit of micro-batch ``batch`` (see the module docstring); the
    transactions committed."""
    with _session(opts) as session:
        return session.run(_commit(session.client, opts, write, batch, _refs(messages)))


def abort_batch(opts: WriteOptions, messages: list[Any]) -> None:
    """Abort the transactions of ``messages`` (Spark aborts the micro-batch)."""
    with _session(opts) as session:
        for ref in _refs(messages).values():
            session.run(_end(session.client, opts, ref.txn, commit=False))


async def _end(
    client: Client, opts: WriteOptions, txn: tuple[int, int], commit: bool
) -> bool | None:
    """Commit or abort ``txn`` (retrying while the coordinator cannot be reached): True when
    it ended so now (or was already ending so), False when it is ending the other way,
    None when the coordinator no longer knows it (it ended earlier, either way)."""
    deadline = asyncio.get_running_loop().time() + opts.poll_timeout_s
    while True:
        handle = client.resume_transaction(txn)
        try:
            await (handle.commit() if commit else handle.abort())
            return True
        except TransactionNotFound:
            return None
        except InvalidTxnStatusError:
            return False
        except PulsarException as exc:
            if asyncio.get_running_loop().time() > deadline:
                what = "committing" if commit else "aborting"
                raise PulsarSinkError(
                    f"{what} transaction {txn[0]}:{txn[1]} failed: {exc}"
                ) from exc
            await asyncio.sleep(1.0)


async def _end_earlier_losers(
    client: Client, opts: WriteOptions, log_topic: str, states: dict[int, LogState], batch: int
) -> None:
    """Abort the attempts that lost, of the micro-batches before ``batch``; then forget those
    micro-batches (the next commits need not look at them again)."""
    for earlier, old in states.items():
        if earlier < batch:
            for txn in old.opened.keys() - old.decided.keys():
                await _end(client, opts, txn, commit=False)
    forget_batches(log_topic, batch)


async def _commit(
    client: Client,
    opts: WriteOptions,
    write: str | None,
    batch: int,
    new: dict[tuple[int, int], TxnRef],
) -> int:
    topics = _topics(opts, write)
    if topics is None:  # no log: nothing to finish, nothing to record
        for txn in new:
            await _end(client, opts, txn, commit=True)
        return len(new)
    await _hold(client, opts, topics)
    states = await read_log(client, topics[0])
    state = states.get(batch, LogState())
    await _end_earlier_losers(client, opts, topics[0], states, batch)
    if state.done:
        log.warning("micro-batch %d was committed by an earlier run: writing nothing again", batch)
        for txn in state.opened.keys() - state.decided.keys():
            await _end(client, opts, txn, commit=False)
        for txn in new:
            await _end(client, opts, txn, commit=False)
        return 0
    for txn in state.opened.keys() - state.decided.keys() - new.keys():
        await _end(client, opts, txn, commit=False)
    committed: set[int] = set()
    for txn, ref in state.decided.items():  # an earlier run's intent: finish it
        outcome = await _end(client, opts, txn, commit=True)
        if outcome is None:
            outcome = await marker_committed(client, topics[1], ref, opts.poll_timeout_s)
        if outcome:
            committed.add(ref.partition)
    if committed:
        log.warning(
            "micro-batch %d: partitions %s were committed by an earlier run",
            batch,
            sorted(committed),
        )
    chosen = [ref for ref in new.values() if ref.partition not in committed]
    for ref in new.values():
        if ref.partition in committed:
            await _end(client, opts, ref.txn, commit=False)
    await record(
        client, topics[0], {"kind": "intent", "batch": batch, "txns": [r.to_json() for r in chosen]}
    )
    unknown = []
    for ref in chosen:
        outcome = await _end(client, opts, ref.txn, commit=True)
        if outcome is None:  # ended before: the answer to this commit was lost, or it timed out
            unknown.append(ref)
        elif not outcome:
            raise _aborted(opts, batch, ref)
    for ref in unknown:  # the others have ended: nothing holds the markers back
        if not await marker_committed(client, topics[1], ref, opts.poll_timeout_s):
            raise _aborted(opts, batch, ref)
    await record(client, topics[0], {"kind": "done", "batch": batch})
    return len(chosen)


def _aborted(opts: WriteOptions, batch: int, ref: TxnRef) -> PulsarSinkError:
    return PulsarSinkError(
        f"transaction {ref.txn[0]}:{ref.txn[1]} of micro-batch {batch} was aborted before the "
        "driver committed it (did the micro-batch outlast the option transactionTimeoutMs, "
        f"{opts.transaction_timeout_ms} ms?); the micro-batch is written again when the query "
        "restarts"
    )

"""The commit log of a transactional write (``exactlyOnceMode=transaction``).

Each write (a streaming query, or a batch write with a ``writeId``) keeps two topics next to
``transactionLogTopic`` (by default ``<topic>-spark-txn``), suffixed with the write's id:

* the **log** ``<base>-<write>``: plain messages (never in a transaction, so always readable),
  JSON records ``open`` (a task attempt opened this transaction for this micro-batch and
  partition: written before the transaction is used), ``intent`` (the driver is about to
  commit these transactions: written before the first commit) and ``done`` (all committed);
* the **markers** ``<base>-<write>-markers``: one message per task attempt, sent inside the
  attempt's transaction after its rows, so it is readable exactly when those rows are.

A transaction that was in an ``intent`` and that the coordinator no longer knows has ended,
committed or aborted (its timeout): its marker tells which (see :func:`marker_committed`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from starquake.client import MessageId
from starquake.client.asyncio import Client, Transaction
from starquake.spark._sink import PulsarSinkError

__all__ = [
    "LogState",
    "TxnRef",
    "forget_batches",
    "log_topics",
    "marker_committed",
    "read_log",
    "record",
]

TxnId = tuple[int, int]


@dataclass(frozen=True)
class TxnRef:
    """A task attempt's transaction: its id, its Spark partition, and its marker's id."""

    txn: TxnId
    partition: int
    marker: bytes  # MessageId.serialize() of the marker (b"": none)

    def to_json(self) -> dict[str, Any]:
        return {"txn": list(self.txn), "partition": self.partition, "marker": self.marker.hex()}

    @classmethod
    def of(cls, data: dict[str, Any]) -> TxnRef:
        most, least = data["txn"]
        return cls((int(most), int(least)), int(data["partition"]), bytes.fromhex(data["marker"]))


@dataclass
class LogState:
    """What the log says of one micro-batch of a write."""

    opened: dict[TxnId, TxnRef] = field(default_factory=dict)
    decided: dict[TxnId, TxnRef] = field(default_factory=dict)  # in an intent
    done: bool = False


def log_topics(base: str, write: str) -> tuple[str, str]:
    """(log topic, markers topic) of write ``write``."""
    return f"{base}-{write}", f"{base}-{write}-markers"


async def record(client: Client, topic: str, data: dict[str, Any]) -> MessageId:
    """Append one plain record to the log ``topic`` (waits until it is stored)."""
    producer = await client.create_producer(topic, batching_enabled=False)
    try:
        return await producer.send(json.dumps(data).encode())
    finally:
        await producer.close()


# What this process read of each log so far: the micro-batches' states and the id of the last
# record read. Records are only appended, so the next read takes only the new ones: a
# long-running query's commit does not read its whole history again each micro-batch.
_SEEN: dict[str, tuple[dict[int, LogState], bytes]] = {}


async def read_log(client: Client, topic: str) -> dict[int, LogState]:
    """Every record of the log ``topic`` by micro-batch (but those this process forgot with
    :func:`forget_batches`), reading only what was appended since this process's last read."""
    states, last = _SEEN.get(topic, ({}, b""))
    start = MessageId.deserialize(last) if last else MessageId.earliest
    reader = await client.create_reader(topic, start)  # after the last record read
    try:
        while await reader.has_message_available():
            message = await reader.read_next()
            last = message.message_id().serialize()
            _SEEN[topic] = (states, last)
            data = json.loads(message.data())
            state = states.setdefault(int(data["batch"]), LogState())
            kind = data["kind"]
            if kind == "open":
                ref = TxnRef.of(data)
                state.opened[ref.txn] = ref
            elif kind == "intent":
                for item in data["txns"]:
                    ref = TxnRef.of(item)
                    state.decided[ref.txn] = ref
            elif kind == "done":
                state.done = True
    finally:
        await reader.close()
    return states


def forget_batches(topic: str, below: int) -> None:
    """Forget the micro-batches before ``below`` (their leftovers were ended): the next
    :func:`read_log` of this process no longer returns them, unless new records name them."""
    seen = _SEEN.get(topic)
    if seen is not None:
        for batch in [b for b in seen[0] if b < below]:
            del seen[0][batch]


async def send_marker(
    client: Client, topic: str, txn: Transaction, data: dict[str, Any]
) -> MessageId:
    """Send the marker of a task attempt in its transaction ``txn``; its message id."""
    producer = await client.create_producer(topic, batching_enabled=False)
    try:
        return await producer.send(json.dumps(data).encode(), txn=txn)
    finally:
        await producer.close()


async def marker_committed(client: Client, topic: str, ref: TxnRef, wait_s: float) -> bool:
    """Whether the transaction ``ref``, which has ended, was committed: whether its marker is
    readable. Call it once no other transaction of the write that began before ``ref``'s may
    still be open (they are ended first), so that nothing holds the markers' read position
    below the marker: a consumer then gets the marker if it was committed, and skips it if
    it was aborted. Retries for ``wait_s`` while the topic cannot be read."""
    if not ref.marker:
        return False
    marker = MessageId.deserialize(ref.marker)
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        try:
            reader = await client.create_reader(topic, marker, start_message_id_inclusive=True)
            try:
                if not await reader.has_message_available():
                    return False  # nothing readable from the marker on: it was aborted
                found = (await reader.read_next()).message_id()
            finally:
                await reader.close()
        except Exception as exc:  # the broker may be restarting
            if asyncio.get_running_loop().time() > deadline:
                raise PulsarSinkError(f"reading the transaction markers of {topic}: {exc}") from exc
            await asyncio.sleep(1.0)
            continue
        return (found.ledger_id(), found.entry_id()) == (marker.ledger_id(), marker.entry_id())

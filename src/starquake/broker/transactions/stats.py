"""The transactions' statistics as Pulsar's admin API answers them (its JSON field names):
``TransactionCoordinatorStats``, ``TransactionMetadata``, ``TransactionBufferStats`` and
``TransactionPendingAckStats``. Read from the in-memory state; nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from starquake.broker.transactions.buffer import TopicTransactionBuffer
from starquake.broker.transactions.coordinator import TransactionCoordinator
from starquake.broker.transactions.errors import TxnId
from starquake.broker.transactions.pending_ack import PendingAckHandle
from starquake.broker.transactions.state import TxnMeta, TxnStatus

READY = "Ready"
"""The state of a coordinator, buffer or pending-ack store that serves."""


def txn_key(txn: TxnId) -> str:
    """Pulsar's text of a transaction id: ``(mostSigBits,leastSigBits)``."""
    return f"({txn[0]},{txn[1]})"


def ongoing(coordinator: TransactionCoordinator) -> list[TxnMeta]:
    """The coordinator's transactions not ended yet."""
    return list(coordinator.state.txns.values())


def low_water_mark(coordinator: TransactionCoordinator) -> int:
    """The highest sequence below which every transaction has ended (Pulsar's lowWaterMark:
    the oldest ongoing one's less one; with none ongoing, the last handed out)."""
    txns = coordinator.state.txns
    return (min(txns) if txns else coordinator.state.next_sequence) - 1


def coordinator_stats(coordinator: TransactionCoordinator) -> dict[str, Any]:
    """``TransactionCoordinatorStats``."""
    return {
        "state": "Close" if coordinator.closed else READY,
        "leastSigBits": coordinator.state.next_sequence - 1,
        "lowWaterMark": low_water_mark(coordinator),
        "ongoingTxnSize": len(coordinator.state.txns),
        "recoverStartTime": coordinator.recover_start_ms,
        "recoverEndTime": coordinator.recover_end_ms,
    }


def buffer_stats(buffer: TopicTransactionBuffer) -> dict[str, Any]:
    """``TransactionBufferStats``: the max read position is the first entry of the oldest
    open transaction, or the last entry when nothing is held back."""
    held = buffer.max_read
    position = held if held is not None else buffer.last_position
    return {
        "state": READY,
        "maxReadPosition": str(position),
        "lastSnapshotTimestamps": buffer.last_snapshot_ms,
        "ongoingTxnSize": len(buffer.open),
        "recoverStartTime": buffer.recover_start_ms,
        "recoverEndTime": buffer.recover_end_ms,
    }


def pending_ack_stats(handle: PendingAckHandle | None) -> dict[str, Any]:
    """``TransactionPendingAckStats`` (a subscription never acknowledged on in a transaction
    has no store yet: ``None``'s state, as Pulsar's lazily initialised one)."""
    if handle is None:
        return {"state": "None", "ongoingTxnSize": 0}
    return {"state": READY, "ongoingTxnSize": len(handle.state.transactions())}


def metadata(
    coordinator: TransactionCoordinator,
    meta: TxnMeta,
    buffers: dict[str, TopicTransactionBuffer],
    handles: dict[tuple[str, str], PendingAckHandle],
) -> dict[str, Any]:
    """``TransactionMetadata``: the transaction (with its owner: the role that opened it,
    None without authentication), what it produced (per partition: where its
    first message is, whether it is aborted there) and acknowledged (per partition and
    subscription: its pending cumulative ack)."""
    txn = coordinator.state.txn_id(meta.sequence)
    produced: dict[str, Any] = {}
    for name in meta.partitions:
        buffer = buffers.get(name)
        positions = buffer.open.get(txn) if buffer is not None else None
        produced[name] = {
            "startPosition": str(positions[0]) if positions else None,
            "aborted": meta.status in (TxnStatus.ABORTING, TxnStatus.ABORTED),
        }
    acked: dict[str, dict[str, Any]] = {}
    for topic, sub in meta.subscriptions:
        handle = handles.get((topic, sub))
        cumulative = handle.state.cumulative if handle is not None else None
        position = cumulative[1] if cumulative is not None and cumulative[0] == txn else None
        acked.setdefault(topic, {})[sub] = {
            "cumulativeAckPosition": str(position) if position is not None else None
        }
    return {
        "txnId": txn_key(txn),
        "status": meta.status.value,
        "openTimestamp": meta.opened_at_ms,
        "timeoutAt": meta.timeout_at_ms,
        "owner": meta.owner,
        "producedPartitions": produced,
        "ackedPartitions": acked,
    }

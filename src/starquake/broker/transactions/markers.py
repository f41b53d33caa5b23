"""The entries a transaction leaves in a topic: its messages carry its id in their metadata
(``txnid_most_bits`` / ``txnid_least_bits``), and its end is a marker entry whose metadata has
``marker_type`` TXN_COMMIT or TXN_ABORT with the id, as Pulsar writes them. Markers are never
dispatched."""

from __future__ import annotations

import time

from starquake.broker.transactions.errors import TxnId
from starquake.protocol.framing import encode_entry, entry_metadata
from starquake.protocol.wire import pb

TXN_COMMIT = 21
"""Pulsar's MarkerType TXN_COMMIT."""
TXN_ABORT = 22
"""Pulsar's MarkerType TXN_ABORT."""
MARKER_PRODUCER = "__txn_marker"


def marker_entry(txn: TxnId, commit: bool) -> bytes:
    """The marker entry that ends ``txn`` on a topic."""
    metadata = pb.MessageMetadata(
        producer_name=MARKER_PRODUCER,
        sequence_id=0,
        publish_time=int(time.time() * 1000),
        marker_type=TXN_COMMIT if commit else TXN_ABORT,
        txnid_most_bits=txn[0],
        txnid_least_bits=txn[1],
    )
    return encode_entry(metadata, b"")


class EntryKind:
    """What a stored entry is to the transaction buffer."""

    PLAIN = 0
    TXN_MESSAGE = 1
    COMMIT = 2
    ABORT = 3


def classify(data: bytes | memoryview) -> tuple[int, TxnId]:
    """The kind of a stored entry and its transaction id ((0, 0) for a plain entry); an entry
    that cannot be parsed counts as plain."""
    try:
        metadata = entry_metadata(data)
    except Exception:
        return EntryKind.PLAIN, (0, 0)
    if not metadata.HasField("txnid_most_bits") and not metadata.HasField("txnid_least_bits"):
        return EntryKind.PLAIN, (0, 0)
    txn = (metadata.txnid_most_bits, metadata.txnid_least_bits)
    if metadata.HasField("marker_type"):
        if metadata.marker_type == TXN_COMMIT:
            return EntryKind.COMMIT, txn
        if metadata.marker_type == TXN_ABORT:
            return EntryKind.ABORT, txn
        return EntryKind.PLAIN, (0, 0)
    return EntryKind.TXN_MESSAGE, txn

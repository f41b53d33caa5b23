"""A transaction coordinator's state and the log records that change it (no I/O here).

Pulsar's ``TxnStatus``: a transaction is OPEN until END_TXN moves it to COMMITTING or ABORTING;
once every partition ended it, it is COMMITTED or ABORTED and the coordinator forgets it (a
later request naming it gets TransactionNotFound). Moving to the status it already has is
allowed (a repeated END_TXN drives the same end again); any other move is InvalidTxnStatus.

Every change is a record appended to the coordinator's transaction log before it is applied;
replaying the log in order rebuilds the state. Sequence numbers never repeat: the next one is
past every one the log ever recorded.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from starquake.broker.transactions.errors import (
    InvalidTxnStatusError,
    TransactionNotFoundError,
    TxnId,
    txn_text,
)


class TxnStatus(enum.Enum):
    """Pulsar's TxnStatus."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"


ALLOWED = {
    TxnStatus.OPEN: {TxnStatus.COMMITTING, TxnStatus.ABORTING},
    TxnStatus.COMMITTING: {TxnStatus.COMMITTED},
    TxnStatus.ABORTING: {TxnStatus.ABORTED},
}
"""The moves from each status (besides staying)."""
FINAL = frozenset({TxnStatus.COMMITTED, TxnStatus.ABORTED})


@dataclass
class TxnMeta:
    """One transaction the coordinator knows."""

    sequence: int
    timeout_at_ms: int
    status: TxnStatus = TxnStatus.OPEN
    opened_at_ms: int = 0
    """When it was opened (0: logged before this was recorded)."""
    owner: str | None = None
    """The authenticated role of the connection that opened it (None: authentication was off,
    or logged before this was recorded): only it, or a super user, may add to it or end it."""
    partitions: list[str] = field(default_factory=list)
    subscriptions: list[tuple[str, str]] = field(default_factory=list)


Record = dict[str, Any]


def encode_record(record: Record) -> bytes:
    """A log record's stored form (JSON)."""
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


def decode_record(data: bytes) -> Record:
    """A stored log record (ValueError when it is not one)."""
    record = json.loads(data)
    if not isinstance(record, dict) or "op" not in record or "seq" not in record:
        raise ValueError(f"not a transaction log record: {data[:80]!r}")
    return record


class CoordinatorState:
    """The transactions of coordinator ``tc_id`` (see the module docstring)."""

    def __init__(self, tc_id: int) -> None:
        self.tc_id = tc_id
        self.txns: dict[int, TxnMeta] = {}
        self.next_sequence = 0

    def txn_id(self, sequence: int) -> TxnId:
        """The transaction id of sequence number ``sequence``."""
        return (self.tc_id, sequence)

    def get(self, txn: TxnId) -> TxnMeta:
        """The transaction ``txn``, or TransactionNotFound."""
        meta = self.txns.get(txn[1]) if txn[0] == self.tc_id else None
        if meta is None:
            raise TransactionNotFoundError(f"Transaction {txn_text(txn)} not found")
        return meta

    def check_open(self, txn: TxnId) -> TxnMeta:
        """The transaction ``txn`` if it is OPEN; InvalidTxnStatus or TransactionNotFound."""
        meta = self.get(txn)
        if meta.status is not TxnStatus.OPEN:
            raise InvalidTxnStatusError(
                f"Expect Txn {txn_text(txn)} to be in OPEN status but it is {meta.status.value}"
            )
        return meta

    def check_move(self, txn: TxnId, status: TxnStatus) -> TxnMeta:
        """The transaction ``txn`` if it may move to ``status``."""
        meta = self.get(txn)
        if status is not meta.status and status not in ALLOWED.get(meta.status, ()):
            raise InvalidTxnStatusError(
                f"Expect Txn {txn_text(txn)} to be in "
                f"{' or '.join(sorted(s.value for s in ALLOWED if status in ALLOWED[s]))} "
                f"status but it is {meta.status.value}"
            )
        return meta

    def reserve_sequence(self) -> int:
        """A sequence number for a new transaction (never handed out again)."""
        sequence = self.next_sequence
        self.next_sequence += 1
        return sequence

    # --- records ------------------------------------------------------------------------------

    @staticmethod
    def new_record(
        sequence: int, timeout_at_ms: int, opened_at_ms: int = 0, owner: str | None = None
    ) -> Record:
        """The record of a new transaction (its owner kept with it, as Pulsar's transaction
        log entry keeps it: a restart knows who may end it)."""
        record: Record = {"op": "new", "seq": sequence, "timeout_at": timeout_at_ms}
        record["at"] = opened_at_ms
        if owner is not None:
            record["owner"] = owner
        return record

    @staticmethod
    def partitions_record(sequence: int, partitions: list[str]) -> Record:
        """The record of partitions added to a transaction."""
        return {"op": "partitions", "seq": sequence, "add": partitions}

    @staticmethod
    def subscriptions_record(sequence: int, subscriptions: list[tuple[str, str]]) -> Record:
        """The record of subscriptions added to a transaction."""
        return {"op": "subscriptions", "seq": sequence, "add": [list(s) for s in subscriptions]}

    @staticmethod
    def status_record(sequence: int, status: TxnStatus) -> Record:
        """The record of a transaction's new status."""
        return {"op": "status", "seq": sequence, "status": status.value}

    def apply(self, record: Record) -> None:
        """Apply a log record (replayed, or just made durable)."""
        op = record["op"]
        sequence = int(record["seq"])
        self.next_sequence = max(self.next_sequence, sequence + 1, int(record.get("next", 0)))
        if op == "new":
            owner = record.get("owner")
            self.txns[sequence] = TxnMeta(
                sequence,
                int(record["timeout_at"]),
                opened_at_ms=int(record.get("at", 0)),
                owner=owner if isinstance(owner, str) else None,
            )
            return
        meta = self.txns.get(sequence)
        if meta is None:
            return  # a record of a transaction already ended (its end was logged first)
        if op == "partitions":
            meta.partitions.extend(p for p in record["add"] if p not in meta.partitions)
        elif op == "subscriptions":
            for topic, name in record["add"]:
                if (topic, name) not in meta.subscriptions:
                    meta.subscriptions.append((topic, name))
        elif op == "status":
            meta.status = TxnStatus(record["status"])
            if meta.status in FINAL:
                del self.txns[sequence]

"""The coordinator's state machine and its log replay, as a hypothesis model.

Every change is logged before it is applied (as the coordinator does: a record is applied once
durable); a crash keeps the log and loses the rest. Properties: replaying the log rebuilds the
state exactly (owners included); a transaction id handed out is never handed out again,
crashes included; only Pulsar's status moves happen, others are refused with InvalidTxnStatus;
an ended transaction is forgotten (TransactionNotFound).
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from starquake.broker.transactions.errors import InvalidTxnStatusError, TransactionNotFoundError
from starquake.broker.transactions.state import (
    ALLOWED,
    CoordinatorState,
    Record,
    TxnStatus,
    decode_record,
    encode_record,
)

TC = 3


def _snapshot(state: CoordinatorState) -> dict[int, tuple[str, list[str], int, str | None]]:
    return {
        seq: (meta.status.value, list(meta.partitions), meta.timeout_at_ms, meta.owner)
        for seq, meta in state.txns.items()
    }


class CoordinatorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[bytes] = []
        self.state = CoordinatorState(TC)
        self.handed_out: set[int] = set()
        self.ended: set[int] = set()

    def _logged(self, record: Record) -> None:
        self.log.append(encode_record(record))
        self.state.apply(record)

    @rule(timeout=st.integers(0, 10**6), owner=st.sampled_from([None, "alice", "bob"]))
    def new_txn(self, timeout: int, owner: str | None) -> None:
        sequence = self.state.reserve_sequence()
        assert sequence not in self.handed_out
        self._logged(CoordinatorState.new_record(sequence, timeout, owner=owner))
        self.handed_out.add(sequence)
        assert self.state.txns[sequence].owner == owner

    @rule()
    def reserve_then_crash_before_logging(self) -> None:
        self.state.reserve_sequence()  # never answered: may be handed out after the crash
        self.crash()

    @precondition(lambda self: bool(self.handed_out))
    @rule(data=st.data(), partition=st.sampled_from(["a", "b", "c"]))
    def add_partition(self, data: st.DataObject, partition: str) -> None:
        sequence = data.draw(st.sampled_from(sorted(self.handed_out)))
        txn = self.state.txn_id(sequence)
        try:
            meta = self.state.check_open(txn)
        except TransactionNotFoundError:
            assert sequence in self.ended
            return
        except InvalidTxnStatusError:
            assert self.state.txns[sequence].status is not TxnStatus.OPEN
            return
        self._logged(CoordinatorState.partitions_record(sequence, [partition]))
        assert partition in meta.partitions

    @precondition(lambda self: bool(self.handed_out))
    @rule(data=st.data(), status=st.sampled_from(list(TxnStatus)))
    def move(self, data: st.DataObject, status: TxnStatus) -> None:
        sequence = data.draw(st.sampled_from(sorted(self.handed_out)))
        txn = self.state.txn_id(sequence)
        before = self.state.txns.get(sequence)
        try:
            self.state.check_move(txn, status)
        except TransactionNotFoundError:
            assert before is None and sequence in self.ended
            return
        except InvalidTxnStatusError:
            assert before is not None
            assert status is not before.status
            assert status not in ALLOWED.get(before.status, set())
            return
        assert before is not None
        assert status is before.status or status in ALLOWED[before.status]
        self._logged(CoordinatorState.status_record(sequence, status))
        if status in (TxnStatus.COMMITTED, TxnStatus.ABORTED):
            self.ended.add(sequence)
            with pytest.raises(TransactionNotFoundError):
                self.state.get(txn)

    @rule()
    def crash(self) -> None:
        recovered = CoordinatorState(TC)
        for data in self.log:
            recovered.apply(decode_record(data))
        assert _snapshot(recovered) == _snapshot(self.state)
        self.state = recovered

    @invariant()
    def next_sequence_is_past_every_handed_out_one(self) -> None:
        assert all(seq < self.state.next_sequence for seq in self.handed_out)

    @invariant()
    def ended_transactions_are_forgotten(self) -> None:
        assert not self.ended & set(self.state.txns)


CoordinatorModel.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None
)
test_coordinator_model = CoordinatorModel.TestCase


def test_a_record_that_is_no_record_is_refused() -> None:
    with pytest.raises(ValueError):
        decode_record(b'{"seq": 1}')

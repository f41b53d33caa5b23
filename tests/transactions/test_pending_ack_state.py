"""The pending-ack state against a simple model: individual (whole and batch-index) and
cumulative acks in transactions, ordinary acks, commits and aborts, and the conflicts."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.broker.transactions.errors import TransactionConflictError
from starquake.broker.transactions.log_topics import subscriptions_of_logs
from starquake.broker.transactions.pending_state import PendingAckState, TxnAck
from starquake.storage import Position

TXNS = [(0, 1), (0, 2), (0, 3)]
ENTRIES = 6
BATCH = 5  # position 5 holds a batch of 3 messages
BATCH_SIZE = 3


def _pos(i: int) -> Position:
    return Position(1, i)


@dataclass
class Model:
    """The cursor and what each transaction holds, kept the obvious way."""

    mark_delete: int = -1
    acked: set[int] = field(default_factory=set)
    acked_indexes: set[int] = field(default_factory=set)
    held: dict[int, dict[tuple[int, int], frozenset[int] | None]] = field(default_factory=dict)
    cumulative: tuple[tuple[int, int], int] | None = None

    def is_acked(self, i: int, indexes: frozenset[int] | None) -> bool:
        if i <= self.mark_delete or i in self.acked:
            return True
        return indexes is not None and bool(indexes & self.acked_indexes)

    def ack(self, txn: tuple[int, int], i: int, indexes: frozenset[int] | None) -> bool:
        holders = self.held.get(i, {})
        if self.is_acked(i, indexes) or any(
            indexes is None or h is None or h & indexes for h in holders.values()
        ):
            return False
        previous = holders.get(txn)
        if previous is not None and indexes is not None:
            indexes = previous | indexes
        self.held.setdefault(i, {})[txn] = indexes
        return True

    def cumulate(self, txn: tuple[int, int], i: int) -> bool:
        cum = self.cumulative
        if i <= self.mark_delete or (cum is not None and (cum[0] != txn or i <= cum[1])):
            return False
        self.cumulative = (txn, i)
        return True

    def end(self, txn: tuple[int, int], commit: bool) -> None:
        for i in list(self.held):
            indexes = self.held[i].pop(txn, "none")
            if not self.held[i]:
                del self.held[i]
            if commit and indexes is None:
                self.acked.add(i)
            elif commit and indexes != "none":
                assert isinstance(indexes, frozenset)
                self.acked_indexes |= indexes
                if len(self.acked_indexes) == BATCH_SIZE:
                    self.acked.add(i)
        if self.cumulative is not None and self.cumulative[0] == txn:
            if commit:
                self.mark_delete = max(self.mark_delete, self.cumulative[1])
            self.cumulative = None

    def holds(self, i: int) -> bool:
        return any(h is None for h in self.held.get(i, {}).values())


txn_ids = st.sampled_from(TXNS)
ops = st.one_of(
    st.tuples(st.just("ack"), txn_ids, st.integers(0, ENTRIES - 1), st.none()),
    st.tuples(
        st.just("ack"),
        txn_ids,
        st.just(BATCH),
        st.frozensets(st.integers(0, BATCH_SIZE - 1), min_size=1, max_size=2),
    ),
    st.tuples(st.just("cumulative"), txn_ids, st.integers(0, ENTRIES - 1), st.none()),
    st.tuples(st.sampled_from(["commit", "abort"]), txn_ids, st.none(), st.none()),
    st.tuples(st.just("plain"), st.none(), st.integers(0, ENTRIES - 2), st.none()),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(ops, max_size=30))
def test_pending_acks_follow_the_model(steps: list[tuple[object, ...]]) -> None:
    model = Model()
    state = PendingAckState("[t][s]")

    def is_acked(position: Position, indexes: frozenset[int] | None) -> bool:
        return model.is_acked(position.entry_id, indexes)

    for op, txn, i, indexes in steps:
        if op == "ack":
            assert isinstance(txn, tuple) and isinstance(i, int)
            ack = TxnAck(_pos(i), indexes, BATCH_SIZE if indexes else 0)  # type: ignore[arg-type]
            expected = model.ack(txn, i, indexes)  # type: ignore[arg-type]
            try:
                state.check_individual(txn, [ack], is_acked)
                state.add_individual(txn, [ack])
                accepted = True
            except TransactionConflictError:
                accepted = False
            assert accepted == expected
        elif op == "cumulative":
            assert isinstance(txn, tuple) and isinstance(i, int)
            expected = model.cumulate(txn, i)
            try:
                state.check_cumulative(txn, _pos(i), _pos(model.mark_delete))
                state.set_cumulative(txn, _pos(i))
                accepted = True
            except TransactionConflictError:
                accepted = False
            assert accepted == expected
        elif op == "plain":
            assert isinstance(i, int)
            model.acked.add(i)
            model.held.pop(i, None)
            state.clear_position(_pos(i))
        else:
            assert isinstance(txn, tuple)
            ended = state.end(txn)
            assert all(p.entry_id in range(ENTRIES) for p in ended.individual)
            model.end(txn, op == "commit")
        assert [state.holds(_pos(j)) for j in range(ENTRIES)] == [
            model.holds(j) for j in range(ENTRIES)
        ]
    assert state.transactions() == {t for h in model.held.values() for t in h} | (
        {model.cumulative[0]} if model.cumulative else set()
    )


def test_the_logs_of_a_deleted_topic_are_told_from_those_of_longer_names() -> None:
    t = "persistent://p/n/a"
    stored = [
        t,
        f"{t}-x__transaction_pending_ack",  # a's subscription x
        f"{t}-b",  # another topic, a-b...
        f"{t}-b-y__transaction_pending_ack",  # ...whose subscription y keeps its log
        f"{t}-c-z__transaction_pending_ack",  # a's subscription c-z (no topic a-c)
        "persistent://p/n/other-q__transaction_pending_ack",
    ]
    assert subscriptions_of_logs(t, stored) == ["x", "c-z"]

"""MessageDeduplication: pushed/persisted watermarks, rollback, eviction, snapshot + recovery."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from dedup_helpers import EmptyLedger, ready_dedup
from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.broker.dedup import DedupStatus, MessageDeduplication
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import encode_entry
from starquake.storage import (
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
    read_now,
)

TOPIC = "persistent://public/default/dedup-partition-0"
NOT_DUP, DUPLICATE, UNKNOWN = DedupStatus.NOT_DUP, DedupStatus.DUPLICATE, DedupStatus.UNKNOWN


@contextmanager
def open_ledger(
    directory: Path, **config: Any
) -> Iterator[tuple[ManagedLedgerFactory, ManagedLedger]]:
    store = SqliteMetadataStore(directory / "meta.db")
    factory = ManagedLedgerFactory(
        directory / "data", store, ManagedLedgerConfig(**config), clock=lambda: 1000.0
    )
    try:
        yield factory, factory.open(TOPIC)
    finally:
        factory.close()
        store.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[tuple[ManagedLedgerFactory, ManagedLedger]]:
    with open_ledger(tmp_path) as opened:
        yield opened


def commit(factory: ManagedLedgerFactory) -> None:
    pending = factory.take_pending()
    if pending is not None:
        pending.execute()
        pending.finish()


def entry(
    producer: str,
    seq: int,
    highest: int = 0,
    *,
    marker: bool = False,
    chunk: tuple[int, int] | None = None,
    batch: int = 0,
) -> bytes:
    md = pb.MessageMetadata(producer_name=producer, sequence_id=seq, publish_time=1)
    if batch:
        md.num_messages_in_batch = batch
    if highest:
        md.highest_sequence_id = highest
    if marker:
        md.marker_type = 1
    if chunk is not None:
        md.chunk_id, md.num_chunks_from_msg = chunk
    return encode_entry(md, b"payload")


def ready(**kwargs: int) -> MessageDeduplication:
    return ready_dedup(TOPIC, **kwargs)


class Broker:
    """Drives a deduplication like PersistentTopic does: check, append, commit, on_persisted."""

    def __init__(
        self, dedup: MessageDeduplication, factory: ManagedLedgerFactory, ml: ManagedLedger
    ) -> None:
        self.dedup, self.factory, self.ml = dedup, factory, ml
        self.pending: list[tuple[str, int, int, Position, bool]] = []

    def send(
        self, producer: str, seq: int, highest: int = 0, *, marker: bool = False
    ) -> DedupStatus:
        status = self.dedup.check(producer, seq, highest, is_marker=marker)
        if status is NOT_DUP:
            position = self.ml.append(entry(producer, seq, highest, marker=marker))
            self.pending.append((producer, seq, highest, position, marker))
        return status

    def commit(self) -> None:
        commit(self.factory)
        for producer, seq, highest, position, marker in self.pending:
            self.dedup.on_persisted(producer, seq, highest, position, is_marker=marker)
        self.pending.clear()


# ---------------------------------------------------------------------- transitions


def test_not_dup_unknown_duplicate_transitions() -> None:
    d = ready()
    assert d.last_sequence_id("p") == -1
    assert d.check("p", 0, 0) is NOT_DUP
    assert d.check("p", 1, 0) is NOT_DUP
    assert d.last_sequence_id("p") == 1
    # both still in flight: a resend is of unknown status
    assert d.check("p", 0, 0) is UNKNOWN
    assert d.check("p", 1, 0) is UNKNOWN
    d.on_persisted("p", 0, 0, Position(1, 0))
    assert d.check("p", 0, 0) is DUPLICATE
    assert d.check("p", 1, 0) is UNKNOWN
    d.on_persisted("p", 1, 0, Position(1, 1))
    assert d.check("p", 1, 0) is DUPLICATE
    assert d.check("p", 2, 0) is NOT_DUP
    assert d.highest_persisted("p") == 1
    assert d.last_sequence_id("p") == 2


def test_producers_are_independent() -> None:
    d = ready()
    assert d.check("a", 5, 0) is NOT_DUP
    assert d.check("b", 0, 0) is NOT_DUP
    assert d.check("b", 5, 0) is NOT_DUP
    d.on_persisted("a", 5, 0, Position(1, 0))
    assert d.check("a", 5, 0) is DUPLICATE
    assert d.check("b", 5, 0) is UNKNOWN
    assert d.last_sequence_id("a") == 5
    assert d.last_sequence_id("b") == 5


def test_gaps_in_sequence_ids_are_accepted() -> None:
    d = ready()
    assert d.check("p", 10, 0) is NOT_DUP
    assert d.check("p", 11, 0) is NOT_DUP
    assert d.check("p", 100, 0) is NOT_DUP
    assert d.check("p", 50, 0) is UNKNOWN


def test_batch_uses_highest_sequence_id() -> None:
    d = ready()
    assert d.check("p", 0, 9) is NOT_DUP  # a 10-message batch 0..9
    assert d.last_sequence_id("p") == 9
    assert d.check("p", 5, 0) is UNKNOWN
    d.on_persisted("p", 0, 9, Position(1, 0))
    assert d.highest_persisted("p") == 9
    assert d.check("p", 9, 0) is DUPLICATE
    assert d.check("p", 0, 9) is DUPLICATE
    assert d.check("p", 10, 19) is NOT_DUP
    # a highest_sequence_id below sequence_id (unset or stale) is ignored
    assert d.check("p", 20, 3) is NOT_DUP
    assert d.last_sequence_id("p") == 20


def test_marker_and_non_last_chunks_bypass_dedup() -> None:
    d = ready()
    assert d.check("p", 3, 0) is NOT_DUP
    d.on_persisted("p", 3, 0, Position(1, 0))
    assert d.check("p", 3, 0, is_marker=True) is NOT_DUP
    assert d.check("p", 3, 0, is_last_chunk=False) is NOT_DUP
    d.on_persisted("p", 99, 0, Position(1, 1), is_marker=True)
    d.on_persisted("p", 99, 0, Position(1, 2), is_last_chunk=False)
    assert d.highest_persisted("p") == 3
    assert d.last_sequence_id("p") == 3
    # the last chunk carries the message's dedup decision
    assert d.check("p", 4, 0, is_last_chunk=True) is NOT_DUP


def test_failure_rolls_back_so_the_retry_is_accepted() -> None:
    d = ready()
    for seq in range(3):
        assert d.check("p", seq, 0) is NOT_DUP
    d.on_persisted("p", 0, 0, Position(1, 0))
    d.on_failed("p", 2, 0)
    assert d.last_sequence_id("p") == 1
    assert d.check("p", 1, 0) is UNKNOWN  # still in flight before the failed one
    assert d.check("p", 2, 0) is NOT_DUP  # the retry
    d.on_failed("p", 1, 0)
    d.on_failed("p", 2, 0)
    assert d.last_sequence_id("p") == 0  # never below persisted
    assert d.check("p", 0, 0) is DUPLICATE
    assert d.check("p", 1, 0) is NOT_DUP


def test_failure_of_a_new_producer_forgets_it() -> None:
    d = ready()
    assert d.check("p", 0, 4) is NOT_DUP
    d.on_failed("p", 0, 4)
    assert d.last_sequence_id("p") == -1
    assert len(d) == 0
    assert d.check("p", 0, 4) is NOT_DUP
    d.on_failed("unknown", 1, 0)  # harmless


def test_reset_pushed_rolls_every_producer_back_to_persisted() -> None:
    d = ready()
    d.check("a", 0, 0)
    d.check("a", 1, 0)
    d.check("b", 7, 0)
    d.on_persisted("a", 0, 0, Position(1, 0))
    d.reset_pushed()
    assert d.pushed_state() == {"a": 0}
    assert d.check("a", 1, 0) is NOT_DUP
    assert d.check("b", 7, 0) is NOT_DUP


# ---------------------------------------------------------------------- enabled / recovering


def test_disabled_accepts_everything_and_tracks_nothing() -> None:
    d = MessageDeduplication(TOPIC, enabled=False)
    assert d.check("p", 1, 0) is NOT_DUP
    assert d.check("p", 1, 0) is NOT_DUP
    d.on_persisted("p", 1, 0, Position(1, 0))
    assert d.last_sequence_id("p") == -1
    assert not d.snapshot_due()
    assert read_now(d.recover(None, EmptyLedger())) == 0  # type: ignore[arg-type]
    assert not d.ready


def test_enabling_requires_recovery_and_disabling_clears() -> None:
    d = MessageDeduplication(TOPIC, enabled=True)
    assert d.enabled and not d.ready
    assert d.check("p", 1, 0) is UNKNOWN  # state incomplete: make the producer retry
    assert d.last_sequence_id("p") == -1
    read_now(d.recover(None, EmptyLedger()))  # type: ignore[arg-type]
    assert d.ready
    assert d.check("p", 1, 0) is NOT_DUP
    d.on_persisted("p", 1, 0, Position(1, 0))
    d.enabled = False
    assert not d.ready and len(d) == 0
    assert d.check("p", 1, 0) is NOT_DUP
    d.enabled = True
    assert d.check("p", 1, 0) is UNKNOWN
    d.enabled = True  # no change: still recovering
    assert not d.ready


def test_generation_changes_with_each_switch_only() -> None:
    d = MessageDeduplication(TOPIC, enabled=True)
    first = d.generation
    d.enabled = True
    assert d.generation == first
    d.enabled = False
    d.enabled = True
    assert d.generation == first + 2


# ---------------------------------------------------------------------- eviction


def test_eviction_drops_least_recently_active_producer() -> None:
    d = ready(max_producers=2)
    for i, name in enumerate(["a", "b", "c"]):
        assert d.check(name, 1, 0) is NOT_DUP
        d.on_persisted(name, 1, 0, Position(1, i))
        if name == "b":
            d.check("a", 2, 0)  # a becomes more recent than b
            d.on_persisted("a", 2, 0, Position(1, 10))
    assert set(d.persisted_state()) == {"a", "c"}
    assert d.last_sequence_id("b") == -1
    assert d.check("b", 1, 0) is NOT_DUP  # forgotten: accepted again


def test_eviction_spares_connected_and_in_flight_producers() -> None:
    d = ready(max_producers=2)
    d.producer_connected("a")
    d.check("a", 1, 0)
    d.on_persisted("a", 1, 0, Position(1, 0))
    d.check("b", 1, 0)  # in flight
    d.check("c", 1, 0)  # in flight: nobody can go yet
    assert len(d) == 3
    d.on_persisted("b", 1, 0, Position(1, 1))
    d.on_persisted("c", 1, 0, Position(1, 2))
    assert set(d.persisted_state()) == {"a", "c"}  # b was the oldest evictable
    d.producer_connected("a")
    d.producer_disconnected("a")
    assert set(d.persisted_state()) == {"a", "c"}  # still attached once
    d.check("d", 1, 0)
    d.on_persisted("d", 1, 0, Position(1, 3))
    assert set(d.persisted_state()) == {"a", "d"}
    d.producer_disconnected("a")
    d.check("e", 1, 0)
    d.on_persisted("e", 1, 0, Position(1, 4))
    assert set(d.persisted_state()) == {"d", "e"}


# ---------------------------------------------------------------------- snapshots


def test_snapshot_due_and_contents() -> None:
    d = ready(snapshot_interval_entries=3)
    for i in range(2):
        d.check("p", i, 0)
        d.on_persisted("p", i, 0, Position(4, i))
    assert not d.snapshot_due()
    d.on_persisted("q", 0, 0, Position(4, 2), is_marker=True)  # markers still count as entries
    assert d.snapshot_due()
    key, value = d.take_snapshot()
    assert key == MessageDeduplication.metadata_key(TOPIC)
    assert key.startswith("/starquake/dedup/") and "/" not in key[len("/starquake/dedup/") :]
    assert json.loads(value) == {"version": 1, "position": [4, 2], "producers": [["p", 1]]}
    assert not d.snapshot_due()


def test_metadata_key_is_distinct_per_topic() -> None:
    assert MessageDeduplication.metadata_key("a/b") != MessageDeduplication.metadata_key("a%2Fb")


def test_recover_from_log_without_snapshot(
    ledger: tuple[ManagedLedgerFactory, ManagedLedger],
) -> None:
    factory, ml = ledger
    ml.append(entry("a", 0))
    ml.append(entry("a", 1, 5))  # batch 1..5
    ml.append(entry("b", 3))
    ml.append(b"\x00\x00\xff\xffnot an entry")
    ml.append(entry("c", 9, marker=True))
    ml.append(entry("b", 4, chunk=(0, 2)))  # first chunk of an incomplete message
    commit(factory)
    ml.append(entry("b", 4, chunk=(0, 3)))  # not yet committed: invisible
    d = MessageDeduplication(TOPIC, enabled=True, snapshot_interval_entries=6)
    assert read_now(d.recover(None, ml)) == 6
    assert d.ready
    assert d.persisted_state() == {"a": 5, "b": 3}
    assert d.pushed_state() == {"a": 5, "b": 3}
    assert d.check("a", 5, 0) is DUPLICATE
    assert d.check("b", 4, 0) is NOT_DUP
    assert d.last_sequence_id("c") == -1
    assert d.snapshot_due()  # the replay was long enough to deserve a snapshot
    _, value = d.take_snapshot()
    assert json.loads(value)["position"] == [ml.last_confirmed.ledger_id, 5]


def test_recovery_counts_a_batch_without_highest_id_as_its_sequence_id(
    ledger: tuple[ManagedLedgerFactory, ManagedLedger],
) -> None:
    """As Pulsar's recovery: ``max(sequence_id, highest_sequence_id)`` of each entry, with
    ``highest_sequence_id`` 0 when unset; a batch's size says nothing about its ids (the
    official client's key-based batches interleave: k0 holds 1, 3, k1 holds 2, 4)."""
    factory, ml = ledger
    ml.append(entry("kb", 1, batch=2))  # key k0: 1, 3
    ml.append(entry("kb", 2, batch=2))  # key k1: 2, 4
    ml.append(entry("java", 5, 9, batch=3))  # declares its highest id: 5, 7, 9
    commit(factory)
    d = MessageDeduplication(TOPIC, enabled=True)
    assert read_now(d.recover(None, ml)) == 3
    assert d.persisted_state() == {"kb": 2, "java": 9}
    assert d.last_sequence_id("kb") == 2
    assert d.check("kb", 2) is DUPLICATE
    assert d.check("kb", 3) is NOT_DUP  # the next batch of interleaved keys is stored
    assert d.check("java", 9) is DUPLICATE


def test_recover_replays_only_after_the_snapshot(tmp_path: Path) -> None:
    with open_ledger(tmp_path, max_entries_per_ledger=2, min_rollover_seconds=0) as (factory, ml):
        live = ready()
        broker = Broker(live, factory, ml)
        for seq in range(3):
            broker.send("a", seq)
        broker.commit()
        _, snap = live.take_snapshot()
        for seq in range(3, 7):
            broker.send("a", seq)
        broker.send("b", 0)
        broker.commit()
        assert len(ml.ledgers()) > 2
        fresh = MessageDeduplication(TOPIC, enabled=True)
        assert read_now(fresh.recover(snap, ml)) == 5
        assert fresh.persisted_state() == live.persisted_state() == {"a": 6, "b": 0}
        # a forged snapshot proves the entries before its position are not re-read
        forged = json.dumps(
            {"version": 1, "position": list(json.loads(snap)["position"]), "producers": []}
        ).encode()
        partial = MessageDeduplication(TOPIC, enabled=True)
        assert read_now(partial.recover(forged, ml)) == 5
        assert partial.persisted_state() == {"a": 6, "b": 0}
        assert partial.check("a", 2, 0) is DUPLICATE


def test_recover_with_snapshot_at_the_end_replays_nothing(
    ledger: tuple[ManagedLedgerFactory, ManagedLedger],
) -> None:
    factory, ml = ledger
    live = ready()
    broker = Broker(live, factory, ml)
    broker.send("a", 0)
    broker.commit()
    _, snap = live.take_snapshot()
    fresh = MessageDeduplication(TOPIC, enabled=True)
    assert read_now(fresh.recover(snap, ml)) == 0
    assert fresh.persisted_state() == {"a": 0}
    # an empty snapshot (nothing persisted yet) replays the whole log
    empty = MessageDeduplication(TOPIC, enabled=True)
    _, nothing = ready().take_snapshot()
    assert json.loads(nothing)["position"] is None
    assert read_now(empty.recover(nothing, ml)) == 1


def test_unreadable_snapshot_falls_back_to_the_whole_log(
    ledger: tuple[ManagedLedgerFactory, ManagedLedger],
) -> None:
    factory, ml = ledger
    ml.append(entry("a", 4))
    commit(factory)
    for bad in (b"{not json", b'{"version": 99}', b'{"version": 1, "position": 3}'):
        d = MessageDeduplication(TOPIC, enabled=True)
        assert read_now(d.recover(bad, ml)) == 1
        assert d.persisted_state() == {"a": 4}


def test_recovery_takes_the_latest_id_when_a_producer_went_back(
    ledger: tuple[ManagedLedgerFactory, ManagedLedger],
) -> None:
    """Ids 1..4, then 2 again (written while deduplication was off): the producer is at 2, and 3
    is new, not of unknown status (which would refuse it for ever)."""
    factory, ml = ledger
    for seq in (1, 2, 3, 4, 2):
        ml.append(entry("p", seq))
    commit(factory)
    d = MessageDeduplication(TOPIC, enabled=True)
    assert read_now(d.recover(None, ml)) == 5
    assert d.last_sequence_id("p") == 2
    assert d.check("p", 2, 0) is DUPLICATE
    assert d.check("p", 3, 0) is NOT_DUP


def test_recovery_after_restart(tmp_path: Path) -> None:
    with open_ledger(tmp_path) as (factory, ml):
        live = ready(snapshot_interval_entries=2)
        broker = Broker(live, factory, ml)
        stored: dict[str, bytes] = {}
        for seq in range(5):
            assert broker.send("p", seq) is NOT_DUP
            broker.commit()
            if live.snapshot_due():
                key, value = live.take_snapshot()
                stored[key] = value
        assert broker.send("p", 3) is DUPLICATE
    with open_ledger(tmp_path) as (factory, ml):
        d = MessageDeduplication(TOPIC, enabled=True)
        assert read_now(d.recover(stored[MessageDeduplication.metadata_key(TOPIC)], ml)) == 1
        assert d.last_sequence_id("p") == 4
        assert d.check("p", 4, 0) is DUPLICATE
        assert d.check("p", 5, 0) is NOT_DUP


_ops = st.lists(
    st.tuples(
        st.sampled_from(["send", "send", "send", "commit", "snapshot"]),
        st.sampled_from(["a", "b", "c", "prod-ü"]),
        st.integers(0, 30),
        st.integers(0, 4),
        st.booleans(),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(ops=_ops, rollover=st.sampled_from([3, 50000]))
def test_snapshot_plus_recover_equals_live_state(
    ops: list[tuple[str, str, int, int, bool]], rollover: int
) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        open_ledger(Path(tmp), max_entries_per_ledger=rollover, min_rollover_seconds=0) as (
            factory,
            ml,
        ),
    ):
        live = ready(snapshot_interval_entries=1000)
        broker = Broker(live, factory, ml)
        snapshot: bytes | None = None
        for op, producer, seq, extra, marker in ops:
            if op == "send":
                broker.send(
                    producer, seq, seq + extra if extra else 0, marker=marker and extra == 1
                )
            elif op == "commit":
                broker.commit()
            else:
                broker.commit()
                snapshot = live.take_snapshot()[1]
        broker.commit()
        recovered = MessageDeduplication(TOPIC, enabled=True)
        read_now(recovered.recover(snapshot, ml))
        assert recovered.persisted_state() == live.persisted_state()
        assert recovered.pushed_state() == live.pushed_state()
        for producer in ["a", "b", "c", "prod-ü", "zz"]:
            assert recovered.last_sequence_id(producer) == live.last_sequence_id(producer)
            for seq in range(0, 36, 5):
                assert recovered.check(producer, seq, 0) is live.check(producer, seq, 0)

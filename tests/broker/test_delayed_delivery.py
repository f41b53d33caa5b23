"""InMemoryDelayedDeliveryTracker: bucketing, strict vs non-strict, scheduling, rebuild, scale."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.broker.delayed_delivery import (
    InMemoryDelayedDeliveryTracker,
    precision_bits,
    rebuild,
)
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

NOW = 1_700_000_000_000  # a multiple of 512 would hide rounding: it is not
P = Position


def test_precision_bits_matches_pulsar() -> None:
    assert precision_bits(1000) == 9  # 512 ms buckets for the default 1 s tick
    assert precision_bits(1024) == 10
    assert precision_bits(1) == 0
    assert precision_bits(0) == 0
    assert precision_bits(100) == 6
    assert InMemoryDelayedDeliveryTracker(1000).precision_ms == 512


def test_bucket_rounding_down_non_strict_up_strict() -> None:
    loose = InMemoryDelayedDeliveryTracker(1000, strict=False)
    strict = InMemoryDelayedDeliveryTracker(1000, strict=True)
    assert loose.bucket_of(5000) == 4608
    assert strict.bucket_of(5000) == 5120
    assert loose.bucket_of(5120) == strict.bucket_of(5120) == 5120
    assert strict.bucket_of(5121) == 5632
    assert strict.bucket_of((1 << 63) - 2) == ((1 << 63) - 1) & (-1 << 9)  # saturates


def test_add_refuses_due_messages() -> None:
    loose = InMemoryDelayedDeliveryTracker(1000)
    assert not loose.add(P(1, 0), NOW - 5, NOW)
    assert not loose.add(P(1, 1), NOW + 1000, NOW)  # within one tick: dispatch now
    assert not loose.add(P(1, 2), -1, NOW)
    assert loose.add(P(1, 3), NOW + 1001, NOW)
    strict = InMemoryDelayedDeliveryTracker(1000, strict=True)
    assert not strict.add(P(1, 0), NOW, NOW)
    assert strict.add(P(1, 1), NOW + 1, NOW)
    assert len(loose) == 1 and len(strict) == 1


def test_non_strict_delivers_at_most_one_tick_early() -> None:
    t = InMemoryDelayedDeliveryTracker(1000)
    deliver_at = NOW + 10_000
    assert t.add(P(1, 0), deliver_at, NOW)
    due = t.next_due_time()
    assert due is not None
    assert not t.has_message_available(due - 1)
    assert t.get_scheduled(10, due - 1) == []
    assert t.has_message_available(due)
    assert deliver_at - 1000 <= due <= deliver_at  # early by less than a tick, never late
    assert t.get_scheduled(10, due) == [P(1, 0)]
    assert len(t) == 0


def test_strict_never_delivers_early() -> None:
    t = InMemoryDelayedDeliveryTracker(1000, strict=True)
    deliver_at = NOW + 10_000
    t.add(P(1, 0), deliver_at, NOW)
    due = t.next_due_time()
    assert due is not None and deliver_at <= due < deliver_at + 512
    assert not t.has_message_available(deliver_at - 1)
    assert not t.has_message_available(due - 1)
    assert t.get_scheduled(10, due - 1) == []
    assert t.get_scheduled(10, due) == [P(1, 0)]


@settings(max_examples=200, deadline=None)
@given(
    tick=st.integers(1, 5000),
    strict=st.booleans(),
    delay=st.integers(1, 10**7),
    probe=st.integers(-(10**7), 10**7),
)
def test_due_window_bounds(tick: int, strict: bool, delay: int, probe: int) -> None:
    t = InMemoryDelayedDeliveryTracker(tick, strict)
    deliver_at = NOW + delay
    if not t.add(P(1, 0), deliver_at, NOW):
        assert deliver_at <= (NOW if strict else NOW + tick)
        return
    now = deliver_at + probe
    available = t.has_message_available(now)
    if strict:
        assert not available or now >= deliver_at
        assert available or now < deliver_at + t.precision_ms - 1
    else:
        assert not available or now >= deliver_at - tick
        assert available or now < deliver_at
    due = t.next_due_time()
    assert due is not None and t.has_message_available(due) and not t.has_message_available(due - 1)


def test_get_scheduled_order_limits_and_removal() -> None:
    t = InMemoryDelayedDeliveryTracker(1000)
    # bucket time first, then position; a same-bucket message sorts by position
    t.add(P(3, 0), NOW + 20_000, NOW)
    t.add(P(2, 5), NOW + 5_000, NOW)
    t.add(P(1, 9), NOW + 20_000, NOW)
    t.add(P(2, 1), NOW + 5_001, NOW)
    t.add(P(1, 0), NOW + 60_000, NOW)
    assert len(t) == 5
    assert t.get_scheduled(10, NOW) == []
    later = NOW + 30_000
    assert t.get_scheduled(0, later) == []
    # NOW + 5_000 and NOW + 5_001 fall in the same 512 ms bucket: position order decides
    assert t.bucket_of(NOW + 5_000) == t.bucket_of(NOW + 5_001)
    first = t.get_scheduled(1, later)
    assert first == [P(2, 1)]
    rest = t.get_scheduled(10, later)
    assert first + rest == [P(2, 1), P(2, 5), P(1, 9), P(3, 0)]
    assert len(t) == 1
    assert t.get_scheduled(10, NOW + 60_000) == [P(1, 0)]
    assert t.next_delivery_time() is None and t.next_due_time() is None


def test_same_bucket_drained_in_position_order_across_calls() -> None:
    t = InMemoryDelayedDeliveryTracker(1000)
    positions = [P(lid, eid) for lid in (5, 3, 4) for eid in (7, 1, 4)]
    for p in positions:
        t.add(p, NOW + 5_100, NOW)
    assert len({t.bucket_of(NOW + 5_100)}) == 1
    out = t.get_scheduled(2, NOW + 10_000)
    t.add(P(3, 0), NOW + 5_100, NOW)  # joins the partly drained bucket
    t.remove([P(4, 1)])
    out += t.get_scheduled(3, NOW + 10_000)
    out += t.get_scheduled(100, NOW + 10_000)
    assert out[:2] == [P(3, 1), P(3, 4)]
    assert out[2:] == sorted(set(positions) - {P(3, 1), P(3, 4), P(4, 1)} | {P(3, 0)})
    assert len(t) == 0


def test_next_delivery_time_is_the_earliest_bucket() -> None:
    t = InMemoryDelayedDeliveryTracker(1000)
    assert t.next_delivery_time() is None
    t.add(P(1, 0), NOW + 9_000, NOW)
    t.add(P(1, 1), NOW + 4_000, NOW)
    assert t.next_delivery_time() == t.bucket_of(NOW + 4_000)
    t.remove([P(1, 1)])
    assert t.next_delivery_time() == t.bucket_of(NOW + 9_000)
    s = InMemoryDelayedDeliveryTracker(1000, strict=True)
    s.add(P(1, 0), NOW + 4_000, NOW)
    assert s.next_delivery_time() == s.next_due_time() == s.bucket_of(NOW + 4_000)


def test_remove_clear_and_re_add() -> None:
    t = InMemoryDelayedDeliveryTracker(1000)
    for i in range(10):
        t.add(P(1, i), NOW + 2_000 + i * 1000, NOW)
    t.remove([P(1, 0), P(1, 5), P(9, 9)])
    assert len(t) == 8 and P(1, 0) not in t and P(1, 1) in t
    assert t.remove_up_to(P(1, 3)) == 3
    assert len(t) == 5
    # re-adding moves a position to its new time; adding it again at the same time is a no-op
    assert t.add(P(1, 9), NOW + 1_500, NOW)
    assert t.add(P(1, 9), NOW + 1_500, NOW)
    assert len(t) == 5
    assert t.get_scheduled(10, NOW + 1_500) == [P(1, 9)]
    t.clear()
    assert len(t) == 0 and not t.has_message_available(NOW + 10**9)
    assert t.get_scheduled(10, NOW + 10**9) == []
    # a bucket emptied by remove and created again is still found
    t.add(P(2, 0), NOW + 5_000, NOW)
    t.add(P(2, 1), NOW + 7_000, NOW)
    t.remove([P(2, 0)])
    t.add(P(2, 2), NOW + 5_000, NOW)
    assert t.get_scheduled(10, NOW + 10_000) == [P(2, 2), P(2, 1)]


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "add", "remove", "take"]),
            st.integers(0, 3),
            st.integers(0, 20),
            st.integers(-3_000, 30_000),
            st.integers(0, 4),
        ),
        max_size=80,
    ),
    strict=st.booleans(),
)
def test_matches_a_naive_model(ops: list[tuple[str, int, int, int, int]], strict: bool) -> None:
    t = InMemoryDelayedDeliveryTracker(1000, strict)
    model: dict[Position, int] = {}
    now = NOW
    for op, lid, eid, offset, n in ops:
        p = P(lid, eid)
        if op == "add":
            held = t.add(p, now + offset, now)
            cutoff = now if strict else now + 1000
            assert held == (now + offset > cutoff)
            if held:
                model[p] = t.bucket_of(now + offset)
        elif op == "remove":
            t.remove([p])
            model.pop(p, None)
        else:
            now += 700
            limit = (0, 1, 2, 5, 100)[n]
            cutoff = now if strict else now + 1000 - 511
            due = sorted((k, q) for q, k in model.items() if k <= cutoff)[:limit]
            assert t.get_scheduled(limit, now) == [q for _, q in due]
            for _, q in due:
                del model[q]
        assert len(t) == len(model)
        assert t.next_delivery_time() == (min(model.values()) if model else None)
        assert t.has_message_available(now) == bool(
            model and min(model.values()) <= (now if strict else now + 489)
        )


def test_should_pause_dispatch_with_fixed_delays() -> None:
    t = InMemoryDelayedDeliveryTracker(1000, fixed_delay_lookahead=3)
    for i in range(3):
        assert not t.should_pause_dispatch(NOW + i)
        t.add(P(1, i), NOW + i + 60_000, NOW + i)
    assert t.should_pause_dispatch(NOW + 3)
    assert not t.should_pause_dispatch(NOW + 60_000)  # something is due
    t.add(P(1, 3), NOW + 10_000, NOW)  # out of order by more than a tick
    assert not t.should_pause_dispatch(NOW + 3)
    assert len(t.get_scheduled(100, NOW + 10**6)) == 4  # emptied: detection starts over
    for i in range(3):
        t.add(P(2, i), NOW + 60_000, NOW)
    assert t.should_pause_dispatch(NOW)
    assert not InMemoryDelayedDeliveryTracker(1000).should_pause_dispatch(NOW)


def test_scale_100k_messages() -> None:
    rng = random.Random(7)
    t = InMemoryDelayedDeliveryTracker(1000)
    positions = [P(1 + i // 50_000, i % 50_000) for i in range(100_000)]
    times = [NOW + 2_000 + rng.randrange(600_000) for _ in positions]
    start = time.process_time()
    for p, at in zip(positions, times, strict=True):
        t.add(p, at, NOW)
    assert len(t) == 100_000
    t.remove(positions[::10])
    drained: list[Position] = []
    now = NOW
    while len(t):
        now += 5_000
        while t.has_message_available(now):
            drained.extend(t.get_scheduled(1000, now))
    cpu_seconds = time.process_time() - start
    assert len(drained) == 90_000 == len(set(drained))
    keys = [t.bucket_of(at) for at in times]
    rank = {p: (k, p) for p, k in zip(positions, keys, strict=True)}
    assert drained == sorted(drained, key=rank.__getitem__)
    # CPU time, not wall time: other processes on a loaded machine do not inflate it. About
    # 0.5 s here; anything quadratic in 100,000 messages would take minutes, so 10 s decides.
    assert cpu_seconds < 10, cpu_seconds


# ---------------------------------------------------------------------- rebuild from a ledger

TOPIC = "persistent://public/default/delayed"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[tuple[ManagedLedgerFactory, ManagedLedger]]:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    factory = ManagedLedgerFactory(
        tmp_path / "data",
        store,
        ManagedLedgerConfig(max_entries_per_ledger=4, min_rollover_seconds=0),
        clock=lambda: 1000.0,
    )
    try:
        yield factory, factory.open(TOPIC)
    finally:
        factory.close()
        store.close()


def commit(factory: ManagedLedgerFactory) -> None:
    pending = factory.take_pending()
    if pending is not None:
        pending.execute()
        pending.finish()


def entry(deliver_at: int | None) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=NOW)
    if deliver_at is not None:
        md.deliver_at_time = deliver_at
    return encode_entry(md, b"x")


def test_rebuild_skips_acked_past_due_and_undelayed(
    ledger: tuple[ManagedLedgerFactory, ManagedLedger],
) -> None:
    factory, ml = ledger
    plan: list[bytes] = [
        entry(NOW + 50_000),  # 0 future
        entry(None),  # 1 no delivery time
        entry(NOW - 1),  # 2 past due
        entry(NOW + 20_000),  # 3 future but acked
        entry(NOW + 30_000),  # 4 future
        b"\x00\x00\xff\xffgarbage",  # 5 unparsable
        entry(NOW + 500),  # 6 within the tick: due already
        entry(NOW + 10_000),  # 7 future
        entry(NOW + 40_000),  # 8 future
    ]
    positions = [ml.append(data) for data in plan]
    commit(factory)
    ml.append(entry(NOW + 99_000))  # not committed: not visible
    assert len({p.ledger_id for p in positions}) > 1
    acked = {positions[3]}
    t = InMemoryDelayedDeliveryTracker(1000)
    added = read_now(rebuild(t, ml, positions[0], NOW, acked.__contains__))
    assert added == 4
    assert t.get_scheduled(100, NOW + 100_000) == [
        positions[7],
        positions[4],
        positions[8],
        positions[0],
    ]
    # starting later only sees later entries
    t2 = InMemoryDelayedDeliveryTracker(1000)
    assert read_now(rebuild(t2, ml, positions[5], NOW, lambda _: False)) == 2
    end = ml.next_position(ml.last_confirmed)
    assert read_now(rebuild(t2, ml, end, NOW, lambda _: False)) == 0


def test_rebuild_on_empty_ledger(ledger: tuple[ManagedLedgerFactory, ManagedLedger]) -> None:
    _, ml = ledger
    t = InMemoryDelayedDeliveryTracker(1000)
    assert read_now(rebuild(t, ml, P(-1, -1), NOW, lambda _: False)) == 0
    assert len(t) == 0

"""Retention of consumed ledgers: which ones a trim deletes, over the space of ledger ages,
sizes and limits (Pulsar's rule: the oldest consumed ledger goes once it was closed at least
the retention time ago, or while the ledgers kept exceed the retention size)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sq_storage_helpers import FakeClock, MakeFactory, append_all, commit

from starquake.storage import RetentionLimits

NAME = "persistent://public/default/retained"

ledger_shapes = st.lists(
    st.tuples(st.integers(1, 4), st.integers(1, 300), st.integers(0, 100)),
    min_size=1,
    max_size=6,
)
limits = st.tuples(
    st.sampled_from([-1, 0, 30, 150, 1000]), st.sampled_from([-1, 0, 200, 1000, 5000])
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(shapes=ledger_shapes, limit=limits, later=st.integers(0, 400))
def test_trim_keeps_what_retention_asks(
    make_factory: MakeFactory,
    clock: FakeClock,
    shapes: list[tuple[int, int, int]],
    limit: tuple[int, int],
    later: int,
) -> None:
    """No cursor: every sealed ledger is consumed; retention alone decides."""
    f = make_factory(min_rollover_seconds=0, max_rollover_seconds=0)
    f.delete(NAME)
    ml = f.open(NAME)
    for entries, size, pause in shapes:
        append_all(ml, [b"v" * size] * entries)
        commit(f)
        clock.advance(pause)
        assert ml.maybe_rollover()
        commit(f)
    clock.advance(later)
    before = ml.ledgers()
    sealed = before[:-1]  # the last one is the current ledger
    seconds, size_bytes = limit
    deleted = ml.trim(RetentionLimits(seconds, size_bytes))
    after = ml.ledgers()
    assert after == before[deleted:]  # the oldest go first
    assert after[-1] == before[-1]  # never the current ledger

    def closed_at(index: int) -> float:
        return before[index + 1].created_at

    def must_go(index: int, kept_bytes: int) -> bool:
        expired = seconds >= 0 and clock.now - closed_at(index) >= seconds
        return expired or (size_bytes >= 0 and kept_bytes > size_bytes)

    total = sum(info.size_bytes for info in before)
    for index in range(deleted):
        assert must_go(index, total)
        total -= before[index].size_bytes
    if deleted < len(sealed):
        assert not must_go(deleted, total)
    if seconds < 0 and size_bytes < 0:
        assert deleted == 0
    if seconds == 0 or size_bytes == 0:
        assert deleted == len(sealed)
    f.close()


def test_durable_cursor_still_holds_retention_back(
    make_factory: MakeFactory, clock: FakeClock
) -> None:
    f = make_factory(max_entries_per_ledger=2, min_rollover_seconds=0)
    ml = f.open(NAME)
    cursor = ml.open_cursor("sub", "earliest")
    positions = append_all(ml, [b"x"] * 6)
    commit(f)
    clock.advance(3600)
    assert ml.trim(RetentionLimits(0, 0)) == 0  # nothing consumed yet
    cursor.mark_delete(positions[1])
    f.cursor_snapshots_written(f.take_cursor_snapshots())
    assert ml.trim(RetentionLimits(7200, -1)) == 0  # consumed, but retained for 2 hours
    clock.advance(7200)
    assert ml.trim(RetentionLimits(7200, -1)) == 1

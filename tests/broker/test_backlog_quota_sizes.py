"""The arithmetic of backlog quotas: the estimated backlog size after a position (Pulsar's
per-ledger average for a partly consumed ledger) and the position N entries further on, which
eviction moves the slowest cursor to."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.backlog_quota import position_after
from starquake.storage import (
    LedgerInfo,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteMetadataStore,
)
from starquake.storage.segment import LEDGER_RECORD_HEADER_SIZE as RECORD_HEADER_SIZE

# --- position_after: against the list of every stored position ------------------------------

ledger_lists = st.lists(
    st.tuples(st.integers(1, 3), st.integers(0, 5)), min_size=1, max_size=6
).map(
    lambda gaps: [
        LedgerInfo(ledger_id, entries, entries * 10, 0.0)
        for ledger_id, entries in zip(
            [sum(g for g, _ in gaps[: i + 1]) for i in range(len(gaps))],
            [e for _, e in gaps],
            strict=True,
        )
    ]
)


@given(ledgers=ledger_lists, data=st.data())
def test_position_after_counts_every_stored_entry(
    ledgers: list[LedgerInfo], data: st.DataObject
) -> None:
    stored = [Position(i.ledger_id, e) for i in ledgers for e in range(i.entries)]
    last_id = ledgers[-1].ledger_id
    start = Position(
        data.draw(st.integers(0, last_id + 1), label="ledger"),
        data.draw(st.integers(-1, 6), label="entry"),
    )
    count = data.draw(st.integers(1, 30), label="count")
    following = [p for p in stored if p > start]
    expected = following[min(count, len(following)) - 1] if following else start
    assert position_after(ledgers, start, count) == expected


# --- estimated_size_after on a real managed ledger ------------------------------------------


@contextlib.contextmanager
def _ledger(directory: Path, sizes: list[int], per_ledger: int) -> Iterator[ManagedLedger]:
    """A managed ledger holding entries of ``sizes``; its factory and store are closed after
    (each hypothesis example made one: their descriptors piled up in the worker)."""
    store = SqliteMetadataStore(directory / "meta.db")
    factory = ManagedLedgerFactory(
        directory / "data",
        store,
        ManagedLedgerConfig(max_entries_per_ledger=per_ledger, min_rollover_seconds=0),
    )
    try:
        ledger = factory.open("persistent://public/default/sizes")
        for size in sizes:
            ledger.append(b"x" * size)
        pending = factory.take_pending()
        assert pending is not None
        pending.execute()
        pending.finish()
        yield ledger
    finally:
        factory.close()
        store.close()


@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=25),
    per_ledger=st.integers(1, 6),
    data=st.data(),
)
def test_estimated_size_after(sizes: list[int], per_ledger: int, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp, _ledger(Path(tmp), sizes, per_ledger) as ledger:
        infos = [i for i in ledger.ledgers() if i.entries]
        stored = [Position(i.ledger_id, e) for i in infos for e in range(i.entries)]
        assert len(stored) == len(sizes)
        record = [RECORD_HEADER_SIZE + s for s in sizes]
        # before the first entry, or in a deleted ledger: everything
        assert ledger.estimated_size_after(ledger.position_before_first()) == sum(record)
        assert ledger.estimated_size_after((infos[0].ledger_id - 1, 5)) == sum(record)
        # at the last entry: nothing
        assert ledger.estimated_size_after(stored[-1]) == 0
        # at the end of a ledger: exactly the later ledgers
        index = 0
        for info in infos:
            index += info.entries
            assert ledger.estimated_size_after((info.ledger_id, info.entries - 1)) == sum(
                record[index:]
            )
        # within its own ledger's share, and never increasing
        i = data.draw(st.integers(0, len(stored) - 1), label="position")
        j = data.draw(st.integers(i, len(stored) - 1), label="later position")
        after_i = ledger.estimated_size_after(stored[i])
        own = [k for k, p in enumerate(stored) if p.ledger_id == stored[i].ledger_id]
        assert sum(record[own[-1] + 1 :]) <= after_i <= sum(record[own[0] :])
        assert ledger.estimated_size_after(stored[j]) <= after_i


def test_estimated_size_after_is_exact_for_equal_entries(tmp_path: Path) -> None:
    with _ledger(tmp_path, [50] * 10, per_ledger=4) as ledger:
        infos = [i for i in ledger.ledgers() if i.entries]
        stored = [Position(i.ledger_id, e) for i in infos for e in range(i.entries)]
        for n, position in enumerate(stored):
            assert ledger.estimated_size_after(position) == (len(stored) - n - 1) * (
                50 + RECORD_HEADER_SIZE
            )

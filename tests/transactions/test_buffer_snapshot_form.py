"""The form of a transaction-buffer snapshot: whatever the buffer holds comes back as it was, up
to the snapshot's position (later entries are read again at the load), the ended transactions
in the order they ended; a damaged one is refused, never half read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.transactions.buffer_snapshot import decode, encode
from starquake.storage import Position

POSITIONS = st.builds(Position, st.integers(0, 2**40), st.integers(0, 10**6))
TXNS = st.tuples(st.integers(0, 15), st.integers(0, 2**63 - 1))


@given(
    position=POSITIONS,
    open_=st.dictionaries(TXNS, st.lists(POSITIONS, min_size=1, max_size=5), max_size=5),
    hidden=st.sets(POSITIONS, max_size=40),
    ended=st.dictionaries(TXNS, st.booleans(), max_size=40),
)
def test_a_snapshot_gives_back_the_state_up_to_its_position(
    position: Position,
    open_: dict[tuple[int, int], list[Position]],
    hidden: set[Position],
    ended: dict[tuple[int, int], bool],
) -> None:
    got_position, (got_open, got_hidden, got_ended) = decode(
        encode(position, (open_, hidden, ended))
    )
    assert got_position == position
    expected_open = {
        txn: sorted(kept)
        for txn, positions in open_.items()
        if (kept := [p for p in positions if p <= position])
    }
    assert got_open == expected_open
    assert list(got_open) == list(expected_open)  # the oldest transaction first
    assert got_hidden == {p for p in hidden if p <= position}
    assert list(got_ended.items()) == list(ended.items())


def test_ten_thousand_markers_and_ended_transactions_stay_small() -> None:
    hidden = {Position(7 + i // 5000, 2 * (i % 5000) + 1) for i in range(10_000)}
    ended = {(0, 10**6 + i): i % 3 != 0 for i in range(10_000)}
    data = encode(Position(9, 0), ({}, hidden, ended))
    assert len(data) < 100_000, len(data)  # about 10 bytes each, far under a metadata value's limit


@pytest.mark.parametrize(
    "doc",
    [
        {"p": [1, 2], "o": [], "h": [], "e": [0, 1]},  # an ended transaction cut short
        {"p": [1, 2], "o": [], "h": []},
        {"position": [1, 2], "open": [], "hidden": [], "ended": []},  # not this form
        {"p": [1, 2], "o": [[0, 1, [[3, ["x"]]]]], "h": [], "e": []},
    ],
)
def test_a_damaged_snapshot_is_refused(doc: dict[str, object]) -> None:
    with pytest.raises((ValueError, KeyError, TypeError)):
        decode(json.dumps(doc).encode())

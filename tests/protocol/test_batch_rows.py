"""pack_rows (columns to a batch payload, metadata written by hand) gives exactly the bytes
protobuf gives through pack_batch, for any mix of fields."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.batch import pack_batch, unpack_batch
from starquake.protocol.batch_rows import pack_rows
from starquake.protocol.varint import varint

_text = st.text(max_size=20)
_row = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300), st.binary(min_size=16384, max_size=17000)),
    st.one_of(st.none(), _text),
    st.one_of(st.none(), st.just(0), st.integers(1, (1 << 63) - 1)),
    st.one_of(st.none(), st.lists(st.tuples(_text, _text), max_size=3)),
)


@given(
    rows=st.lists(_row, min_size=1, max_size=20),
    first=st.one_of(st.integers(0, 20000), st.integers(0, 1 << 40)),
    gaps=st.lists(st.integers(1, 3), min_size=20, max_size=20),
    columns=st.sets(st.sampled_from(["keys", "events", "props"])),
)
def test_pack_rows_equals_protobuf(
    rows: list[tuple[bytes | None, str | None, int | None, list[tuple[str, str]] | None]],
    first: int,
    gaps: list[int],
    columns: set[str],
) -> None:
    seqs = [first]
    for gap in gaps[: len(rows) - 1]:
        seqs.append(seqs[-1] + gap)
    values = [r[0] for r in rows]
    keys = [r[1] for r in rows] if "keys" in columns else None
    events = [r[2] for r in rows] if "events" in columns else None
    props = [r[3] for r in rows] if "props" in columns else None
    packed = pack_rows(values, seqs, keys, events, props)

    expected = []
    for i, value in enumerate(values):
        single = pb.SingleMessageMetadata(sequence_id=seqs[i])
        for k, v in (props[i] or []) if props is not None else []:
            single.properties.add(key=k, value=v)
        key = keys[i] if keys is not None else None
        if key is not None:
            single.partition_key = key
        event = events[i] if events is not None else None
        if event:
            single.event_time = event
        if value is None:
            single.null_value = True
        expected.append((single, value or b""))
    assert packed.payload == pack_batch(expected)
    assert packed.count == len(rows)
    assert (packed.first_sequence_id, packed.last_sequence_id) == (seqs[0], seqs[-1])
    assert packed.size == sum(len(v or b"") for v in values)
    assert packed.partition_key == (keys[0] if keys is not None else None)
    assert len(unpack_batch(packed.payload, len(rows))) == len(rows)


@given(st.integers(-(1 << 63), (1 << 64) - 1))
def test_varint_equals_protobuf(value: int) -> None:
    encoded = pb.MessageIdData(ledgerId=0, entryId=value % (1 << 64)).SerializeToString()
    assert encoded[3:] == varint(value)


def test_sequence_ids_must_increase() -> None:
    with pytest.raises(ValueError, match="increasing"):
        pack_rows([b"a", b"b"], [5, 5])
    with pytest.raises(ValueError, match="at least one"):
        pack_rows([], [])


def test_null_property_values_are_refused() -> None:
    with pytest.raises(ValueError, match="'a' has no value"):
        pack_rows([b"x"], [1], properties=[[("a", None)]])  # type: ignore[list-item]

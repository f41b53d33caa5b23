"""The "latest message per key" selection and the rewriting of entries, against a model.

Entries are built as producers write them (single messages and batches, compressed or not),
compacted with the broker's functions, and the messages of the result compared with what the
model keeps: for each key its last message, unless that one is empty (a deletion); messages
without a key only with ``topicCompactionRetainNullKey``.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.compaction.entries import entry_facts, rebuild_batch
from starquake.broker.compaction.selection import (
    DROP,
    EntryFacts,
    LatestPerKey,
    MessageFacts,
    MessageRef,
    plan_entry,
)
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.batch import pack_batch, unpack_batch
from starquake.protocol.compression import CompressionCodec, compress, decompress
from starquake.protocol.framing import encode_entry, parse_entry
from starquake.storage import Position

# a message: (key or None, payload); b"" is a deletion of its key
Message = tuple[str | None, bytes]
# an entry: its messages and, for a batch, its compression (None: a single message)
Spec = tuple[list[Message], int | None]

keys = st.sampled_from(["a", "b", "c", "d", None])
payloads = st.one_of(st.just(b""), st.binary(min_size=1, max_size=20))
messages = st.tuples(keys, payloads)
codecs = st.sampled_from([int(c) for c in CompressionCodec])
specs = st.one_of(
    st.tuples(messages.map(lambda m: [m]), st.none()),
    st.tuples(st.lists(messages, min_size=1, max_size=6), codecs),
)


def build(spec: Spec, sequence: int) -> bytes:
    """The stored bytes of an entry, as a producer sends it."""
    items, codec = spec
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence, publish_time=1)
    if codec is None:
        key, payload = items[0]
        if key is not None:
            metadata.partition_key = key
        metadata.uncompressed_size = len(payload)
        return encode_entry(metadata, payload)
    singles = []
    for key, payload in items:
        single = pb.SingleMessageMetadata()
        if key is not None:
            single.partition_key = key
        singles.append((single, payload))
    batch = pack_batch(singles)
    metadata.num_messages_in_batch = len(items)
    metadata.compression = codec  # type: ignore[assignment]
    metadata.uncompressed_size = len(batch)
    return encode_entry(metadata, compress(codec, batch))


def contents(data: bytes) -> list[Message]:
    """The messages an entry carries, as a consumer reads them."""
    parsed = parse_entry(data)
    metadata = parsed.metadata
    if not metadata.HasField("num_messages_in_batch"):
        key = metadata.partition_key if metadata.HasField("partition_key") else None
        return [(key, bytes(parsed.payload))]
    payload = decompress(metadata.compression, parsed.payload, metadata.uncompressed_size)
    out: list[Message] = []
    for single, body in unpack_batch(payload, metadata.num_messages_in_batch):
        assert not single.compacted_out
        key = single.partition_key if single.HasField("partition_key") else None
        out.append((key, bytes(body)))
    return out


def compact(log: list[tuple[Position, bytes]], retain: bool) -> list[tuple[Position, bytes]]:
    """The compacted entries of ``log`` (the compactor's two passes, without the files)."""
    latest = LatestPerKey(retain)
    latest.add_entries(entry_facts(p, data) for p, data in log)
    selection = latest.result()
    out = []
    for position, data in log:
        plan = plan_entry(entry_facts(position, data), selection)
        if plan == DROP:
            continue
        out.append((position, data if plan is None else rebuild_batch(data, plan)))
    return out


def model(
    log: list[tuple[Position, list[Message]]], retain: bool
) -> list[tuple[Position, Message]]:
    """What a compacted view must hold, message by message, in log order."""
    flat = [(p, i, m) for p, ms in log for i, m in enumerate(ms)]
    last_of: dict[str, tuple[Position, int]] = {}
    for position, index, (key, _) in flat:
        if key is not None:
            last_of[key] = (position, index)
    kept = []
    for position, index, (key, payload) in flat:
        if key is None:
            if retain:
                kept.append((position, (key, payload)))
        elif last_of[key] == (position, index) and payload:
            kept.append((position, (key, payload)))
    return kept


def as_log(entries: list[Spec]) -> list[tuple[Position, bytes]]:
    return [(Position(i // 7, i % 7), build(spec, i)) for i, spec in enumerate(entries)]


@given(entries=st.lists(specs, max_size=25), retain=st.booleans())
def test_compaction_keeps_the_latest_message_of_each_key(entries: list[Spec], retain: bool) -> None:
    log = as_log(entries)
    view = compact(log, retain)
    got = [(p, m) for p, data in view for m in contents(data)]
    expected = model([(p, spec[0]) for (p, _), spec in zip(log, entries, strict=True)], retain)
    assert got == expected
    # an entry is kept only when it holds a kept message, and unchanged when it keeps them all
    for (position, data), spec in zip(log, entries, strict=True):
        kept = [m for p, m in expected if p == position]
        stored = dict(view).get(position)
        if not kept:
            assert stored is None
        elif len(kept) == len(spec[0]):
            assert stored == data


@given(
    entries=st.lists(specs, max_size=25),
    split=st.integers(0, 25),
    retain=st.booleans(),
)
def test_compacting_a_view_again_with_more_entries_equals_compacting_all(
    entries: list[Spec], split: int, retain: bool
) -> None:
    """The compactor's input is the previous view plus the entries after its horizon."""
    log = as_log(entries)
    first = compact(log[:split], retain)
    again = compact(first + log[split:], retain)
    once = compact(log, retain)
    assert [(p, contents(d)) for p, d in again] == [(p, contents(d)) for p, d in once]


def test_deletion_removes_a_key_until_it_is_written_again() -> None:
    p = [Position(1, i) for i in range(4)]
    latest = LatestPerKey()
    latest.add(
        [
            MessageFacts(MessageRef(p[0], -1), "k", False),
            MessageFacts(MessageRef(p[1], -1), "k", True),
            MessageFacts(MessageRef(p[2], -1), "j", False),
        ]
    )
    assert latest.result().kept == {MessageRef(p[2], -1)}
    latest.add([MessageFacts(MessageRef(p[3], -1), "k", False)])
    assert latest.result().kept == {MessageRef(p[2], -1), MessageRef(p[3], -1)}
    assert latest.keys == 2 and latest.messages == 4


def test_chunks_of_the_latest_chunked_message_are_kept_together() -> None:
    p = [Position(1, i) for i in range(5)]

    def chunk(i: int, uuid: str, chunk_id: int) -> EntryFacts:
        return EntryFacts(
            p[i], [MessageFacts(MessageRef(p[i], -1), "k", False, uuid, chunk_id == 1)]
        )

    log = [chunk(0, "old", 0), chunk(1, "old", 1), chunk(2, "new", 0), chunk(3, "new", 1)]
    latest = LatestPerKey()
    latest.add_entries(log)
    selection = latest.result()
    assert [plan_entry(e, selection) for e in log] == [DROP, DROP, None, None]
    assert latest.messages == 2  # a chunked message counts once


def test_markers_are_dropped_and_unreadable_entries_kept() -> None:
    selection = LatestPerKey().result()
    assert plan_entry(EntryFacts(Position(1, 0), [], marker=True), selection) == DROP
    assert plan_entry(EntryFacts(Position(1, 1), [], readable=False), selection) is None
    facts = entry_facts(Position(1, 2), b"\x00\x00\x00\x05garbage")
    assert not facts.readable

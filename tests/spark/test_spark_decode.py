"""Decoding message columns into Arrow batches (``schema.decode``), without Spark running."""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pytest

from starquake.client import MessageId
from starquake.client.bulk import MessageColumns
from starquake.client.schema import (
    AvroSchema,
    Int32Schema,
    Integer,
    JsonSchema,
    Record,
    Schema,
    SchemaInfo,
    String,
    StringSchema,
)
from starquake.spark._decode import Decoder, PulsarDecodeError
from starquake.spark._rows import arrow_schema_of
from starquake.spark._typed import layout_of


class Old(Record):
    name = String(required=True)


def _new() -> type[Record]:
    class Old(Record):  # the same record, one field more
        name = String(required=True)
        size = Integer(default=7, required=True, required_default=True)

    return Old


New = _new()


def _columns(values: list[bytes | None], versions: list[int | None]) -> MessageColumns:
    n = len(values)
    return MessageColumns(
        values=values,
        keys=[None] * n,
        publish_times=[1_700_000_000_000] * n,
        event_times=[None] * n,
        properties=[[] for _ in range(n)],
        message_ids=[MessageId(-1, 5, i, -1).serialize() for i in range(n)],
        schema_versions=[b"" if v is None else struct.pack(">q", v) for v in versions],
    )


def _decoder(schema: Schema, writers: dict[int, SchemaInfo] | None = None) -> Decoder:
    fetched: list[int] = []

    def fetch(version: int) -> SchemaInfo | None:
        fetched.append(version)
        return (writers or {}).get(version)

    decoder = Decoder(layout_of(schema.schema_info()), "persistent://t/n/topic", fetch)
    decoder.fetched = fetched  # type: ignore[attr-defined]
    return decoder


def _rows(batch: pa.RecordBatch, *names: str) -> list[tuple[Any, ...]]:
    table = batch.to_pydict()
    return list(zip(*(table[n] for n in names), strict=True))


def test_avro_rows_are_resolved_from_their_writer_version() -> None:
    old, new = AvroSchema(Old), AvroSchema(New)
    decoder = _decoder(new, {0: old.schema_info(), 1: new.schema_info()})
    a, c = old.encode(Old(name="a")), old.encode(Old(name="c"))
    cols = _columns([a, new.encode(New(name="b", size=2)), None, c], [0, 1, 1, 0])
    batch = decoder.record_batch(cols)
    assert batch.schema == arrow_schema_of(layout_of(new.schema_info()).schema)
    assert _rows(batch, "name", "size") == [("a", 7), ("b", 2), (None, None), ("c", 7)]
    assert decoder.fetched == [0, 1]  # type: ignore[attr-defined]  # once per version


def test_a_bad_payload_names_the_message() -> None:
    new = AvroSchema(New)
    decoder = _decoder(new)
    cols = _columns([new.encode(New(name="ok", size=1)), b"\x07"], [None, None])
    with pytest.raises(PulsarDecodeError, match=r"message \(5,1,-1,-1\) does not decode"):
        decoder.record_batch(cols)
    with pytest.raises(PulsarDecodeError, match="schema version 3 is unknown"):
        decoder.record_batch(_columns([b"\x00"], [3]))


def test_json_rows_get_defaults_and_bad_ones_name_the_message() -> None:
    decoder = _decoder(JsonSchema(New))
    cols = _columns([b'{"name": "a"}', b'{"name": "b", "size": 3}'], [None, None])
    assert _rows(decoder.record_batch(cols), "name", "size") == [("a", 7), ("b", 3)]
    bad = _columns([b'{"name": "a"}', b'{"name": 5}'], [None, None])
    with pytest.raises(PulsarDecodeError, match=r"\(5,1,-1,-1\).*5 where a str belongs"):
        decoder.record_batch(bad)
    with pytest.raises(PulsarDecodeError, match=r"\(5,0,-1,-1\)"):
        decoder.record_batch(_columns([b"not json"], [None]))


def test_string_and_number_values() -> None:
    text = _columns([b"x", "é".encode(), None], [None] * 3)
    strings = _decoder(StringSchema()).record_batch(text)
    assert strings.column(0).to_pylist() == ["x", "é", None]
    with pytest.raises(PulsarDecodeError, match=r"\(5,1,-1,-1\).*utf-8"):
        _decoder(StringSchema()).record_batch(_columns([b"ok", b"\xff"], [None, None]))
    ints = _decoder(Int32Schema()).record_batch(_columns([struct.pack(">i", -5)], [None]))
    assert ints.schema.field("value").type == pa.int32()
    assert ints.column(0).to_pylist() == [-5]
    with pytest.raises(PulsarDecodeError, match="4 bytes"):
        _decoder(Int32Schema()).record_batch(_columns([b"\x00"], [None]))

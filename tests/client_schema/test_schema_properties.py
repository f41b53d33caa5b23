"""Property tests: generated records round-trip, match the official client, and evolve."""

from __future__ import annotations

import enum
import json
from typing import Any

import pulsar.schema as official
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_twins import plain, twins

import starquake.client.schema as ours


class Tone(enum.Enum):
    LOW = 1
    MID = 2
    HIGH = 3


def model(m: Any) -> Any:
    class Part(m.Record):
        name = m.String(required=True)
        count = m.Long()

    class Sample(m.Record):
        i = m.Integer()
        lg = m.Long(required=True, default=0)
        f = m.Float()
        d = m.Double()
        b = m.Boolean()
        s = m.String()
        by = m.Bytes()
        tone = m.CustomEnum(Tone)
        ints = m.Array(m.Integer())
        words = m.Map(m.String())
        part = Part()
        parts = m.Array(Part())
        part_map = m.Map(Part())

    return Sample


MINE, THEIRS = twins(model)
SCHEMAS = {
    kind: (getattr(ours, kind)(MINE), getattr(official, kind)(THEIRS))
    for kind in ("JsonSchema", "AvroSchema")
}

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
float32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
doubles = st.floats(allow_nan=False, allow_infinity=False)
# JSON carries bytes as UTF-8 text, so only UTF-8 bytes survive it (as with the official client)
utf8_bytes = st.text(max_size=10).map(str.encode)
parts = st.fixed_dictionaries({"name": st.text(max_size=8)}, optional={"count": st.none() | int64})

samples = st.fixed_dictionaries(
    {},
    optional={
        "i": st.none() | int32,
        "lg": int64,
        "f": st.none() | float32,
        "d": st.none() | doubles,
        "b": st.booleans(),
        "s": st.none() | st.text(max_size=20),
        "by": st.none() | utf8_bytes,
        "tone": st.none() | st.sampled_from(list(Tone)),
        "ints": st.none() | st.lists(int32, max_size=5),
        "words": st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=4),
        "part": st.none() | parts,
        "parts": st.none() | st.lists(parts, min_size=1, max_size=3),
        "part_map": st.none() | st.dictionaries(st.text(max_size=4), parts, min_size=1, max_size=3),
    },
)


def build(cls: Any, values: dict[str, Any]) -> Any:
    record = cls(**values)
    if "part" not in values:
        record.part = None  # the default nested record has a required field left unset
    return record


@settings(max_examples=150, deadline=None)
@given(samples, st.sampled_from(sorted(SCHEMAS)))
def test_generated_records_match_the_official_client(values: dict[str, Any], kind: str) -> None:
    mine, theirs = SCHEMAS[kind]
    ours_record, their_record = build(MINE, values), build(THEIRS, values)
    payload = mine.encode(ours_record)
    assert payload == theirs.encode(their_record)
    decoded = mine.decode(payload)
    assert decoded == ours_record
    assert plain(theirs.decode(payload)) == plain(decoded)


FREE_DEFINITION = {
    "type": "record",
    "name": "Free",
    "fields": [
        {"name": "a", "type": "int"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "meta", "type": {"type": "map", "values": "long"}},
        {"name": "opt", "type": ["null", "double"]},
        {
            "name": "child",
            "type": {"type": "record", "name": "Child", "fields": [{"name": "n", "type": "bytes"}]},
        },
    ],
}

free_values = st.fixed_dictionaries(
    {
        "a": int32,
        "tags": st.lists(st.text(max_size=5), max_size=4),
        "meta": st.dictionaries(st.text(max_size=4), int64, max_size=4),
        "opt": st.none() | doubles,
        "child": st.fixed_dictionaries({"n": st.binary(max_size=8)}),
    }
)


@settings(max_examples=100, deadline=None)
@given(free_values)
def test_avro_dict_mode_matches_the_official_client(value: dict[str, Any]) -> None:
    schema = ours.AvroSchema(None, FREE_DEFINITION)
    payload = schema.encode(value)
    assert payload == official.AvroSchema(None, FREE_DEFINITION).encode(value)
    assert schema.decode(payload) == value


# --- schema evolution -----------------------------------------------------------------------


def versions(m: Any) -> tuple[Any, Any]:
    class EventV1(m.Record):
        id = m.Long(required=True)
        body = m.String()
        tone = m.CustomEnum(Tone)

    class EventV2(m.Record):
        id = m.Long(required=True)
        body = m.String()
        tone = m.CustomEnum(Tone)
        # fields added with defaults stated in the schema
        retries = m.Integer(default=3, required=True, required_default=True)
        note = m.String(required_default=True)
        ratio = m.Double(default=0.5, required=True, required_default=True)
        level = m.CustomEnum(Tone, default=Tone.MID, required=True, required_default=True)

    return EventV1, EventV2


(V1, V2), (OFFICIAL_V1, OFFICIAL_V2) = twins(versions)

v1_values = st.fixed_dictionaries(
    {"id": int64},
    optional={"body": st.none() | st.text(max_size=10), "tone": st.sampled_from(list(Tone))},
)
v2_values = v1_values.flatmap(
    lambda base: st.fixed_dictionaries(
        {},
        optional={
            "retries": int32,
            "note": st.none() | st.text(max_size=5),
            "ratio": doubles,
            "level": st.sampled_from(list(Tone)),
        },
    ).map(lambda extra: {**base, **extra})
)


@settings(max_examples=100, deadline=None)
@given(v1_values)
def test_new_reader_reads_old_avro_data(values: dict[str, Any]) -> None:
    old, new = ours.AvroSchema(V1), ours.AvroSchema(V2)
    payload = old.encode(V1(**values))
    decoded = new.decode_with_writer(payload, old.schema_info())
    assert decoded == V2(**values)
    assert (decoded.retries, decoded.note, decoded.ratio, decoded.level) == (3, None, 0.5, Tone.MID)
    # the official client resolves the same way
    writer = json.loads(old.schema_info().data)
    official_decoded = official.AvroSchema(OFFICIAL_V2)._decode_bytes(payload, writer)
    assert plain(official_decoded) == plain(decoded)


@settings(max_examples=100, deadline=None)
@given(v2_values)
def test_old_reader_reads_new_avro_data(values: dict[str, Any]) -> None:
    old, new = ours.AvroSchema(V1), ours.AvroSchema(V2)
    payload = new.encode(V2(**values))
    decoded = old.decode_with_writer(payload, new.schema_info())
    base = {key: values[key] for key in ("id", "body", "tone") if key in values}
    assert decoded == V1(**base)


@settings(max_examples=100, deadline=None)
@given(v2_values)
def test_json_versions_read_each_other(values: dict[str, Any]) -> None:
    old, new = ours.JsonSchema(V1), ours.JsonSchema(V2)
    base = {key: values[key] for key in ("id", "body", "tone") if key in values}
    from_new = old.decode_with_writer(new.encode(V2(**values)), new.schema_info())
    assert from_new == V1(**base)
    from_old = new.decode_with_writer(old.encode(V1(**base)), old.schema_info())
    assert from_old == V2(**base)


@settings(max_examples=50, deadline=None)
@given(v1_values, st.sampled_from(["AvroSchema", "JsonSchema"]))
def test_key_value_pairs_round_trip(values: dict[str, Any], kind: str) -> None:
    schema = ours.KeyValueSchema(ours.StringSchema(), getattr(ours, kind)(V1))
    key = str(values["id"])
    assert schema.decode(schema.encode((key, V1(**values)))) == (key, V1(**values))

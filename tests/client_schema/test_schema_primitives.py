"""Fixed-size primitive schemas: big-endian payloads as Pulsar's Java client writes them."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.client.schema import (
    BooleanSchema,
    DoubleSchema,
    FloatSchema,
    Int8Schema,
    Int16Schema,
    Int32Schema,
    Int64Schema,
    Schema,
)


@pytest.mark.parametrize(
    ("schema", "value", "payload"),
    [
        (BooleanSchema(), True, b"\x01"),
        (BooleanSchema(), False, b"\x00"),
        (Int8Schema(), -2, b"\xfe"),
        (Int16Schema(), 258, b"\x01\x02"),
        (Int32Schema(), -1, b"\xff\xff\xff\xff"),
        (Int64Schema(), 2**40, b"\x00\x00\x01\x00\x00\x00\x00\x00"),
        (FloatSchema(), 1.5, b"\x3f\xc0\x00\x00"),
        (DoubleSchema(), -2.0, b"\xc0\x00\x00\x00\x00\x00\x00\x00"),
    ],
)
def test_payloads(schema: Schema, value: Any, payload: bytes) -> None:
    assert schema.encode(value) == payload
    assert schema.decode(payload) == value
    assert schema.schema_info().data == b""


def test_any_nonzero_byte_is_true() -> None:
    assert BooleanSchema().decode(b"\x07") is True


@pytest.mark.parametrize(
    ("schema", "value", "error"),
    [
        (Int8Schema(), 128, ValueError),
        (Int16Schema(), -(2**15) - 1, ValueError),
        (Int32Schema(), 2**31, ValueError),
        (Int64Schema(), 2**63, ValueError),
        (FloatSchema(), 1e300, ValueError),
        (Int32Schema(), True, TypeError),
        (Int32Schema(), 1.0, TypeError),
        (BooleanSchema(), 1, TypeError),
        (DoubleSchema(), "1", TypeError),
        (FloatSchema(), False, TypeError),
    ],
)
def test_encode_errors(schema: Schema, value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        schema.encode(value)


@pytest.mark.parametrize(
    "schema",
    [BooleanSchema(), Int8Schema(), Int16Schema(), Int32Schema(), Int64Schema(), DoubleSchema()],
)
def test_wrong_sizes_are_rejected(schema: Schema) -> None:
    with pytest.raises(ValueError):
        schema.decode(b"\x00" * 9)
    with pytest.raises(ValueError):
        schema.decode(b"")


@given(st.integers(-(2**63), 2**63 - 1))
def test_int64_round_trip(value: int) -> None:
    assert Int64Schema().decode(Int64Schema().encode(value)) == value
    assert Int64Schema().encode(value) == struct.pack(">q", value)


@given(st.floats(width=32))
def test_float_round_trip(value: float) -> None:
    decoded = FloatSchema().decode(FloatSchema().encode(value))
    assert decoded == value or (math.isnan(value) and math.isnan(decoded))

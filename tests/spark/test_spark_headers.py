"""Kafka's ``headers`` column: message properties read as it (``includeHeaders``), and written
from it (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.spark._headers import HEADERS_FIELD, add_headers, properties_to_write, with_headers
from starquake.spark._rows import SOURCE_SCHEMA, arrow_schema_of

_PROPS = st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=4)


@given(st.lists(_PROPS, max_size=12), st.integers(0, 12), st.integers(0, 12))
def test_headers_are_the_properties_in_order_and_null_when_there_are_none(
    props: list[dict[str, str] | None], lo: int, length: int
) -> None:
    kind = pa.map_(pa.string(), pa.string())
    column = pa.array([None if p is None else list(p.items()) for p in props], kind)
    batch = pa.RecordBatch.from_arrays(
        [pa.array(range(len(props))), column], names=["n", "__messageProperties"]
    ).slice(lo, length)  # a slice, as a read hands them out
    out = add_headers(batch)
    expected_type = arrow_schema_of(with_headers(SOURCE_SCHEMA)).field("headers").type
    assert out.schema.field("headers").type == expected_type
    want = [
        [{"key": k, "value": v.encode()} for k, v in p.items()] if p else None
        for p in props[lo : lo + length]
    ]
    assert out.column("headers").to_pylist() == want
    assert out.column("n").to_pylist() == list(range(len(props)))[lo : lo + length]


def test_the_headers_column_comes_last() -> None:
    assert with_headers(SOURCE_SCHEMA).fields[-1] == HEADERS_FIELD
    assert with_headers(SOURCE_SCHEMA).fields[:-1] == SOURCE_SCHEMA.fields


_HEADERS = st.none() | st.lists(
    st.fixed_dictionaries({"key": st.sampled_from("abc"), "value": st.binary(max_size=3)}),
    max_size=4,
)
_OWN = st.none() | st.lists(st.tuples(st.sampled_from("bcd"), st.text(max_size=3)), max_size=3)


@given(st.lists(st.tuples(_OWN, _HEADERS), max_size=8))
def test_written_properties_are_the_map_then_the_headers_the_last_value_winning(
    rows: list[tuple[list[tuple[str, str]] | None, list[dict[str, bytes]] | None]],
) -> None:
    # __messageProperties is a map: each key once
    own_lists = [list(dict(own).items()) if own is not None else None for own, _h in rows]
    headers = [h for _o, h in rows]
    try:
        out = properties_to_write(own_lists, headers, 100)
    except ValueError as exc:  # only for a header value that is not UTF-8
        bad = [
            (i, e["key"]) for i, h in enumerate(headers) for e in h or () if not _utf8(e["value"])
        ]
        assert bad and str(exc).startswith(f"row {100 + bad[0][0]}: header {bad[0][1]!r}")
        return
    assert out is not None
    for own, entries, got in zip(own_lists, headers, out, strict=True):
        want = dict(own or ())
        for e in entries or ():
            want[e["key"]] = e["value"].decode()
        assert (dict(got) if got is not None else {}) == want
        assert got is None or len(got) == len(dict(got))  # each key once
    # without a headers column the map is taken as it is
    assert properties_to_write(own_lists, None, 0) is own_lists


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_a_null_header_value_is_refused() -> None:
    with pytest.raises(ValueError, match=r"row 7: column 'headers' holds a null value for key 'a'"):
        properties_to_write(None, [None, [{"key": "a", "value": None}]], 6)

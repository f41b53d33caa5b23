"""``includeHeaders``: message properties become Kafka's ``headers`` column (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from starquake.spark._headers import HEADERS_FIELD, add_headers, with_headers
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

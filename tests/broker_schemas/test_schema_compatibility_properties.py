"""Invariants of the compatibility rules over random Avro record schemas."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from starquake.broker.schemas.compatibility import (
    STRATEGIES,
    IncompatibleSchemaError,
    check_compatible,
    check_consumer_compatible,
    find_version,
    validate,
)
from starquake.common.schema_info import SchemaInfo, SchemaType

FIELD_NAMES = ["a", "b", "c", "d", "e"]
PRIMITIVE_DEFAULTS: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False, allow_infinity=False, width=32),
    "double": st.floats(allow_nan=False, allow_infinity=False),
    "bytes": st.text(alphabet="abc", max_size=3),
    "string": st.text(max_size=5),
}

Fields = list[dict[str, Any]]


@st.composite
def fields_of(draw: st.DrawFn, name: str) -> dict[str, Any]:
    type_name = draw(st.sampled_from(sorted(PRIMITIVE_DEFAULTS)))
    spec: dict[str, Any] = {"name": name, "type": type_name}
    if draw(st.booleans()):
        spec["default"] = draw(PRIMITIVE_DEFAULTS[type_name])
    return spec


@st.composite
def records(draw: st.DrawFn) -> Fields:
    names = draw(st.lists(st.sampled_from(FIELD_NAMES), unique=True, max_size=len(FIELD_NAMES)))
    return [draw(fields_of(name)) for name in names]


def schema(
    fields: Fields, kind: SchemaType = SchemaType.AVRO, indent: int | None = None
) -> SchemaInfo:
    definition = {"type": "record", "name": "Rec", "namespace": "demo", "fields": fields}
    return SchemaInfo(kind, json.dumps(definition, indent=indent).encode())


def passes(new: SchemaInfo, existing: list[SchemaInfo], strategy: str) -> bool:
    try:
        check_compatible(new, existing, strategy)
    except IncompatibleSchemaError:
        return False
    return True


@given(records())
def test_generated_schemas_are_valid_and_fully_compatible_with_themselves(fields: Fields) -> None:
    original = schema(fields)
    validate(original)
    # A different layout of the same definition goes through the Avro checker.
    respaced = schema(fields, indent=2)
    for strategy in ("FULL", "FULL_TRANSITIVE", "BACKWARD", "FORWARD"):
        check_compatible(original, [original], strategy)
        check_compatible(respaced, [original], strategy)
    assert find_version(respaced, [original], parsed=True) == 0


@given(records(), st.data())
def test_adding_a_field_with_a_default_keeps_compatibility(
    fields: Fields, data: st.DataObject
) -> None:
    free = [name for name in FIELD_NAMES if name not in {f["name"] for f in fields}]
    if not free:
        return
    added = data.draw(fields_of(free[0]).filter(lambda spec: "default" in spec))
    position = data.draw(st.integers(0, len(fields)))
    wider = [*fields[:position], added, *fields[position:]]
    for strategy in ("BACKWARD", "FORWARD", "FULL"):
        check_compatible(schema(wider), [schema(fields)], strategy)
        # Removing it again is just as compatible.
        check_compatible(schema(fields), [schema(wider)], strategy)


@given(records(), records())
def test_backward_one_way_is_forward_the_other_way(a: Fields, b: Fields) -> None:
    old, new = schema(a), schema(b)
    backward = passes(new, [old], "BACKWARD")
    assert backward == passes(old, [new], "FORWARD")
    forward = passes(new, [old], "FORWARD")
    assert passes(new, [old], "FULL") == (backward and forward)
    for strategy in ("BACKWARD", "FORWARD", "FULL"):
        assert passes(new, [old], strategy) == passes(new, [old], f"{strategy}_TRANSITIVE")


@given(st.lists(records(), min_size=2, max_size=4))
def test_transitive_is_the_conjunction_over_versions(history: list[Fields]) -> None:
    *registered, latest = [schema(fields) for fields in history]
    for strategy in ("BACKWARD", "FORWARD", "FULL"):
        each = all(passes(latest, [old], strategy) for old in registered)
        assert passes(latest, registered, f"{strategy}_TRANSITIVE") == each
        assert passes(latest, registered, strategy) == passes(latest, registered[-1:], strategy)


@given(
    records(),
    records(),
    st.sampled_from([SchemaType.AVRO, SchemaType.JSON, SchemaType.STRING, SchemaType.INT32]),
)
def test_always_compatible_never_raises(a: Fields, b: Fields, kind: SchemaType) -> None:
    other = schema(b, kind) if kind in (SchemaType.AVRO, SchemaType.JSON) else SchemaInfo(kind)
    check_compatible(other, [schema(a)], "ALWAYS_COMPATIBLE")
    check_consumer_compatible(other, [schema(a)], "ALWAYS_COMPATIBLE")


@given(records(), records(), st.sampled_from([SchemaType.AVRO, SchemaType.JSON]))
def test_always_incompatible_raises_exactly_when_definitions_differ(
    a: Fields, b: Fields, kind: SchemaType
) -> None:
    old, new = schema(a), schema(b, kind)
    same = old.type == new.type and old.data == new.data
    assert passes(new, [old], "ALWAYS_INCOMPATIBLE") == same


@given(st.lists(records(), min_size=1, max_size=4), st.data())
def test_consumers_with_registered_definitions_are_accepted(
    history: list[Fields], data: st.DataObject
) -> None:
    registered = [schema(fields) for fields in history]
    chosen = data.draw(st.sampled_from(registered))
    for strategy in STRATEGIES:
        check_consumer_compatible(chosen, registered, strategy)

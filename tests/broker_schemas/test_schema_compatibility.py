from __future__ import annotations

import json

import pytest
from schema_samples import field, key_value, native, record

from starquake.broker.schemas.compatibility import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    IncompatibleSchemaError,
    InvalidSchemaError,
    check_compatible,
    check_consumer_compatible,
    find_version,
)
from starquake.common.schema_info import KeyValueEncoding, SchemaInfo, SchemaType

NAME = field("name", "string")
V1 = record([NAME])
WITH_AGE_DEFAULT = record([NAME, field("age", "int", default=0)])
WITH_AGE = record([NAME, field("age", "int")])
AGE_INT = record([field("age", "int")])
AGE_LONG = record([field("age", "long")])


def compatible(new: SchemaInfo, old: SchemaInfo | list[SchemaInfo], strategy: str) -> bool:
    try:
        check_compatible(new, old if isinstance(old, list) else [old], strategy)
    except IncompatibleSchemaError:
        return False
    return True


def test_strategy_names_and_default() -> None:
    assert set(STRATEGIES) == {
        "ALWAYS_INCOMPATIBLE",
        "ALWAYS_COMPATIBLE",
        "BACKWARD",
        "FORWARD",
        "FULL",
        "BACKWARD_TRANSITIVE",
        "FORWARD_TRANSITIVE",
        "FULL_TRANSITIVE",
    }
    assert DEFAULT_STRATEGY == "FULL"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="strategy"):
        check_compatible(V1, [V1], "SOMETIMES")
    with pytest.raises(ValueError, match="no registered schema"):
        check_compatible(V1, [], "FULL")
    with pytest.raises(ValueError, match="strategy"):
        check_consumer_compatible(V1, [V1], "NONE")


def test_field_with_default_added_is_fully_compatible() -> None:
    for strategy in STRATEGIES[1:]:
        assert compatible(WITH_AGE_DEFAULT, V1, strategy), strategy


def test_field_without_default_added_is_forward_but_not_backward() -> None:
    assert compatible(WITH_AGE, V1, "FORWARD")
    with pytest.raises(IncompatibleSchemaError) as caught:
        check_compatible(WITH_AGE, [V1, V1, V1], "BACKWARD")
    assert str(caught.value) == (
        "New schema is not backward compatible with version 2: field 'age' has no default"
    )
    assert not compatible(WITH_AGE, V1, "FULL")


def test_field_without_default_removed_is_backward_but_not_forward() -> None:
    assert compatible(V1, WITH_AGE, "BACKWARD")
    with pytest.raises(IncompatibleSchemaError, match=r"not forward compatible.*'age'"):
        check_compatible(V1, [WITH_AGE], "FORWARD")
    # A removed field that had a default is fine both ways.
    assert compatible(V1, WITH_AGE_DEFAULT, "FULL")


def test_int_to_long_is_backward_but_not_forward() -> None:
    assert compatible(AGE_LONG, AGE_INT, "BACKWARD")
    with pytest.raises(IncompatibleSchemaError) as caught:
        check_compatible(AGE_LONG, [AGE_INT], "FORWARD")
    message = str(caught.value)
    assert "not forward compatible with version 0" in message
    assert "int" in message and "long" in message and "'age'" in message


@pytest.mark.parametrize(
    ("old", "new"),
    [("int", "float"), ("int", "double"), ("long", "double"), ("float", "double")],
)
def test_numeric_promotions(old: str, new: str) -> None:
    assert compatible(record([field("x", new)]), record([field("x", old)]), "BACKWARD")
    assert not compatible(record([field("x", new)]), record([field("x", old)]), "FORWARD")


def test_string_and_bytes_read_each_other() -> None:
    assert compatible(record([field("x", "bytes")]), record([field("x", "string")]), "FULL")


def _enum(*symbols: str, **extra: object) -> SchemaInfo:
    return record(
        [field("c", {"type": "enum", "name": "Color", "symbols": list(symbols), **extra})]
    )


def test_enum_symbol_added() -> None:
    two, three = _enum("RED", "GREEN"), _enum("RED", "GREEN", "BLUE")
    assert compatible(three, two, "BACKWARD")
    with pytest.raises(IncompatibleSchemaError, match=r"enum lacks symbols.*BLUE.*'c'"):
        check_compatible(three, [two], "FORWARD")
    # An enum default lets the old reader map unknown symbols.
    assert compatible(three, _enum("RED", "GREEN", default="RED"), "FULL")


def test_union_widening() -> None:
    narrow = record([field("x", ["null", "string"], default=None)])
    wide = record([field("x", ["null", "string", "int"], default=None)])
    assert compatible(wide, narrow, "BACKWARD")
    with pytest.raises(IncompatibleSchemaError, match="union lacking writer type"):
        check_compatible(wide, [narrow], "FORWARD")
    # Making a plain field optional is a widening too.
    assert compatible(narrow, record([field("x", "string")]), "BACKWARD")


@pytest.mark.parametrize("strategy", ["BACKWARD", "FORWARD", "FULL", "FULL_TRANSITIVE"])
def test_records_may_change_their_names(strategy: str) -> None:
    # Pulsar validates with Avro's resolving grammar, which matches records by their fields only
    user1 = record([NAME], name="User1")
    assert compatible(record([NAME], name="User2"), user1, strategy)
    assert compatible(record([NAME, field("age", "int", default=0)], name="User2"), user1, strategy)
    nested = record([field("home", {"type": "record", "name": "Address", "fields": [NAME]})])
    moved = record([field("home", {"type": "record", "name": "Place", "fields": [NAME]})])
    assert compatible(moved, nested, strategy)


def test_enums_keep_their_names_unless_aliased() -> None:
    def colour(name: str, **extra: object) -> SchemaInfo:
        kind = {"type": "enum", "name": name, "symbols": ["RED"], **extra}
        return record([field("colour", kind)])

    assert not compatible(colour("Hue"), colour("Colour"), "BACKWARD")
    assert compatible(colour("Hue", aliases=["Colour"]), colour("Colour"), "BACKWARD")


def test_field_rename_with_alias_is_backward_compatible() -> None:
    renamed = record([field("full_name", "string", aliases=["name"])])
    assert compatible(renamed, V1, "BACKWARD")
    assert not compatible(record([field("full_name", "string")]), V1, "BACKWARD")


def test_nested_field_paths_in_messages() -> None:
    def address(*fields: dict[str, object]) -> SchemaInfo:
        return record(
            [field("home", {"type": "record", "name": "Address", "fields": list(fields)})]
        )

    old, new = address(field("zip", "int")), address(field("zip", "int"), field("city", "string"))
    with pytest.raises(IncompatibleSchemaError, match=r"field 'home\.city' has no default"):
        check_compatible(new, [old], "BACKWARD")


# v3 can read v2's data but not v1's: it expects 'b', which v1 lacks and has no default.
CHAIN_BACKWARD = [
    record([field("a", "int")]),
    record([field("a", "int"), field("b", "string", default="")]),
    record([field("b", "string")]),
]
# v1 cannot read v3's data (no 'a' and v1 has no default for it); v2 can.
CHAIN_FORWARD = [
    record([field("a", "int")]),
    record([field("a", "int", default=0), field("b", "string")]),
    record([field("b", "string")]),
]
CHAIN_FULL = [
    record([field("a", "int")]),
    record([field("a", "int", default=0), field("b", "string", default="")]),
    record([field("b", "string", default="")]),
]


@pytest.mark.parametrize(
    ("chain", "strategy"),
    [(CHAIN_BACKWARD, "BACKWARD"), (CHAIN_FORWARD, "FORWARD"), (CHAIN_FULL, "FULL")],
)
def test_transitive_strategies_check_every_version(chain: list[SchemaInfo], strategy: str) -> None:
    *registered, v3 = chain
    assert compatible(v3, registered, strategy)
    with pytest.raises(IncompatibleSchemaError, match="with version 0"):
        check_compatible(v3, registered, f"{strategy}_TRANSITIVE")


def test_first_version_numbers_the_messages() -> None:
    with pytest.raises(IncompatibleSchemaError, match="with version 7:"):
        check_compatible(WITH_AGE, [V1], "BACKWARD", first_version=7)


def test_same_definition_is_compatible_under_every_strategy() -> None:
    renamed = SchemaInfo(WITH_AGE.type, WITH_AGE.data, {"other": "props"}, "another name")
    for strategy in STRATEGIES:
        check_compatible(renamed, [WITH_AGE], strategy)
        if not strategy.endswith("_TRANSITIVE"):
            # Only the latest version counts: WITH_AGE is not backward compatible with V1.
            check_compatible(renamed, [V1, WITH_AGE], strategy)


def test_another_type_is_incompatible_unless_always_compatible() -> None:
    string = SchemaInfo(SchemaType.STRING)
    for strategy in STRATEGIES:
        if strategy == "ALWAYS_COMPATIBLE":
            check_compatible(string, [V1], strategy)
            continue
        with pytest.raises(IncompatibleSchemaError) as caught:
            check_compatible(string, [V1], strategy)
        assert str(caught.value) == (
            "Incompatible schema: exists schema type AVRO, new schema type STRING"
        )


def test_always_incompatible_refuses_any_other_definition() -> None:
    respaced = SchemaInfo(SchemaType.AVRO, json.dumps(json.loads(V1.data), indent=2).encode())
    with pytest.raises(IncompatibleSchemaError, match="ALWAYS_INCOMPATIBLE"):
        check_compatible(respaced, [V1], "ALWAYS_INCOMPATIBLE")
    # Only the latest schema is checked.
    check_compatible(V1, [WITH_AGE, V1], "ALWAYS_INCOMPATIBLE")


def test_primitive_types_match_exactly() -> None:
    int32, int64 = SchemaInfo(SchemaType.INT32), SchemaInfo(SchemaType.INT64)
    for strategy in STRATEGIES:
        check_compatible(int32, [int32], strategy)
    assert not compatible(int64, int32, "FULL")
    assert compatible(SchemaInfo(SchemaType.STRING, b"null"), SchemaInfo(SchemaType.STRING), "FULL")


@pytest.mark.parametrize("kind", [SchemaType.JSON, SchemaType.PROTOBUF])
def test_json_and_protobuf_follow_avro_rules(kind: SchemaType) -> None:
    old = record([NAME], kind=kind)
    assert compatible(record([NAME, field("age", "int", default=0)], kind=kind), old, "FULL")
    assert not compatible(record([NAME, field("age", "int")], kind=kind), old, "BACKWARD")


def test_json_legacy_documents() -> None:
    def legacy(schema_id: str) -> SchemaInfo:
        document = {"type": "object", "id": schema_id, "properties": {}}
        return SchemaInfo(SchemaType.JSON, json.dumps(document).encode())

    avro_form = record([NAME], kind=SchemaType.JSON)
    assert compatible(legacy("urn:a"), avro_form, "FULL")
    assert compatible(avro_form, legacy("urn:a"), "FULL")
    assert compatible(
        SchemaInfo(SchemaType.JSON, legacy("urn:a").data + b" "), legacy("urn:a"), "FULL"
    )
    assert not compatible(legacy("urn:b"), legacy("urn:a"), "FULL")


def test_unparseable_definitions() -> None:
    broken = SchemaInfo(SchemaType.AVRO, b"{")
    with pytest.raises(InvalidSchemaError):
        check_compatible(broken, [V1], "FULL")
    with pytest.raises(IncompatibleSchemaError, match="version 0 does not parse"):
        check_compatible(V1, [broken], "FULL")


def test_protobuf_native_root_message_must_keep_its_name() -> None:
    order, wider_order = native("Order", ["id"]), native("Order", ["id", "total"])
    for strategy in STRATEGIES[1:]:
        check_compatible(wider_order, [order], strategy)
        check_compatible(order, [order, wider_order], strategy)
    with pytest.raises(IncompatibleSchemaError, match=r"root message.*demo\.Order.*demo\.Invoice"):
        check_compatible(native("Invoice"), [order], "BACKWARD")
    assert not compatible(native("Invoice"), [native("Invoice"), order], "FORWARD_TRANSITIVE")
    assert compatible(native("Invoice"), [order], "ALWAYS_COMPATIBLE")
    assert not compatible(wider_order, [order], "ALWAYS_INCOMPATIBLE")


STRING = SchemaInfo(SchemaType.STRING)


def test_key_value_parts_are_checked_separately() -> None:
    old = key_value(AGE_INT, V1)
    assert compatible(key_value(AGE_INT, WITH_AGE_DEFAULT), old, "FULL")
    assert compatible(key_value(AGE_LONG, V1), old, "BACKWARD")
    with pytest.raises(IncompatibleSchemaError, match="New key schema is not forward compatible"):
        check_compatible(key_value(AGE_LONG, V1), [old], "FORWARD")
    with pytest.raises(IncompatibleSchemaError, match="New value schema is not backward"):
        check_compatible(key_value(AGE_INT, WITH_AGE), [old], "BACKWARD")
    transitive = [key_value(STRING, CHAIN_BACKWARD[0]), key_value(STRING, CHAIN_BACKWARD[1])]
    latest = key_value(STRING, CHAIN_BACKWARD[2])
    assert compatible(latest, transitive, "BACKWARD")
    assert not compatible(latest, transitive, "BACKWARD_TRANSITIVE")


def test_key_value_part_types_and_encoding_must_not_change() -> None:
    old = key_value(STRING, V1)
    with pytest.raises(IncompatibleSchemaError, match="different types"):
        check_compatible(key_value(SchemaInfo(SchemaType.INT64), V1), [old], "FULL")
    with pytest.raises(IncompatibleSchemaError, match="encoding changes from INLINE"):
        check_compatible(key_value(STRING, V1, KeyValueEncoding.SEPARATED), [old], "FULL")
    assert compatible(key_value(STRING, V1, KeyValueEncoding.SEPARATED), old, "ALWAYS_COMPATIBLE")
    assert not compatible(key_value(STRING, WITH_AGE_DEFAULT), old, "ALWAYS_INCOMPATIBLE")
    check_compatible(key_value(STRING, V1), [old], "ALWAYS_INCOMPATIBLE")


def test_consumer_checks() -> None:
    # A consumer reading with 'long' can read data written with 'int': enough under FULL,
    # where a producer would also need the reverse.
    assert not compatible(AGE_LONG, AGE_INT, "FULL")
    for strategy in ("BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"):
        check_consumer_compatible(AGE_LONG, [AGE_INT], strategy)
        with pytest.raises(IncompatibleSchemaError, match="not backward compatible"):
            check_consumer_compatible(AGE_INT, [AGE_LONG], strategy)
    # Under the others, every version is checked with the strategy itself.
    with pytest.raises(IncompatibleSchemaError, match="version 0"):
        check_consumer_compatible(CHAIN_BACKWARD[2], CHAIN_BACKWARD[:2], "BACKWARD_TRANSITIVE")
    with pytest.raises(IncompatibleSchemaError, match="not forward compatible"):
        check_consumer_compatible(AGE_LONG, [AGE_INT], "FULL_TRANSITIVE")
    with pytest.raises(IncompatibleSchemaError, match="ALWAYS_INCOMPATIBLE"):
        check_consumer_compatible(WITH_AGE_DEFAULT, [V1], "ALWAYS_INCOMPATIBLE")
    check_consumer_compatible(SchemaInfo(SchemaType.STRING), [V1], "ALWAYS_COMPATIBLE")


def test_consumer_with_a_registered_definition_is_always_accepted() -> None:
    history = [V1, WITH_AGE, AGE_INT]
    for strategy in STRATEGIES:
        check_consumer_compatible(V1, history, strategy)
    with pytest.raises(IncompatibleSchemaError, match="exists schema type"):
        check_consumer_compatible(SchemaInfo(SchemaType.STRING), history, "FULL")


def test_find_version() -> None:
    history = [V1, WITH_AGE, V1]
    assert find_version(SchemaInfo(SchemaType.AVRO, V1.data, {"p": "q"}, "x"), history) == 0
    assert find_version(WITH_AGE, history) == 1
    assert find_version(AGE_INT, history) is None
    assert find_version(SchemaInfo(SchemaType.JSON, V1.data), history) is None
    respaced = SchemaInfo(SchemaType.AVRO, json.dumps(json.loads(V1.data), indent=1).encode())
    assert find_version(respaced, history) is None
    assert find_version(respaced, history, parsed=True) == 0
    assert find_version(SchemaInfo(SchemaType.JSON, V1.data), history, parsed=True) is None
    assert find_version(SchemaInfo(SchemaType.AVRO, b"{"), history, parsed=True) is None
    assert find_version(STRING, [STRING], parsed=True) == 0


def test_recursive_records_and_uncomparable_kinds() -> None:
    def node(value_type: str) -> SchemaInfo:
        return record(
            [field("v", value_type), field("next", ["null", "Node"], default=None)], name="Node"
        )

    assert compatible(node("long"), node("int"), "BACKWARD")
    with pytest.raises(IncompatibleSchemaError, match=r"not forward compatible.*'v'"):
        check_compatible(node("long"), [node("int")], "FORWARD")
    # Avro "error" records are records: compared by their fields, as Avro's resolution does
    error_v1 = record([field("a", "int")], type="error")
    error_v2 = record([field("a", "long")], type="error")
    check_compatible(error_v1, [error_v1], "FULL")
    check_compatible(error_v2, [error_v1], "BACKWARD")
    with pytest.raises(IncompatibleSchemaError, match=r"not forward compatible.*'a'"):
        check_compatible(error_v2, [error_v1], "FULL")

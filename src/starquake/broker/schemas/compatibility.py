"""Whether a new schema may join a topic's registered schemas, under a compatibility strategy.

The strategies, by name:

- ``ALWAYS_COMPATIBLE``: anything goes, even a schema of another type.
- ``ALWAYS_INCOMPATIBLE``: only a schema with the same type and definition bytes as the one
  checked against.
- ``BACKWARD``: the new schema can read data written with the latest one (new reader, old writer).
- ``FORWARD``: the latest schema can read data written with the new one.
- ``FULL``: both.
- ``BACKWARD_TRANSITIVE``, ``FORWARD_TRANSITIVE``, ``FULL_TRANSITIVE``: the same against every
  registered schema instead of the latest only.

Except under ``ALWAYS_COMPATIBLE``, a schema of another type than the one checked against is
incompatible, and a schema with the same definition bytes is compatible. AVRO, JSON and PROTOBUF
definitions are compared with Avro's reader/writer resolution rules (a field a reader expects but
the writer lacks needs a default; ``int`` promotes to ``long``, ``float`` and ``double``; a reader
enum must hold the writer's symbols; a reader union must accept every writer branch; enums and
fixed types must keep their names, records need not: Pulsar validates with Avro's resolving
grammar, which matches records by their fields only, so a record ``User1`` may become ``User2``).
JSON also admits old-style JSON-schema documents on either side. A
PROTOBUF_NATIVE schema is compatible when its root message keeps its full name. A KEY_VALUE schema
keeps its encoding and the types of its parts, and its key and value parts are checked each on its
own, under the same strategy. Other types (primitive ones, NONE, BYTES) are compatible with any
schema of their type.

A consumer subscribing with a schema is checked more leniently than a producer: see
:func:`check_consumer_compatible`.
"""

from __future__ import annotations

from collections.abc import Sequence

import avro.schema
from avro.compatibility import (
    ReaderWriterCompatibilityChecker,
    SchemaCompatibilityResult,
    SchemaCompatibilityType,
    SchemaIncompatibilityType,
)

from starquake.broker.schemas.validation import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    is_legacy_json_schema,
    legacy_json_schema_id,
    parse_avro,
    protobuf_native_root,
    validate,
)
from starquake.common.schema_info import SchemaInfo, SchemaType, unpack_key_value_schema

__all__ = [
    "ALWAYS_COMPATIBLE",
    "ALWAYS_INCOMPATIBLE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "DEFAULT_STRATEGY",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "STRATEGIES",
    "TRANSITIVE_STRATEGIES",
    "IncompatibleSchemaError",
    "InvalidSchemaError",
    "check_compatible",
    "check_consumer_compatible",
    "find_version",
    "validate",
]

ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
BACKWARD = "BACKWARD"
FORWARD = "FORWARD"
FULL = "FULL"
BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
FULL_TRANSITIVE = "FULL_TRANSITIVE"

STRATEGIES: tuple[str, ...] = (
    ALWAYS_INCOMPATIBLE,
    ALWAYS_COMPATIBLE,
    BACKWARD,
    FORWARD,
    FULL,
    BACKWARD_TRANSITIVE,
    FORWARD_TRANSITIVE,
    FULL_TRANSITIVE,
)
"""Every strategy name, as the admin API and the broker configuration spell them."""

DEFAULT_STRATEGY = FULL
"""The broker-wide default strategy (``schemaCompatibilityStrategy`` in Pulsar's broker.conf)."""

TRANSITIVE_STRATEGIES = frozenset({BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, FULL_TRANSITIVE})
"""Strategies that check against every registered schema, not only the latest."""

# Strategies under which the new schema must read the old one's data, and the reverse.
_NEW_READS_OLD = frozenset({BACKWARD, BACKWARD_TRANSITIVE, FULL, FULL_TRANSITIVE})
_OLD_READS_NEW = frozenset({FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE})
# Strategies under which a subscribing consumer is checked as a BACKWARD reader of the latest
# schema only; under the others it is checked against every schema with the strategy itself.
_CONSUMER_LATEST_ONLY = frozenset({BACKWARD, FORWARD, FORWARD_TRANSITIVE, FULL})
_AVRO_DEFINITION_TYPES = frozenset({SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF})


def check_compatible(
    new: SchemaInfo,
    existing: Sequence[SchemaInfo],
    strategy: str,
    *,
    first_version: int = 0,
) -> None:
    """Raise :class:`IncompatibleSchemaError` unless a producer may register ``new``.

    ``existing`` holds the topic's registered schemas, oldest first (at least one);
    ``first_version`` is the version number of ``existing[0]``, used in messages only. Callers
    look ``new`` up with :func:`find_version` first: a schema already registered needs no check.
    :class:`InvalidSchemaError` is raised when ``new``'s own definition does not parse, and
    ``ValueError`` for an unknown strategy or an empty ``existing``.
    """
    _require_arguments(existing, strategy)
    if strategy == ALWAYS_COMPATIBLE:
        return
    last = len(existing) - 1
    indices = range(last, -1, -1) if strategy in TRANSITIVE_STRATEGIES else range(last, last + 1)
    for index in indices:
        _check_pair(new, existing[index], strategy, f"version {first_version + index}")


def check_consumer_compatible(
    new: SchemaInfo,
    existing: Sequence[SchemaInfo],
    strategy: str,
    *,
    first_version: int = 0,
) -> None:
    """Raise :class:`IncompatibleSchemaError` unless a consumer may subscribe with ``new``.

    A consumer schema with the same type and definition as any registered schema is accepted,
    and so is every schema under ``ALWAYS_COMPATIBLE``. Under ``BACKWARD``, ``FORWARD``,
    ``FORWARD_TRANSITIVE`` and ``FULL`` the consumer's schema must read data written with the
    latest registered schema; under ``ALWAYS_INCOMPATIBLE``, ``BACKWARD_TRANSITIVE`` and
    ``FULL_TRANSITIVE`` it is checked against every registered schema with the strategy itself.
    Arguments are as for :func:`check_compatible`.
    """
    _require_arguments(existing, strategy)
    if strategy == ALWAYS_COMPATIBLE or find_version(new, existing) is not None:
        return
    last = len(existing) - 1
    if strategy in _CONSUMER_LATEST_ONLY:
        _check_pair(new, existing[last], BACKWARD, f"version {first_version + last}")
        return
    for index in range(last, -1, -1):
        _check_pair(new, existing[index], strategy, f"version {first_version + index}")


def find_version(
    schema: SchemaInfo, existing: Sequence[SchemaInfo], *, parsed: bool = False
) -> int | None:
    """The index in ``existing`` of the first schema declaring the same schema as ``schema``.

    By default two schemas are the same when their types and definition bytes are equal (names
    and properties do not count). With ``parsed``, AVRO, JSON and PROTOBUF definitions are also
    the same when they parse to equal Avro schemas (differing in layout only), which is how a
    schema being registered is matched against the registered ones.
    """
    for index, old in enumerate(existing):
        if schema.same_definition(old):
            return index
    if not parsed or schema.type not in _AVRO_DEFINITION_TYPES:
        return None
    mine = _try_parse_avro(schema.data)
    if mine is None:
        return None
    for index, old in enumerate(existing):
        if old.type == schema.type and _try_parse_avro(old.data) == mine:
            return index
    return None


def _require_arguments(existing: Sequence[SchemaInfo], strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown schema compatibility strategy {strategy!r}")
    if not existing:
        raise ValueError("there is no registered schema to check against")


def _check_pair(
    new: SchemaInfo, old: SchemaInfo, strategy: str, label: str, what: str = "New schema"
) -> None:
    """Check ``new`` against the one registered schema ``old`` (named ``label`` in messages)."""
    if new.type != old.type:
        raise IncompatibleSchemaError(
            f"Incompatible schema: exists schema type {old.type.name}, "
            f"new schema type {new.type.name}"
        )
    if new.type is SchemaType.KEY_VALUE:
        _check_key_value(new, old, strategy, label)
        return
    if new.data == old.data:
        return
    if strategy == ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError(
            f"Schema compatibility strategy is ALWAYS_INCOMPATIBLE: {what.lower()} differs "
            f"from {label}"
        )
    kind = new.type
    if kind in (SchemaType.AVRO, SchemaType.PROTOBUF):
        _check_avro(_parse_new(new), _parse_old(old, label), strategy, label, what)
    elif kind is SchemaType.JSON:
        _check_json(new, old, strategy, label, what)
    elif kind is SchemaType.PROTOBUF_NATIVE:
        _check_protobuf_native(new, old, label, what)
    # Any other type has no definition to evolve: the same type is enough.


def _check_key_value(new: SchemaInfo, old: SchemaInfo, strategy: str, label: str) -> None:
    new_key, new_value, new_encoding = _unpack(new, None)
    old_key, old_value, old_encoding = _unpack(old, label)
    if new_encoding != old_encoding:
        raise IncompatibleSchemaError(
            f"Incompatible KEY_VALUE schema: the encoding changes from {old_encoding} "
            f"({label}) to {new_encoding}"
        )
    if new_key.type != old_key.type or new_value.type != old_value.type:
        raise IncompatibleSchemaError(
            "Key schemas or value schemas are of different types: "
            f"{label} has key {old_key.type.name} and value {old_value.type.name}, "
            f"the new schema has key {new_key.type.name} and value {new_value.type.name}"
        )
    if new.data == old.data:
        return
    if strategy == ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError(
            f"Schema compatibility strategy is ALWAYS_INCOMPATIBLE: new schema differs from {label}"
        )
    _check_pair(new_key, old_key, strategy, label, "New key schema")
    _check_pair(new_value, old_value, strategy, label, "New value schema")


def _unpack(schema: SchemaInfo, label: str | None) -> tuple[SchemaInfo, SchemaInfo, str]:
    try:
        return unpack_key_value_schema(schema)
    except ValueError as exc:
        if label is None:
            raise InvalidSchemaError(f"Invalid KEY_VALUE schema: {exc}") from None
        raise IncompatibleSchemaError(f"Registered schema {label} is malformed: {exc}") from None


def _parse_new(schema: SchemaInfo) -> avro.schema.Schema:
    try:
        return parse_avro(schema.data)
    except InvalidSchemaError as exc:
        raise InvalidSchemaError(
            f"Invalid schema definition data for {schema.type.name} schema: {exc}"
        ) from None


def _parse_old(schema: SchemaInfo, label: str) -> avro.schema.Schema:
    try:
        return parse_avro(schema.data)
    except InvalidSchemaError as exc:
        raise IncompatibleSchemaError(f"Registered schema {label} does not parse: {exc}") from None


def _try_parse_avro(data: bytes) -> avro.schema.Schema | None:
    try:
        return parse_avro(data)
    except InvalidSchemaError:
        return None


def _check_avro(
    new: avro.schema.Schema, old: avro.schema.Schema, strategy: str, label: str, what: str
) -> None:
    if strategy in _NEW_READS_OLD:
        _require_readable(new, old, "backward", label, what)
    if strategy in _OLD_READS_NEW:
        _require_readable(old, new, "forward", label, what)


def _check_json(new: SchemaInfo, old: SchemaInfo, strategy: str, label: str, what: str) -> None:
    new_avro = _try_parse_avro(new.data)
    old_avro = _try_parse_avro(old.data)
    if new_avro is not None and old_avro is not None:
        _check_avro(new_avro, old_avro, strategy, label, what)
        return
    new_legacy = new_avro is None and is_legacy_json_schema(new.data)
    old_legacy = old_avro is None and is_legacy_json_schema(old.data)
    if new_avro is None and not new_legacy:
        _parse_new(new)  # raises InvalidSchemaError with the parser's reason
    if new_legacy and old_legacy:
        new_id = legacy_json_schema_id(new.data)
        old_id = legacy_json_schema_id(old.data)
        if new_id is None or new_id != old_id:
            raise IncompatibleSchemaError(
                f"{what} is not compatible with {label}: the JSON-schema ids differ "
                f"({old_id!r} and {new_id!r})"
            )
    # One side in the old JSON-schema format and the other in Avro form is accepted, and so is
    # anything replacing a registered definition in neither form.


def _check_protobuf_native(new: SchemaInfo, old: SchemaInfo, label: str, what: str) -> None:
    new_root = protobuf_native_root(new.data)
    try:
        old_root = protobuf_native_root(old.data)
    except InvalidSchemaError as exc:
        raise IncompatibleSchemaError(f"Registered schema {label} does not parse: {exc}") from None
    if new_root != old_root:
        raise IncompatibleSchemaError(
            f"{what} is not compatible with {label}: the protobuf root message may not change "
            f"(from {old_root} to {new_root})"
        )


class _RecordNamesIgnored(ReaderWriterCompatibilityChecker):
    """Avro's reader/writer checks, except that records are matched by their fields whatever
    their names, as Avro's resolving grammar (which Pulsar validates with) matches them."""

    def calculate_compatibility(
        self, reader: avro.schema.Schema, writer: avro.schema.Schema, location: list[str]
    ) -> SchemaCompatibilityResult:
        """The compatibility of a reader and writer pair (see the class)."""
        if isinstance(reader, avro.schema.RecordSchema) and isinstance(
            writer, avro.schema.RecordSchema
        ):
            return self.check_reader_writer_record_fields(reader, writer, location)
        return super().calculate_compatibility(reader, writer, location)


def _require_readable(
    reader: avro.schema.Schema,
    writer: avro.schema.Schema,
    direction: str,
    label: str,
    what: str,
) -> None:
    checker = _RecordNamesIgnored()  # type: ignore[no-untyped-call]
    try:
        result = checker.get_compatibility(reader, writer)
    except Exception as exc:  # the checker gives up on kinds it does not know, such as "error"
        raise IncompatibleSchemaError(
            f"{what} cannot be compared with {label}: {exc or type(exc).__name__}"
        ) from None
    if result.compatibility is SchemaCompatibilityType.compatible:
        return
    raise IncompatibleSchemaError(
        f"{what} is not {direction} compatible with {label}: {_explain(result, reader)}"
    )


_KIND_WORDING = {
    SchemaIncompatibilityType.missing_enum_symbols: "the reader's enum lacks symbols {}",
    SchemaIncompatibilityType.name_mismatch: "a named type changes its name ({})",
    SchemaIncompatibilityType.fixed_size_mismatch: "a fixed type changes its size ({})",
}


def _explain(result: SchemaCompatibilityResult, reader: avro.schema.Schema) -> str:
    """A readable account of why ``reader`` cannot read its writer's data."""
    kinds = set(result.incompatibilities)
    paths = sorted({_field_path(reader, location) for location in result.locations})
    fields = [path for path in paths if path]
    missing_default = SchemaIncompatibilityType.reader_field_missing_default_value
    if kinds == {missing_default}:
        names = fields or sorted(result.messages)
        return "; ".join(f"field {name!r} has no default" for name in names)
    messages = sorted(result.messages)
    if len(kinds) == 1:
        wording = _KIND_WORDING.get(next(iter(kinds)))
        if wording is not None:
            messages = [wording.format(message) for message in messages]
    text = "; ".join(messages)
    if fields:
        text += " (at field " + ", ".join(repr(field) for field in fields) + ")"
    return text


def _field_path(schema: avro.schema.Schema, location: str) -> str:
    """The dotted field names along a checker location such as ``/fields/1/type/fields/0``."""
    tokens = [token for token in location.split("/") if token]
    names: list[str] = []
    current = schema
    position = 0
    while position < len(tokens):
        token = tokens[position]
        if token == "fields" and isinstance(current, avro.schema.RecordSchema):
            following = tokens[position + 1] if position + 1 < len(tokens) else ""
            if not following.isdigit() or int(following) >= len(current.fields):
                break
            field = current.fields[int(following)]
            names.append(str(field.name))
            current = field.type
            position += 2
            if position < len(tokens) and tokens[position] == "type":
                position += 1
            continue
        if token == "items" and isinstance(current, avro.schema.ArraySchema):
            current = current.items
        elif token == "values" and isinstance(current, avro.schema.MapSchema):
            current = current.values
        else:
            break
        position += 1
    return ".".join(names)

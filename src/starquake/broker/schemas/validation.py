"""Whether a schema definition is well formed, as the broker requires before storing it.

AVRO, JSON and PROTOBUF definitions are Avro schemas in JSON text. Names follow the broker's
lenient rule rather than Avro's strict one: a name starts with a letter, ``_`` or ``$`` and goes
on with letters, digits, ``_`` or ``$`` (``$`` appears in the names of nested Java classes). Field
defaults are not checked against their types. An AVRO definition may not be a union at its top
level. A JSON definition may also be an old-style JSON-schema document (a JSON object whose
``type`` is a JSON-schema type name), which clients used to send before JSON schemas were
described in Avro.

A PROTOBUF_NATIVE definition is a JSON object: ``fileDescriptorSet`` (a serialized
``FileDescriptorSet``, base64), ``rootMessageTypeName`` (the full name of the root message) and
``rootFileDescriptorName`` (the file declaring it). The root file and the files it imports must
build in an empty descriptor pool, and the root message must be declared in the root file.

Primitive types carry no definition; a STRING schema may carry the text ``null``, which some
clients send. NONE and BYTES schemas are never stored, so their data is not looked at. The AUTO
kinds are client-side placeholders and cannot be stored.
"""

from __future__ import annotations

import base64
import functools
import json
import warnings
from typing import Any

import avro.schema
from google.protobuf import descriptor_pb2, descriptor_pool

from starquake.broker.errors import BrokerServiceError
from starquake.common.schema_info import (
    KeyValueEncoding,
    SchemaInfo,
    SchemaType,
    unpack_key_value_schema,
)
from starquake.protocol.errors import ServerError

__all__ = [
    "IncompatibleSchemaError",
    "InvalidSchemaError",
    "is_legacy_json_schema",
    "legacy_json_schema_id",
    "parse_avro",
    "protobuf_native_root",
    "validate",
]

# The primitive types, whose schemas carry no definition.
_EMPTY_DEFINITION_TYPES = frozenset(
    {
        SchemaType.BOOLEAN,
        SchemaType.INT8,
        SchemaType.INT16,
        SchemaType.INT32,
        SchemaType.INT64,
        SchemaType.FLOAT,
        SchemaType.DOUBLE,
        SchemaType.DATE,
        SchemaType.TIME,
        SchemaType.TIMESTAMP,
        SchemaType.INSTANT,
        SchemaType.LOCAL_DATE,
        SchemaType.LOCAL_TIME,
        SchemaType.LOCAL_DATE_TIME,
    }
)
_AVRO_DEFINITION_TYPES = frozenset({SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF})
_CLIENT_SIDE_TYPES = frozenset({SchemaType.AUTO, SchemaType.AUTO_CONSUME, SchemaType.AUTO_PUBLISH})
# The value type names of a JSON-schema document.
_JSON_SCHEMA_TYPES = frozenset(
    {"object", "array", "string", "number", "integer", "boolean", "null", "any"}
)
_KV_ENCODINGS = frozenset({KeyValueEncoding.INLINE, KeyValueEncoding.SEPARATED})


class InvalidSchemaError(BrokerServiceError):
    """A schema definition that is not well formed (reported as ``IncompatibleSchema``)."""

    code = ServerError.IncompatibleSchema


class IncompatibleSchemaError(BrokerServiceError):
    """A well-formed schema that the topic's compatibility strategy does not admit."""

    code = ServerError.IncompatibleSchema


def validate(schema: SchemaInfo) -> None:
    """Raise :class:`InvalidSchemaError` unless ``schema`` is well formed enough to be stored."""
    kind = schema.type
    if kind in _CLIENT_SIDE_TYPES:
        raise InvalidSchemaError(f"Schema {kind.name} is a client-side schema type")
    if kind in (SchemaType.NONE, SchemaType.BYTES):
        return
    if kind in _EMPTY_DEFINITION_TYPES:
        if schema.data:
            raise InvalidSchemaError(
                f"Invalid schema definition data for primitive schema {kind.name}: the data "
                f"should be empty, but {len(schema.data)} bytes were given"
            )
        return
    if kind is SchemaType.STRING:
        if schema.data and schema.data != b"null":
            raise InvalidSchemaError(
                f"Invalid schema definition data for string schema: {_preview(schema.data)}"
            )
        return
    if kind in _AVRO_DEFINITION_TYPES:
        _validate_avro_definition(schema)
    elif kind is SchemaType.PROTOBUF_NATIVE:
        protobuf_native_root(schema.data)
    elif kind is SchemaType.KEY_VALUE:
        try:
            key, value, encoding = unpack_key_value_schema(schema)
        except ValueError as exc:
            raise InvalidSchemaError(f"Invalid KEY_VALUE schema: {exc}") from None
        if encoding not in _KV_ENCODINGS:
            raise InvalidSchemaError(f"Invalid KEY_VALUE schema: unknown encoding {encoding!r}")
        for label, part in (("key", key), ("value", value)):
            try:
                validate(part)
            except InvalidSchemaError as exc:
                raise InvalidSchemaError(f"Invalid KEY_VALUE {label} schema: {exc}") from None
    else:  # pragma: no cover - every SchemaType is handled above
        raise InvalidSchemaError(f"Unknown schema type: {kind.name}")


def _validate_avro_definition(schema: SchemaInfo) -> None:
    try:
        parsed = parse_avro(schema.data)
    except InvalidSchemaError as exc:
        if schema.type is SchemaType.JSON and is_legacy_json_schema(schema.data):
            return
        raise InvalidSchemaError(
            f"Invalid schema definition data for {schema.type.name} schema: {exc}"
        ) from None
    if schema.type is SchemaType.AVRO and isinstance(parsed, avro.schema.UnionSchema):
        raise InvalidSchemaError("Avro schema typed [UNION] is not supported")


def parse_avro(data: bytes) -> avro.schema.Schema:
    """The Avro schema that ``data`` defines (:class:`InvalidSchemaError` when it is not one).

    Results are cached by definition bytes; treat the returned schema as read-only.
    """
    return _parse_avro_cached(bytes(data))


@functools.lru_cache(maxsize=512)
def _parse_avro_cached(data: bytes) -> avro.schema.Schema:
    text = data.decode("utf-8", errors="replace")
    try:
        with warnings.catch_warnings():
            # Unknown logical types are ignored, as the Avro specification says; the library
            # warns about each one.
            warnings.simplefilter("ignore")
            parsed = avro.schema.parse(text, validate_enum_symbols=False, validate_names=False)
    except Exception as exc:  # the parser raises many kinds of errors on malformed input
        raise InvalidSchemaError(_avro_error_text(exc)) from None
    _check_names(parsed, set())
    return parsed


def _avro_error_text(exc: Exception) -> str:
    text = str(exc)
    if text.startswith("Error parsing JSON"):
        return "not valid JSON"
    return text or type(exc).__name__


def _check_names(schema: avro.schema.Schema, seen: set[int]) -> None:
    """Apply the naming rule and the enum rules to every name in ``schema``."""
    if id(schema) in seen:
        return
    seen.add(id(schema))
    if isinstance(schema, avro.schema.NamedSchema):
        _check_name(str(schema.name), "name")
    if isinstance(schema, avro.schema.RecordSchema):
        for field in schema.fields:
            _check_name(str(field.name), "field name")
            _check_names(field.type, seen)
    elif isinstance(schema, avro.schema.EnumSchema):
        symbols = list(schema.symbols)
        for symbol in symbols:
            _check_name(str(symbol), "enum symbol")
        default = schema.get_prop("default")
        if default is not None and default not in symbols:
            raise InvalidSchemaError(
                f"enum default {default!r} of {schema.fullname} is not one of its symbols"
            )
    elif isinstance(schema, avro.schema.ArraySchema):
        _check_names(schema.items, seen)
    elif isinstance(schema, avro.schema.MapSchema):
        _check_names(schema.values, seen)
    elif isinstance(schema, avro.schema.UnionSchema):
        for branch in schema.schemas:
            _check_names(branch, seen)


def _check_name(name: str, what: str) -> None:
    ok = bool(name) and (name[0].isalpha() or name[0] in "_$")
    ok = ok and all(c.isalnum() or c in "_$" for c in name[1:])
    if not ok:
        raise InvalidSchemaError(f"illegal {what} {name!r}")


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        loaded: Any = json.loads(data.decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


def is_legacy_json_schema(data: bytes) -> bool:
    """Whether ``data`` is an old-style JSON-schema document (not an Avro definition)."""
    document = _json_object(data)
    return document is not None and document.get("type") in _JSON_SCHEMA_TYPES


def legacy_json_schema_id(data: bytes) -> str | None:
    """The ``id`` of an old-style JSON-schema document (``None`` when it has none)."""
    document = _json_object(data)
    found = None if document is None else document.get("id")
    return found if isinstance(found, str) else None


def protobuf_native_root(data: bytes) -> str:
    """The full name of the root message of a PROTOBUF_NATIVE definition.

    Raises :class:`InvalidSchemaError` when the definition does not parse or does not build.
    Results are cached by definition bytes.
    """
    return _protobuf_native_root_cached(bytes(data))


@functools.lru_cache(maxsize=256)
def _protobuf_native_root_cached(data: bytes) -> str:
    document = _json_object(data)
    if document is None:
        raise InvalidSchemaError("Invalid PROTOBUF_NATIVE schema: not a JSON object")
    encoded = document.get("fileDescriptorSet")
    root_message = document.get("rootMessageTypeName")
    root_file = document.get("rootFileDescriptorName")
    if not (isinstance(encoded, str) and isinstance(root_message, str)):
        raise InvalidSchemaError(
            "Invalid PROTOBUF_NATIVE schema: fileDescriptorSet and rootMessageTypeName are required"
        )
    if not isinstance(root_file, str):
        raise InvalidSchemaError(
            "Invalid PROTOBUF_NATIVE schema: rootFileDescriptorName is required"
        )
    descriptor_set = descriptor_pb2.FileDescriptorSet()
    try:
        descriptor_set.ParseFromString(base64.b64decode(encoded, validate=True))
    except Exception as exc:  # bad base64 or a message that does not decode
        raise InvalidSchemaError(
            f"Invalid PROTOBUF_NATIVE schema: fileDescriptorSet does not parse ({exc})"
        ) from None
    files = {proto.name: proto for proto in descriptor_set.file}
    if root_file not in files:
        raise InvalidSchemaError(
            f"Invalid PROTOBUF_NATIVE schema: root file {root_file!r} is not in the descriptor set"
        )
    pool = descriptor_pool.DescriptorPool()
    _build_file(pool, files, root_file, set(), set())
    root = files[root_file]
    prefix = f"{root.package}." if root.package else ""
    if not root_message.startswith(prefix) or len(root_message) == len(prefix):
        raise InvalidSchemaError(
            f"Invalid PROTOBUF_NATIVE schema: root message {root_message!r} is outside "
            f"package {root.package!r} of {root_file!r}"
        )
    try:
        message = pool.FindMessageTypeByName(root_message)
    except KeyError:
        message = None
    if message is None or message.file.name != root_file:
        raise InvalidSchemaError(
            f"Invalid PROTOBUF_NATIVE schema: root message {root_message!r} is not declared "
            f"in {root_file!r}"
        )
    return str(message.full_name)


def _build_file(
    pool: descriptor_pool.DescriptorPool,
    files: dict[str, descriptor_pb2.FileDescriptorProto],
    name: str,
    built: set[str],
    visiting: set[str],
) -> None:
    """Add file ``name`` to ``pool`` after the files it imports."""
    if name in built:
        return
    if name in visiting:
        raise InvalidSchemaError(f"Invalid PROTOBUF_NATIVE schema: cyclic imports at {name!r}")
    proto = files.get(name)
    if proto is None:
        raise InvalidSchemaError(
            f"Invalid PROTOBUF_NATIVE schema: imported file {name!r} is not in the descriptor set"
        )
    visiting.add(name)
    for dependency in proto.dependency:
        _build_file(pool, files, dependency, built, visiting)
    visiting.discard(name)
    try:
        pool.Add(proto)
    except Exception as exc:  # the pool raises TypeError or its own errors
        raise InvalidSchemaError(
            f"Invalid PROTOBUF_NATIVE schema: {name!r} does not build ({exc})"
        ) from None
    built.add(name)


def _preview(data: bytes, limit: int = 40) -> str:
    text = data[:limit].decode("utf-8", errors="replace")
    return repr(text + ("..." if len(data) > limit else ""))

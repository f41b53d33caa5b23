"""The wire ``Schema`` message to and from :class:`~starquake.common.schema_info.SchemaInfo`."""

from __future__ import annotations

from starquake.common.schema_info import SchemaInfo, SchemaType
from starquake.protocol._generated import starquake_wire_pb2 as pb

__all__ = ["fill_schema", "schema_info_of"]


def schema_info_of(schema: pb.Schema) -> SchemaInfo | None:
    """The schema a PRODUCER, SUBSCRIBE or schema command carries; None for bytes (type
    ``None``) and for a type this side does not know."""
    try:
        kind = SchemaType.from_wire(int(schema.type))
    except ValueError:
        return None
    if kind is SchemaType.BYTES:
        return None
    properties = {kv.key: kv.value for kv in schema.properties}
    return SchemaInfo(kind, bytes(schema.schema_data), properties, schema.name)


def fill_schema(target: pb.Schema, info: SchemaInfo) -> None:
    """Write ``info`` into the wire message ``target`` (properties sorted by key)."""
    target.name = info.name
    target.schema_data = info.data
    target.type = info.type.wire  # type: ignore[assignment]
    for key, value in sorted(info.properties.items()):
        target.properties.add(key=key, value=value)

"""Builders of sample schemas for the schema validation and compatibility tests."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from google.protobuf import descriptor_pb2

from starquake.common.schema_info import (
    KeyValueEncoding,
    SchemaInfo,
    SchemaType,
    pack_key_value_schema,
)


def record(
    fields: Sequence[dict[str, Any]],
    *,
    name: str = "User",
    kind: SchemaType = SchemaType.AVRO,
    **extra: Any,
) -> SchemaInfo:
    """A record schema of ``kind`` (AVRO, JSON or PROTOBUF) with ``fields``."""
    definition = {"type": "record", "name": name, "fields": list(fields), **extra}
    return SchemaInfo(kind, json.dumps(definition).encode(), name=name)


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    """One record field."""
    return {"name": name, "type": type_, **extra}


def message_file(
    file_name: str,
    package: str,
    messages: dict[str, Sequence[str]],
    *,
    dependencies: Sequence[str] = (),
) -> descriptor_pb2.FileDescriptorProto:
    """A proto3 file declaring ``messages`` (name -> int64 field names)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=file_name, package=package, syntax="proto3", dependency=list(dependencies)
    )
    for message_name, field_names in messages.items():
        message = proto.message_type.add(name=message_name)
        for number, field_name in enumerate(field_names, start=1):
            message.field.add(
                name=field_name,
                number=number,
                type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
    return proto


def native_definition(
    files: Sequence[descriptor_pb2.FileDescriptorProto], root_message: str, root_file: str
) -> bytes:
    """The PROTOBUF_NATIVE definition of ``files`` rooted at ``root_message`` in ``root_file``."""
    descriptor_set = descriptor_pb2.FileDescriptorSet(file=list(files))
    document = {
        "fileDescriptorSet": base64.b64encode(descriptor_set.SerializeToString()).decode(),
        "rootMessageTypeName": root_message,
        "rootFileDescriptorName": root_file,
    }
    return json.dumps(document).encode()


def native(message: str = "Order", fields: Sequence[str] = ("id",)) -> SchemaInfo:
    """A PROTOBUF_NATIVE schema whose root is ``demo.<message>`` in ``order.proto``."""
    proto = message_file("order.proto", "demo", {message: fields})
    return SchemaInfo(
        SchemaType.PROTOBUF_NATIVE, native_definition([proto], f"demo.{message}", "order.proto")
    )


def key_value(
    key: SchemaInfo, value: SchemaInfo, encoding: str = KeyValueEncoding.INLINE
) -> SchemaInfo:
    """The KEY_VALUE schema of ``key`` and ``value``."""
    return pack_key_value_schema(key, value, encoding)

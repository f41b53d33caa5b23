"""``ProtobufNativeSchema``: protobuf messages in their own binary encoding.

The declared definition (type ``PROTOBUF_NATIVE``, name ``PROTOBUF_NATIVE``) is a JSON object
with, in this order:

- ``fileDescriptorSet``: base64 of a serialized ``FileDescriptorSet`` holding the message's
  ``.proto`` file and, transitively, every file it imports, each file after its imports (imports
  in declaration order, each file once);
- ``rootMessageTypeName``: the message's full name (``package.Message``);
- ``rootFileDescriptorName``: the name of the message's ``.proto`` file.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf.descriptor import FileDescriptor
from google.protobuf.message import Message

from starquake.client.schema._base import Schema
from starquake.common.schema_info import SchemaType

__all__ = ["ProtobufNativeSchema", "protobuf_native_definition"]


def _file_descriptor_set(root: FileDescriptor) -> bytes:
    from google.protobuf import descriptor_pb2

    files = descriptor_pb2.FileDescriptorSet()
    done: set[str] = set()

    def add(file: FileDescriptor) -> None:
        if file.name in done:
            return
        for imported in file.dependencies:
            add(imported)
        done.add(file.name)
        file.CopyToProto(files.file.add())

    add(root)
    return files.SerializeToString()


def protobuf_native_definition(descriptor: Any) -> dict[str, str]:
    """The PROTOBUF_NATIVE schema definition of the message type ``descriptor``."""
    encoded = base64.b64encode(_file_descriptor_set(descriptor.file)).decode("ascii")
    return {
        "fileDescriptorSet": encoded,
        "rootMessageTypeName": descriptor.full_name,
        "rootFileDescriptorName": descriptor.file.name,
    }


class ProtobufNativeSchema(Schema):
    """Messages of the generated protobuf class ``record_cls``, serialized natively.

    Protobuf's own rules make old and new versions of a message read each other's payloads, so
    decoding never needs the writer's schema.
    """

    def __init__(self, record_cls: type[Message]) -> None:
        if not (isinstance(record_cls, type) and issubclass(record_cls, Message)):
            raise TypeError(f"record_cls must be a protobuf Message subclass, got {record_cls!r}")
        definition = protobuf_native_definition(record_cls.DESCRIPTOR)
        super().__init__(record_cls, SchemaType.PROTOBUF_NATIVE, definition, "PROTOBUF_NATIVE")

    def encode(self, obj: Any) -> bytes:
        self._validate_object_type(obj)
        data: bytes = obj.SerializeToString()
        return data

    def decode(self, data: bytes) -> Any:
        return self._record_cls.FromString(data)

    def __repr__(self) -> str:
        return f"ProtobufNativeSchema({self._record_cls.__name__})"

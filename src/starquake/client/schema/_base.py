"""The ``Schema`` base class: a schema's declaration plus its encoder and decoder."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from starquake.common.schema_info import SchemaInfo, SchemaType

__all__ = ["Schema", "definition_bytes"]


def definition_bytes(definition: Any) -> bytes:
    """The schema data declaring ``definition``: its JSON with a one-space indent.

    This exact text is what the producer registers, and the broker keeps one schema version per
    distinct text, so every client registering the same schema must produce the same bytes.
    """
    return json.dumps(definition, indent=1).encode("utf-8")


class Schema(ABC):
    """Base class of schemas: how values of one type become message payloads and back.

    Subclasses implement :meth:`encode` and :meth:`decode`. The constructor declares the
    schema the producer and consumer announce: ``schema_definition`` is serialized as JSON
    (see :func:`definition_bytes`); a ``BYTES`` schema has no definition and empty data.
    ``record_cls`` is the type :meth:`encode` accepts.
    """

    def __init__(
        self,
        record_cls: Any,
        schema_type: SchemaType | int,
        schema_definition: Any,
        schema_name: str,
    ) -> None:
        kind = SchemaType(schema_type)
        data = b"" if kind is SchemaType.BYTES else definition_bytes(schema_definition)
        self._setup(record_cls, SchemaInfo(kind, data, {}, schema_name))

    def _setup(self, record_cls: Any, info: SchemaInfo) -> None:
        self._record_cls = record_cls
        self._schema_info = info

    def schema_info(self) -> SchemaInfo:
        """The schema as declared to the broker: type, name, definition and properties."""
        return self._schema_info

    @abstractmethod
    def encode(self, obj: Any) -> bytes:
        """The payload of ``obj`` (TypeError or ValueError when it does not fit the schema)."""

    @abstractmethod
    def decode(self, data: bytes) -> Any:
        """The value of a payload written with this schema."""

    def decode_message(self, msg: Any) -> Any:
        """The value of a received message's payload."""
        return self.decode(msg.data())

    def decode_with_writer(self, data: bytes, writer: SchemaInfo) -> Any:
        """The value of a payload written with the schema ``writer``, another version of this
        one, read as this schema's type. The default ignores ``writer``: only schemas whose
        :attr:`needs_writer_schema` is true read differently."""
        return self.decode(data)

    @property
    def needs_writer_schema(self) -> bool:
        """Whether decoding a payload written under another schema version needs that
        version's definition (see :meth:`decode_with_writer`)."""
        return False

    def _validate_object_type(self, obj: Any) -> None:
        if not isinstance(obj, self._record_cls):
            raise TypeError(
                f"Invalid record obj of type {type(obj)} - expected type is {self._record_cls}"
            )

    def __repr__(self) -> str:
        return type(self).__name__

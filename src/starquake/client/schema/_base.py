"""The ``Schema`` base class: a schema's declaration plus its encoder and decoder."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from starquake.common.schema_info import SchemaInfo, SchemaType

__all__ = ["ClientSchemaInfo", "Schema", "definition_bytes"]


def definition_bytes(definition: Any) -> bytes:
    """The schema data declaring ``definition``: its JSON with a one-space indent.

    This exact text is what the producer registers, and the broker keeps one schema version per
    distinct text, so every client registering the same schema must produce the same bytes.
    """
    return json.dumps(definition, indent=1).encode("utf-8")


class _Name(str):
    """A schema name: a str (``info.name``), and callable as the official client's
    ``SchemaInfo.name()`` method."""

    __slots__ = ()

    def __call__(self) -> str:
        return str(self)


@dataclass(frozen=True, eq=False)
class ClientSchemaInfo(SchemaInfo):
    """A schema's declaration, with the official client's ``SchemaInfo`` methods:
    :meth:`schema_type`, ``name()`` and :meth:`schema` (besides the attributes ``type``,
    ``name``, ``data`` and ``properties``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _Name(self.name))

    def schema_type(self) -> SchemaType:
        """The schema type."""
        return self.type

    def schema(self) -> str:
        """The schema definition (JSON for AVRO, JSON and PROTOBUF_NATIVE; ``null`` for
        bytes, which declare none, as the official client's)."""
        if not self.data and self.type is SchemaType.BYTES:
            return "null"
        return self.data.decode("utf-8", errors="replace")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SchemaInfo):
            return NotImplemented
        return (self.type, self.data, self.properties, self.name) == (
            other.type,
            other.data,
            other.properties,
            other.name,
        )

    __hash__ = SchemaInfo.__hash__


def client_schema_info(info: SchemaInfo) -> ClientSchemaInfo:
    """``info`` with the official client's methods."""
    if isinstance(info, ClientSchemaInfo):
        return info
    return ClientSchemaInfo(info.type, info.data, dict(info.properties), info.name)


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
        self._schema_info = client_schema_info(info)

    def schema_info(self) -> ClientSchemaInfo:
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

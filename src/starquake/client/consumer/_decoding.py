"""How a consumer or reader decodes message values with its schema.

A message carries the version of the schema it was written with. When the reader's schema
needs the writer's to decode (Avro: fields added or removed between versions), the writer's
schema is fetched from the broker once per topic and version, then cached.
"""

from __future__ import annotations

import functools
from typing import Any

from starquake.client.base._config import declared_schema
from starquake.client.base._message import Message
from starquake.client.wire._pool import LookupService

__all__ = ["ValueDecoding"]


class ValueDecoding:
    """Sets each received message's value decoder for one consumer's or reader's schema."""

    def __init__(self, schema: Any, lookup: LookupService) -> None:
        self._lookup = lookup
        self._schema = schema
        self._decode = schema.decode if schema is not None and hasattr(schema, "decode") else None
        self._needs_writer = bool(getattr(schema, "needs_writer_schema", False))
        own = declared_schema(schema) if self._needs_writer else None
        self._own_data = own.data if own is not None else None

    def needs_fetch(self, msg: Message) -> bool:
        """Whether the writer's schema of ``msg`` must be fetched before :meth:`decorate`."""
        version = msg.schema_version_bytes()
        return (
            self._needs_writer
            and bool(version)
            and not self._lookup.has_cached_schema(msg.topic_name(), version)
        )

    async def fetch(self, msg: Message) -> None:
        """(Loop) Fetch and cache the writer's schema of ``msg``."""
        await self._lookup.get_schema(msg.topic_name(), msg.schema_version_bytes())

    async def prepare(self, msg: Message) -> Message:
        """(Loop) :meth:`decorate` ``msg``, fetching its writer's schema first if needed."""
        if self.needs_fetch(msg):
            await self.fetch(msg)
        return self.decorate(msg)

    def decorate(self, msg: Message) -> Message:
        """Give ``msg`` the decoder of its value; returns ``msg``."""
        if self._decode is None:
            return msg
        version = msg.schema_version_bytes()
        if self._needs_writer and version:
            writer = self._lookup.cached_schema(msg.topic_name(), version)
            if writer is not None and writer.data != self._own_data:
                msg.set_value_decoder(
                    functools.partial(self._schema.decode_with_writer, writer=writer)
                )
                return msg
        msg.set_value_decoder(self._decode)
        return msg

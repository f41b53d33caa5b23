"""What a topic's producers and consumers may do with schemas, as Pulsar's broker decides it.

- A producer with a schema gets that schema's version: an existing version with the same
  definition, or a new one when the namespace allows automatic updates
  (``isAllowAutoUpdateSchema``, broker default ``isAllowAutoUpdateSchemaEnabled``) and the schema
  passes the compatibility check of the namespace's strategy. A producer without a schema (bytes)
  gets no version, and is refused on a topic that has a schema when the namespace enforces schema
  validation (``schemaValidationEnforced``, broker default ``isSchemaValidationEnforced``).
- A schema definition (with its properties) may be at most ``maxMessageSize`` bytes: Pulsar
  carries one in a single frame, which it bounds so; the admin API's upload has the same bound.
- A consumer with a schema on an idle topic (no schema, no producers, no consumers with a
  schema-checked type, no stored data) registers its schema; otherwise it must be compatible
  with the topic's schemas as a reader. A consumer without a schema reads bytes and is not
  checked.

The registry's work (reading and writing the metadata store, parsing definitions) runs in a
worker thread.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from starquake.broker.contexts import PolicyContext
from starquake.broker.schemas.compatibility import IncompatibleSchemaError
from starquake.broker.schemas.registry import SchemaRegistry, schema_id
from starquake.broker.schemas.validation import InvalidSchemaError
from starquake.common.schema_info import SchemaInfo, encode_schema_version
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.topic_api import TopicApi

__all__ = [
    "SchemaContext",
    "add_producer_schema",
    "check_consumer_schema",
    "check_schema_size",
    "compatibility_strategy",
]

NO_SCHEMA = b""


class SchemaContext(PolicyContext, Protocol):
    """What the schema checks read of the broker: the namespace policies and broker settings
    that decide, and the schema registry."""

    @property
    def schemas(self) -> SchemaRegistry:
        """The schema registry."""


def compatibility_strategy(service: SchemaContext, namespace: str) -> str:
    """The namespace's strategy, or the broker's ``schemaCompatibilityStrategy``."""
    value = service.resources.namespace_view(namespace).schema_compatibility_strategy
    if not value or value == "UNDEFINED":
        return service.config.schemaCompatibilityStrategy
    return value


def allow_auto_update(service: SchemaContext, namespace: str) -> bool:
    """Whether producers may register new schema versions in the namespace."""
    value = service.resources.namespace_view(namespace).is_allow_auto_update_schema
    return service.config.isAllowAutoUpdateSchemaEnabled if value is None else value


def validation_enforced(service: SchemaContext, namespace: str) -> bool:
    """Whether producers without a schema are refused on topics that have one."""
    value = service.resources.namespace_view(namespace).schema_validation_enforced
    return service.config.isSchemaValidationEnforced if value is None else value


def check_schema_size(service: SchemaContext, info: SchemaInfo) -> None:
    """Raise InvalidSchemaError when ``info`` is over ``maxMessageSize`` bytes."""
    limit = service.config.maxMessageSize
    size = len(info.data) + sum(len(k) + len(v) for k, v in info.properties.items())
    if size > limit:
        raise InvalidSchemaError(
            f"Schema of {size} bytes is over the limit of {limit} bytes (maxMessageSize)"
        )


async def add_producer_schema(
    service: SchemaContext, topic: TopicName, info: SchemaInfo | None
) -> bytes:
    """The schema version for a producer (empty bytes for a producer without a schema).

    Raises a BrokerServiceError (IncompatibleSchema) when the producer is not allowed.
    """
    registry = service.schemas
    sid = schema_id(topic)
    namespace = topic.namespace_name
    if info is None:
        if validation_enforced(service, namespace) and await asyncio.to_thread(
            registry.has_schema, sid
        ):
            raise IncompatibleSchemaError(
                "Producers cannot connect or send message without a schema to topics with a "
                "schema if SchemaValidationEnforced is enabled"
            )
        return NO_SCHEMA
    check_schema_size(service, info)
    version = await asyncio.to_thread(
        registry.add_schema,
        sid,
        info,
        compatibility_strategy(service, namespace),
        allow_new=allow_auto_update(service, namespace),
    )
    return encode_schema_version(version)


def _is_idle(topic: TopicApi) -> bool:
    if topic.producers:
        return False
    if any(sub.consumers for sub in topic.subscriptions.values()):
        return False
    ledger = getattr(topic, "ledger", None)
    return ledger is None or int(ledger.total_size) == 0


async def check_consumer_schema(
    service: SchemaContext, topic: TopicApi, name: TopicName, info: SchemaInfo | None
) -> None:
    """Raise a BrokerServiceError (IncompatibleSchema) unless a consumer with ``info`` may
    attach; on an idle topic without a schema, ``info`` becomes its first version."""
    if info is None:
        return
    check_schema_size(service, info)
    namespace = name.namespace_name
    await asyncio.to_thread(
        service.schemas.admit_consumer,
        schema_id(name),
        info,
        compatibility_strategy(service, namespace),
        idle=_is_idle(topic),
        allow_new=allow_auto_update(service, namespace),
    )

"""Topic requests of a connection: lookups, partition counts, topic lists and schemas."""

from __future__ import annotations

import asyncio
import logging

from starquake.broker import topic_listing
from starquake.broker.cnx_base import CommandContext
from starquake.broker.errors import BrokerServiceError, MetadataError, TopicNotFoundError
from starquake.broker.schemas.registry import StoredSchema, schema_id
from starquake.broker.schemas.topic_schemas import add_producer_schema
from starquake.broker.system_topics import hide_system_topics
from starquake.cluster.registry import BrokerInfo
from starquake.common.schema_info import decode_schema_version, encode_schema_version
from starquake.protocol import commands
from starquake.protocol.checksum import crc32c
from starquake.protocol.enums import TopicListMode
from starquake.protocol.schema import fill_schema, schema_info_of
from starquake.protocol.wire import pb

log = logging.getLogger(__name__)

T = pb.BaseCommand


class TopicCommands:
    """Handles PARTITIONED_METADATA, LOOKUP, GET_TOPICS_OF_NAMESPACE and the schema requests."""

    def __init__(self, cnx: CommandContext) -> None:
        self._cnx = cnx
        self._service = cnx.service

    def on_partitioned_metadata(self, command: T, _: bytes | None) -> None:
        """PARTITIONED_METADATA: the partition count (creating a partitioned topic if due)."""
        request = command.partition_metadata
        try:
            topic = self._service.parse_topic(request.topic)
            authorization = self._service.authorization
            authorization.check_lookup(self._cnx.auth_role, topic, "Get Partition Metadata")
            partitions = self._service.partitioned_metadata(topic)
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return

        def answer(count: int) -> None:
            self._cnx.write(commands.partitioned_metadata_response(request.request_id, count))

        if partitions == 0 and self._service.wants_auto_partitioned(topic):
            self._cnx.await_then(
                request,
                self._service.create_auto_partitioned(topic),
                answer,
                f"creating the partitioned topic {topic}",
            )
            return
        answer(partitions)

    def on_lookup(self, command: T, _: bytes | None) -> None:
        """LOOKUP: the URLs of the broker that serves the topic: Connect when it is this one
        (at once when standalone), else Redirect to its owner (authoritative, as Pulsar)."""
        request = command.lookup_topic
        try:
            topic = self._service.parse_topic(request.topic)
            self._service.authorization.check_lookup(self._cnx.auth_role, topic)
            urls = self._service.check_lookup_urls(topic, request.advertised_listener_name)
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return

        def answer(owner: BrokerInfo | None) -> None:
            if owner is None:
                url, tls = urls.broker_url, urls.broker_url_tls
            else:
                url, tls = owner.broker_url, owner.broker_url_tls
            self._cnx.write(
                commands.lookup_response(
                    request.request_id,
                    url,
                    broker_service_url_tls=tls,
                    redirect=owner is not None,
                )
            )

        placement = self._service.placement
        if placement.membership is None:
            answer(None)
            return
        self._cnx.await_then(
            request,
            placement.owner(topic, request.authoritative),
            answer,
            f"looking up {topic}",
        )

    def on_get_topics_of_namespace(self, command: T, _: bytes | None) -> None:
        """GET_TOPICS_OF_NAMESPACE: the namespace's topics, without system topics."""
        request = command.get_topics_of_namespace
        namespace = request.namespace
        refusal = self._service.authorization.get_topics_refusal(self._cnx.auth_role, namespace)
        if refusal is not None:
            self._cnx.fail(request, refusal)
            return
        if not self._service.resources.namespace_exists(namespace):
            self._cnx.fail(request, MetadataError(f"Namespace {namespace} does not exist"))
            return
        mode = int(request.mode)
        pattern = request.topics_pattern if request.HasField("topics_pattern") else None

        def matching(topics: list[str]) -> tuple[list[str], bool]:
            if pattern is None:
                return topics, False
            try:
                return topic_listing.filter_topics(topics, pattern), True
            except Exception:
                return topics, False

        async def gather() -> tuple[list[str], bool]:
            topics: list[str] = []
            if mode != TopicListMode.NON_PERSISTENT:
                topics += await self._service.list_topics(namespace)
            if mode != TopicListMode.PERSISTENT:
                topics += await self._service.list_topics(namespace, persistent=False)
            topics = hide_system_topics(topics)  # as Pulsar: clients never see system topics
            return await asyncio.to_thread(matching, topics)  # a regex over every name

        def answer(found: tuple[list[str], bool]) -> None:
            topics, filtered = found
            self._cnx.write(
                commands.get_topics_of_namespace_response(
                    request.request_id, topics, filtered=filtered, topics_hash=topics_hash(topics)
                )
            )

        self._cnx.await_then(request, gather(), answer, f"GET_TOPICS_OF_NAMESPACE of {namespace}")

    def on_get_schema(self, command: T, _: bytes | None) -> None:
        """GET_SCHEMA: the topic's schema of the given version (default: the latest)."""
        request = command.get_schema
        version = (
            decode_schema_version(request.schema_version)
            if request.HasField("schema_version")
            else None
        )

        async def find() -> StoredSchema:
            sid = schema_id(self._service.parse_topic(request.topic))
            stored = await asyncio.to_thread(self._service.schemas.get, sid, version)
            if stored is None:
                raise TopicNotFoundError("Topic not found or no-schema")
            return stored

        def answer(stored: StoredSchema) -> None:
            schema = pb.Schema()
            fill_schema(schema, stored.info)
            version_bytes = encode_schema_version(stored.version)
            self._cnx.write(commands.get_schema_response(request.request_id, schema, version_bytes))

        self._cnx.await_then(request, find(), answer, f"GET_SCHEMA of {request.topic}")

    def on_get_or_create_schema(self, command: T, _: bytes | None) -> None:
        """GET_OR_CREATE_SCHEMA: register the schema (if compatible) and return its version.
        As for a producer: the topic must exist (TopicNotFound) and the role may produce."""
        request = command.get_or_create_schema
        service = self._service

        async def register() -> bytes:
            name = service.parse_topic(request.topic)
            service.check_namespace(name)  # TopicNotFound, also with authorization off
            service.authorization.check_produce(self._cnx.auth_role, name, "")
            await service.get_topic(name, create=False)
            return await add_producer_schema(service, name, schema_info_of(request.schema))

        self._cnx.await_then(
            request,
            register(),
            lambda version: self._cnx.write(
                commands.get_or_create_schema_response(request.request_id, version)
            ),
            f"GET_OR_CREATE_SCHEMA of {request.topic}",
        )


def topics_hash(topics: list[str]) -> str:
    """Pulsar's TopicList hash: CRC32C of the sorted names joined by ',', little-endian hex."""
    value = crc32c(",".join(sorted(topics)).encode())
    return value.to_bytes(4, "little").hex()

"""Builders of the commands a client sends, as ``BaseCommand`` objects (not yet framed).

PING, PONG, CLOSE_PRODUCER and CLOSE_CONSUMER are sent by brokers too: the broker frames the
same builders (see :mod:`starquake.protocol.commands`), so each command is built in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from starquake.common.schema_info import SchemaInfo
from starquake.protocol.schema import fill_schema
from starquake.protocol.wire import pb

T = pb.BaseCommand

MAX_PROTOCOL_VERSION = 20
"""Highest protocol version this implementation speaks."""


def connect(
    client_version: str,
    protocol_version: int = MAX_PROTOCOL_VERSION,
    *,
    feature_flags: bool = True,
) -> T:
    """CONNECT without credentials; ``feature_flags`` announces auth refresh and broker entry
    metadata support (a bare CONNECT, as from an old client, leaves them out)."""
    cmd = T(type=T.CONNECT)
    c = cmd.connect
    c.client_version = client_version
    c.auth_method_name = "none"
    c.protocol_version = protocol_version
    if feature_flags:
        c.feature_flags.supports_auth_refresh = True
        c.feature_flags.supports_broker_entry_metadata = True
    return cmd


def ping() -> T:
    """PING (keep-alive probe; either side sends it)."""
    cmd = T(type=T.PING)
    cmd.ping.SetInParent()
    return cmd


def pong() -> T:
    """PONG (the answer to a PING)."""
    cmd = T(type=T.PONG)
    cmd.pong.SetInParent()
    return cmd


def partitioned_metadata(topic: str, request_id: int) -> T:
    """PARTITIONED_METADATA: ask how many partitions ``topic`` has."""
    cmd = T(type=T.PARTITIONED_METADATA)
    cmd.partition_metadata.topic = topic
    cmd.partition_metadata.request_id = request_id
    return cmd


def lookup(topic: str, request_id: int, authoritative: bool, listener_name: str = "") -> T:
    """LOOKUP: ask which broker serves ``topic`` (for ``listener_name``, if given)."""
    cmd = T(type=T.LOOKUP)
    r = cmd.lookup_topic
    r.topic = topic
    r.request_id = request_id
    r.authoritative = authoritative
    r.advertised_listener_name = listener_name
    return cmd


def _key_values(target: object, values: Mapping[str, str]) -> None:
    for key, value in values.items():
        target.add(key=key, value=value)  # type: ignore[attr-defined]


def producer(
    topic: str,
    producer_id: int,
    request_id: int,
    *,
    producer_name: str | None,
    user_provided_name: bool,
    epoch: int,
    access_mode: int,
    metadata: Mapping[str, str],
    topic_epoch: int | None = None,
    initial_subscription_name: str | None = None,
    schema: SchemaInfo | None = None,
) -> T:
    """PRODUCER: create a producer on ``topic`` (``access_mode``: a ProducerAccessMode)."""
    cmd = T(type=T.PRODUCER)
    p = cmd.producer
    p.topic = topic
    p.producer_id = producer_id
    p.request_id = request_id
    if producer_name:
        p.producer_name = producer_name
    p.user_provided_producer_name = user_provided_name
    p.epoch = epoch
    p.encrypted = False
    p.producer_access_mode = access_mode  # type: ignore[assignment]
    if topic_epoch is not None:
        p.topic_epoch = topic_epoch
    if initial_subscription_name:
        p.initial_subscription_name = initial_subscription_name
    if schema is not None and schema.type.wire:
        fill_schema(p.schema, schema)
    _key_values(p.metadata, metadata)
    return cmd


def send(
    producer_id: int,
    sequence_id: int,
    num_messages: int,
    highest_sequence_id: int,
    *,
    is_chunk: bool = False,
    declare_highest: bool = False,
) -> T:
    """SEND (without its entry); ``highest_sequence_id`` is sent only when above ``sequence_id``
    or with ``declare_highest`` (a broker counts a batch without it as ``sequence_id`` alone,
    as Pulsar's does)."""
    cmd = T(type=T.SEND)
    s = cmd.send
    s.producer_id = producer_id
    s.sequence_id = sequence_id
    s.num_messages = num_messages
    if highest_sequence_id > sequence_id or declare_highest:
        s.highest_sequence_id = highest_sequence_id
    if is_chunk:
        s.is_chunk = True
    return cmd


def close_producer(producer_id: int, request_id: int) -> T:
    """CLOSE_PRODUCER (a broker sends it with request id 0 to close a producer itself)."""
    cmd = T(type=T.CLOSE_PRODUCER)
    cmd.close_producer.producer_id = producer_id
    cmd.close_producer.request_id = request_id
    return cmd


def subscribe(
    topic: str,
    subscription: str,
    sub_type: int,
    consumer_id: int,
    request_id: int,
    *,
    consumer_name: str,
    durable: bool,
    initial_position: int,
    read_compacted: bool,
    metadata: Mapping[str, str],
    start_message_id: pb.MessageIdData | None = None,
    key_shared_meta: pb.KeySharedMeta | None = None,
    replicate_subscription_state: bool = False,
    schema: SchemaInfo | None = None,
) -> T:
    """SUBSCRIBE a consumer (``sub_type``/``initial_position``: SubType/InitialPosition)."""
    cmd = T(type=T.SUBSCRIBE)
    s = cmd.subscribe
    s.topic = topic
    s.subscription = subscription
    s.subType = sub_type  # type: ignore[assignment]
    s.consumer_id = consumer_id
    s.request_id = request_id
    s.consumer_name = consumer_name
    s.priority_level = 0
    s.durable = durable
    s.read_compacted = read_compacted
    s.initialPosition = initial_position  # type: ignore[assignment]
    s.replicate_subscription_state = replicate_subscription_state
    if start_message_id is not None:
        s.start_message_id.CopyFrom(start_message_id)
    if key_shared_meta is not None:
        s.keySharedMeta.CopyFrom(key_shared_meta)
    if schema is not None and schema.type.wire:
        fill_schema(s.schema, schema)
    _key_values(s.metadata, metadata)
    return cmd


def flow(consumer_id: int, permits: int) -> T:
    """FLOW: grant ``permits`` more messages to a consumer."""
    cmd = T(type=T.FLOW)
    cmd.flow.consumer_id = consumer_id
    cmd.flow.messagePermits = permits
    return cmd


def ack(consumer_id: int, ack_type: int, message_ids: Iterable[pb.MessageIdData]) -> T:
    """ACK of ``message_ids`` (``ack_type``: an :class:`~starquake.protocol.enums.AckType`)."""
    cmd = T(type=T.ACK)
    a = cmd.ack
    a.consumer_id = consumer_id
    a.ack_type = ack_type  # type: ignore[assignment]
    a.message_id.extend(message_ids)
    return cmd


def redeliver(consumer_id: int, message_ids: Iterable[pb.MessageIdData] = ()) -> T:
    """REDELIVER_UNACKNOWLEDGED_MESSAGES: of ``message_ids``, or of all when empty."""
    cmd = T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
    r = cmd.redeliver_unacknowledged_messages
    r.consumer_id = consumer_id
    r.message_ids.extend(message_ids)
    return cmd


def close_consumer(consumer_id: int, request_id: int) -> T:
    """CLOSE_CONSUMER (a broker sends it with request id 0 to close a consumer itself)."""
    cmd = T(type=T.CLOSE_CONSUMER)
    cmd.close_consumer.consumer_id = consumer_id
    cmd.close_consumer.request_id = request_id
    return cmd


def unsubscribe(consumer_id: int, request_id: int) -> T:
    """UNSUBSCRIBE the consumer's subscription."""
    cmd = T(type=T.UNSUBSCRIBE)
    cmd.unsubscribe.consumer_id = consumer_id
    cmd.unsubscribe.request_id = request_id
    return cmd


def seek(
    consumer_id: int,
    request_id: int,
    message_id: pb.MessageIdData | None = None,
    publish_time: int | None = None,
) -> T:
    """SEEK the consumer's subscription to a message id or a publish time."""
    cmd = T(type=T.SEEK)
    s = cmd.seek
    s.consumer_id = consumer_id
    s.request_id = request_id
    if message_id is not None:
        s.message_id.CopyFrom(message_id)
    if publish_time is not None:
        s.message_publish_time = publish_time
    return cmd


def get_last_message_id(consumer_id: int, request_id: int) -> T:
    """GET_LAST_MESSAGE_ID of the consumer's topic."""
    cmd = T(type=T.GET_LAST_MESSAGE_ID)
    cmd.get_last_message_id.consumer_id = consumer_id
    cmd.get_last_message_id.request_id = request_id
    return cmd


def get_topics_of_namespace(namespace: str, request_id: int, mode: int) -> T:
    """GET_TOPICS_OF_NAMESPACE (``mode``: a :class:`~starquake.protocol.enums.TopicListMode`)."""
    cmd = T(type=T.GET_TOPICS_OF_NAMESPACE)
    g = cmd.get_topics_of_namespace
    g.namespace = namespace
    g.request_id = request_id
    g.mode = mode  # type: ignore[assignment]
    return cmd


def get_schema(topic: str, request_id: int, schema_version: bytes | None) -> T:
    """GET_SCHEMA of ``topic``: the given version, or the latest when None or empty."""
    cmd = T(type=T.GET_SCHEMA)
    g = cmd.get_schema
    g.request_id = request_id
    g.topic = topic
    if schema_version:
        g.schema_version = schema_version
    return cmd

"""Pure functions that build command frames.

Most builders fill a ``BaseCommand`` and serialize it. The two commands sent once per entry on the
hot path, MESSAGE and SEND_RECEIPT, are encoded by hand (a few varints) because protobuf object
construction would dominate their cost; tests check they match protobuf's encoding byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import encode_command, payload_frame_header
from starquake.protocol.varint import SMALL_VARINTS, varint

T = pb.BaseCommand
_U64_MASK = (1 << 64) - 1

# Highest protocol version this implementation speaks.
MAX_PROTOCOL_VERSION = 20


_FRAME_HEAD = struct.Struct(">II")


def _len_field(tag: int, body: bytes) -> bytes:
    return SMALL_VARINTS[tag] + varint(len(body)) + body


def encode_message_id(
    ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1
) -> bytes:
    """Serialized MessageIdData (fields 1, 2 and, when set, 3 and 4)."""
    body = b"\x08" + varint(ledger_id) + b"\x10" + varint(entry_id)
    if partition >= 0:
        body += b"\x18" + varint(partition)
    if batch_index >= 0:
        body += b"\x20" + varint(batch_index)
    return body


def message_command_body(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    redelivery_count: int = 0,
    partition: int = -1,
    ack_set: Sequence[int] = (),
    consumer_epoch: int | None = None,
) -> bytes:
    """Serialized BaseCommand{MESSAGE} (without the frame header)."""
    mid = encode_message_id(ledger_id, entry_id, partition)
    inner = b"\x08" + varint(consumer_id) + b"\x12" + varint(len(mid)) + mid
    if redelivery_count:
        inner += b"\x18" + varint(redelivery_count)
    for word in ack_set:
        inner += b"\x20" + varint(word)
    if consumer_epoch is not None:
        inner += b"\x28" + varint(consumer_epoch)
    return b"\x08\x09\x4a" + varint(len(inner)) + inner


def message_frame_header(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    entry_size: int,
    redelivery_count: int = 0,
    partition: int = -1,
    ack_set: Sequence[int] = (),
    consumer_epoch: int | None = None,
) -> bytes:
    """Frame header and MESSAGE command to put before a stored entry of ``entry_size`` bytes."""
    body = message_command_body(
        consumer_id, ledger_id, entry_id, redelivery_count, partition, ack_set, consumer_epoch
    )
    size = len(body)
    return _FRAME_HEAD.pack(size + 4 + entry_size, size) + body


def send_receipt(
    producer_id: int,
    sequence_id: int,
    ledger_id: int,
    entry_id: int,
    highest_sequence_id: int = 0,
    partition: int = -1,
) -> bytes:
    """SEND_RECEIPT frame."""
    mid = encode_message_id(ledger_id, entry_id, partition)
    inner = b"".join(
        (
            b"\x08",
            varint(producer_id),
            b"\x10",
            varint(sequence_id),
            b"\x1a",
            varint(len(mid)),
            mid,
            b"\x20",
            varint(highest_sequence_id),
        )
    )
    body = b"\x08\x07\x3a" + varint(len(inner)) + inner
    size = len(body)
    return _FRAME_HEAD.pack(size + 4, size) + body


def message_id_data(
    ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1
) -> pb.MessageIdData:
    """A MessageIdData protobuf; ids given as -1 are sent as 2**64-1, as Java does."""
    mid = pb.MessageIdData(ledgerId=ledger_id & _U64_MASK, entryId=entry_id & _U64_MASK)
    if partition >= 0:
        mid.partition = partition
    if batch_index >= 0:
        mid.batch_index = batch_index
    return mid


# --- broker -> client ---------------------------------------------------------------------------


def connected(server_version: str, protocol_version: int, max_message_size: int) -> bytes:
    cmd = T(type=T.CONNECTED)
    c = cmd.connected
    c.server_version = server_version
    c.protocol_version = protocol_version
    c.max_message_size = max_message_size
    return encode_command(cmd)


def ping() -> bytes:
    cmd = T(type=T.PING)
    cmd.ping.SetInParent()
    return encode_command(cmd)


def pong() -> bytes:
    cmd = T(type=T.PONG)
    cmd.pong.SetInParent()
    return encode_command(cmd)


def success(request_id: int) -> bytes:
    cmd = T(type=T.SUCCESS)
    cmd.success.request_id = request_id
    return encode_command(cmd)


def error(request_id: int, code: ServerError, message: str) -> bytes:
    cmd = T(type=T.ERROR)
    e = cmd.error
    e.request_id = request_id
    e.error = int(code)  # type: ignore[assignment]
    e.message = message
    return encode_command(cmd)


def producer_success(
    request_id: int,
    producer_name: str,
    last_sequence_id: int = -1,
    *,
    topic_epoch: int | None = None,
    producer_ready: bool = True,
    schema_version: bytes = b"",
) -> bytes:
    cmd = T(type=T.PRODUCER_SUCCESS)
    p = cmd.producer_success
    p.request_id = request_id
    p.producer_name = producer_name
    p.last_sequence_id = last_sequence_id
    if schema_version:
        p.schema_version = schema_version
    if topic_epoch is not None:
        p.topic_epoch = topic_epoch
    p.producer_ready = producer_ready
    return encode_command(cmd)


def send_error(producer_id: int, sequence_id: int, code: ServerError, message: str) -> bytes:
    cmd = T(type=T.SEND_ERROR)
    e = cmd.send_error
    e.producer_id = producer_id
    e.sequence_id = sequence_id
    e.error = int(code)  # type: ignore[assignment]
    e.message = message
    return encode_command(cmd)


def partitioned_metadata_response(
    request_id: int,
    partitions: int = 0,
    error_code: ServerError | None = None,
    message: str = "",
) -> bytes:
    cmd = T(type=T.PARTITIONED_METADATA_RESPONSE)
    r = cmd.partition_metadata_response
    r.request_id = request_id
    if error_code is None:
        r.partitions = partitions
        r.response = pb.CommandPartitionedTopicMetadataResponse.Success
    else:
        r.response = pb.CommandPartitionedTopicMetadataResponse.Failed
        r.error = int(error_code)  # type: ignore[assignment]
        r.message = message
    return encode_command(cmd)


def lookup_response(
    request_id: int,
    broker_service_url: str = "",
    *,
    broker_service_url_tls: str = "",
    authoritative: bool = True,
    error_code: ServerError | None = None,
    message: str = "",
) -> bytes:
    """A LOOKUP_RESPONSE: Connect to the broker at ``broker_service_url`` (plaintext) and/or
    ``broker_service_url_tls`` (each left out when empty), or Failed with ``error_code``."""
    cmd = T(type=T.LOOKUP_RESPONSE)
    r = cmd.lookup_topic_response
    r.request_id = request_id
    if error_code is None:
        r.response = pb.CommandLookupTopicResponse.Connect
        if broker_service_url:
            r.brokerServiceUrl = broker_service_url
        if broker_service_url_tls:
            r.brokerServiceUrlTls = broker_service_url_tls
        r.authoritative = authoritative
    else:
        r.response = pb.CommandLookupTopicResponse.Failed
        r.error = int(error_code)  # type: ignore[assignment]
        r.message = message
    return encode_command(cmd)


def active_consumer_change(consumer_id: int, is_active: bool) -> bytes:
    cmd = T(type=T.ACTIVE_CONSUMER_CHANGE)
    a = cmd.active_consumer_change
    a.consumer_id = consumer_id
    a.is_active = is_active
    return encode_command(cmd)


def reached_end_of_topic(consumer_id: int) -> bytes:
    cmd = T(type=T.REACHED_END_OF_TOPIC)
    cmd.reached_end_of_topic.consumer_id = consumer_id
    return encode_command(cmd)


def close_producer(producer_id: int, request_id: int) -> bytes:
    cmd = T(type=T.CLOSE_PRODUCER)
    c = cmd.close_producer
    c.producer_id = producer_id
    c.request_id = request_id
    return encode_command(cmd)


def close_consumer(consumer_id: int, request_id: int) -> bytes:
    cmd = T(type=T.CLOSE_CONSUMER)
    c = cmd.close_consumer
    c.consumer_id = consumer_id
    c.request_id = request_id
    return encode_command(cmd)


def ack_response(
    consumer_id: int, request_id: int, error_code: ServerError | None = None, message: str = ""
) -> bytes:
    cmd = T(type=T.ACK_RESPONSE)
    r = cmd.ack_response
    r.consumer_id = consumer_id
    r.request_id = request_id
    if error_code is not None:
        r.error = int(error_code)  # type: ignore[assignment]
        r.message = message
    return encode_command(cmd)


def get_last_message_id_response(
    request_id: int,
    last: pb.MessageIdData,
    mark_delete: pb.MessageIdData | None = None,
) -> bytes:
    cmd = T(type=T.GET_LAST_MESSAGE_ID_RESPONSE)
    r = cmd.get_last_message_id_response
    r.request_id = request_id
    r.last_message_id.CopyFrom(last)
    if mark_delete is not None:
        r.consumer_mark_delete_position.CopyFrom(mark_delete)
    return encode_command(cmd)


def get_topics_of_namespace_response(
    request_id: int,
    topics: Iterable[str],
    *,
    filtered: bool = False,
    topics_hash: str | None = None,
    changed: bool = True,
) -> bytes:
    cmd = T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    r = cmd.get_topics_of_namespace_response
    r.request_id = request_id
    r.topics.extend(topics)
    r.filtered = filtered
    if topics_hash is not None:
        r.topics_hash = topics_hash
    r.changed = changed
    return encode_command(cmd)


def consumer_stats_response(request_id: int, **fields: object) -> bytes:
    cmd = T(type=T.CONSUMER_STATS_RESPONSE)
    r = cmd.consumer_stats_response
    r.request_id = request_id
    for name, value in fields.items():
        setattr(r, name, value)
    return encode_command(cmd)


def consumer_stats_error(request_id: int, code: ServerError, message: str) -> bytes:
    cmd = T(type=T.CONSUMER_STATS_RESPONSE)
    r = cmd.consumer_stats_response
    r.request_id = request_id
    r.error_code = int(code)  # type: ignore[assignment]
    r.error_message = message
    return encode_command(cmd)


def get_schema_response_error(request_id: int, code: ServerError, message: str) -> bytes:
    cmd = T(type=T.GET_SCHEMA_RESPONSE)
    r = cmd.get_schema_response
    r.request_id = request_id
    r.error_code = int(code)  # type: ignore[assignment]
    r.error_message = message
    return encode_command(cmd)


def get_schema_response(request_id: int, schema: pb.Schema, schema_version: bytes) -> bytes:
    cmd = T(type=T.GET_SCHEMA_RESPONSE)
    r = cmd.get_schema_response
    r.request_id = request_id
    r.schema.CopyFrom(schema)
    r.schema_version = schema_version
    return encode_command(cmd)


def get_or_create_schema_error(request_id: int, code: ServerError, message: str) -> bytes:
    cmd = T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
    r = cmd.get_or_create_schema_response
    r.request_id = request_id
    r.error_code = int(code)  # type: ignore[assignment]
    r.error_message = message
    return encode_command(cmd)


def get_or_create_schema_response(request_id: int, schema_version: bytes) -> bytes:
    cmd = T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
    r = cmd.get_or_create_schema_response
    r.request_id = request_id
    r.schema_version = schema_version
    return encode_command(cmd)


# --- client -> broker ---------------------------------------------------------------------------


def connect(client_version: str, protocol_version: int = MAX_PROTOCOL_VERSION) -> bytes:
    cmd = T(type=T.CONNECT)
    c = cmd.connect
    c.client_version = client_version
    c.auth_method_name = "none"
    c.protocol_version = protocol_version
    return encode_command(cmd)


def send_frame_header(
    producer_id: int,
    sequence_id: int,
    entry_size: int,
    num_messages: int = 1,
    *,
    highest_sequence_id: int | None = None,
    is_chunk: bool = False,
) -> bytes:
    """Frame header + SEND command to write in front of an entry."""
    cmd = T(type=T.SEND)
    s = cmd.send
    s.producer_id = producer_id
    s.sequence_id = sequence_id
    s.num_messages = num_messages
    if highest_sequence_id is not None:
        s.highest_sequence_id = highest_sequence_id
    if is_chunk:
        s.is_chunk = True
    return payload_frame_header(cmd.SerializeToString(), entry_size)

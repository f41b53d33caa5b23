"""Pure functions that build command frames (ready to write) for what a broker sends.

Commands a client sends are built by :mod:`starquake.protocol.client_commands`; the ones both
sides send (PING, PONG, CLOSE_PRODUCER, CLOSE_CONSUMER) are framed here from those same builders.

Most builders fill a ``BaseCommand`` and serialize it. The two commands sent once per entry on the
hot path, MESSAGE and SEND_RECEIPT, are encoded by hand (a few varints) because protobuf object
construction would dominate their cost; tests check they match protobuf's encoding byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Final

from starquake.protocol import client_commands
from starquake.protocol.client_commands import MAX_PROTOCOL_VERSION
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import encode_command, payload_frame_header
from starquake.protocol.varint import varint
from starquake.protocol.wire import pb

__all__ = ["MAX_PROTOCOL_VERSION"]  # re-exported: clients import it from here

T = pb.BaseCommand
_U64_MASK = (1 << 64) - 1

_FRAME_HEAD = struct.Struct(">II")


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
    parts: list[bytes] = []
    add_send_receipt(
        parts,
        receipt_producer_head(producer_id),
        sequence_id,
        ledger_id,
        entry_id,
        highest_sequence_id,
        receipt_partition_tail(partition),
    )
    return b"".join(parts)


# SEND_RECEIPT pieces. Its every length fits a one-byte varint: the inner command is at most
# 12 (producer id) + 10 (sequence id) + 2 + 28 (message id with partition) + 11 (highest) bytes.
_SMALL_FRAME_HEADS: Final = [_FRAME_HEAD.pack(size + 4, size) for size in range(128)]
_RECEIPT_BODY_HEADS: Final = [b"\x08\x07\x3a" + bytes((size,)) for size in range(128)]
"""BaseCommand{type: SEND_RECEIPT, send_receipt: <size> ...}."""
_RECEIPT_ID_HEADS: Final = [b"\x1a" + bytes((size,)) + b"\x08" for size in range(128)]
"""message_id: <size> {ledgerId: ...}."""
_NO_HIGHEST: Final = b"\x20" + varint(-1)


def receipt_producer_head(producer_id: int) -> bytes:
    """The start of every SEND_RECEIPT of a producer: its id and the sequence id's tag."""
    return b"\x08" + varint(producer_id) + b"\x10"


def receipt_partition_tail(partition: int) -> bytes:
    """The message id's partition field of a topic's receipts (nothing for -1)."""
    return b"\x18" + varint(partition) if partition >= 0 else b""


def add_send_receipt(
    parts: list[bytes],
    producer_head: bytes,
    sequence_id: int,
    ledger_id: int,
    entry_id: int,
    highest_sequence_id: int,
    partition_tail: bytes,
) -> None:
    """Append the pieces of one SEND_RECEIPT frame to ``parts`` (joined once for many
    receipts: no bytes object is made per receipt beyond its large varints)."""
    sequence = varint(sequence_id)
    ledger = varint(ledger_id)
    entry = varint(entry_id)
    highest = _NO_HIGHEST if highest_sequence_id == -1 else b"\x20" + varint(highest_sequence_id)
    id_size = 2 + len(ledger) + len(entry) + len(partition_tail)
    inner_size = len(producer_head) + len(sequence) + 2 + id_size + len(highest)
    parts += (
        _SMALL_FRAME_HEADS[inner_size + 4],
        _RECEIPT_BODY_HEADS[inner_size],
        producer_head,
        sequence,
        _RECEIPT_ID_HEADS[id_size],
        ledger,
        b"\x10",
        entry,
        partition_tail,
        highest,
    )


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
    """CONNECTED frame: the answer to a successful CONNECT."""
    cmd = T(type=T.CONNECTED)
    c = cmd.connected
    c.server_version = server_version
    c.protocol_version = protocol_version
    c.max_message_size = max_message_size
    return encode_command(cmd)


def ping() -> bytes:
    """PING frame (keep-alive probe)."""
    return encode_command(client_commands.ping())


def pong() -> bytes:
    """PONG frame (the answer to a PING)."""
    return encode_command(client_commands.pong())


def success(request_id: int) -> bytes:
    """SUCCESS frame answering ``request_id``."""
    cmd = T(type=T.SUCCESS)
    cmd.success.request_id = request_id
    return encode_command(cmd)


def error(request_id: int, code: ServerError, message: str) -> bytes:
    """ERROR frame answering ``request_id`` with ``code``."""
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
    """PRODUCER_SUCCESS frame (``producer_ready=False``: a WaitForExclusive producer waits)."""
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
    """SEND_ERROR frame: the send ``sequence_id`` of ``producer_id`` failed with ``code``."""
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
    """PARTITIONED_METADATA_RESPONSE frame: the partition count, or Failed with ``error_code``."""
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
    redirect: bool = False,
    error_code: ServerError | None = None,
    message: str = "",
) -> bytes:
    """A LOOKUP_RESPONSE: Connect to (or, ``redirect``, look the topic up again at) the broker
    at ``broker_service_url`` (plaintext) and/or ``broker_service_url_tls`` (each left out when
    empty), or Failed with ``error_code``."""
    cmd = T(type=T.LOOKUP_RESPONSE)
    r = cmd.lookup_topic_response
    r.request_id = request_id
    if error_code is None:
        kind = pb.CommandLookupTopicResponse
        r.response = kind.Redirect if redirect else kind.Connect
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
    """ACTIVE_CONSUMER_CHANGE frame: the consumer became (or stopped being) the active one."""
    cmd = T(type=T.ACTIVE_CONSUMER_CHANGE)
    a = cmd.active_consumer_change
    a.consumer_id = consumer_id
    a.is_active = is_active
    return encode_command(cmd)


def reached_end_of_topic(consumer_id: int) -> bytes:
    """REACHED_END_OF_TOPIC frame: the topic is terminated and the consumer read all of it."""
    cmd = T(type=T.REACHED_END_OF_TOPIC)
    cmd.reached_end_of_topic.consumer_id = consumer_id
    return encode_command(cmd)


def close_producer(producer_id: int, request_id: int) -> bytes:
    """CLOSE_PRODUCER frame (request id 0 when the broker closes the producer itself)."""
    return encode_command(client_commands.close_producer(producer_id, request_id))


def close_consumer(consumer_id: int, request_id: int) -> bytes:
    """CLOSE_CONSUMER frame (request id 0 when the broker closes the consumer itself)."""
    return encode_command(client_commands.close_consumer(consumer_id, request_id))


def ack_response(
    consumer_id: int, request_id: int, error_code: ServerError | None = None, message: str = ""
) -> bytes:
    """ACK_RESPONSE frame: success, or ``error_code`` when given."""
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
    """GET_LAST_MESSAGE_ID_RESPONSE frame (with the subscription's mark-delete position)."""
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
    """GET_TOPICS_OF_NAMESPACE_RESPONSE frame listing ``topics``."""
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
    """CONSUMER_STATS_RESPONSE frame with the given fields set."""
    cmd = T(type=T.CONSUMER_STATS_RESPONSE)
    r = cmd.consumer_stats_response
    r.request_id = request_id
    for name, value in fields.items():
        setattr(r, name, value)
    return encode_command(cmd)


def consumer_stats_error(request_id: int, code: ServerError, message: str) -> bytes:
    """CONSUMER_STATS_RESPONSE frame carrying an error."""
    cmd = T(type=T.CONSUMER_STATS_RESPONSE)
    r = cmd.consumer_stats_response
    r.request_id = request_id
    r.error_code = int(code)  # type: ignore[assignment]
    r.error_message = message
    return encode_command(cmd)


def get_schema_response_error(request_id: int, code: ServerError, message: str) -> bytes:
    """GET_SCHEMA_RESPONSE frame carrying an error."""
    cmd = T(type=T.GET_SCHEMA_RESPONSE)
    r = cmd.get_schema_response
    r.request_id = request_id
    r.error_code = int(code)  # type: ignore[assignment]
    r.error_message = message
    return encode_command(cmd)


def get_schema_response(request_id: int, schema: pb.Schema, schema_version: bytes) -> bytes:
    """GET_SCHEMA_RESPONSE frame with the schema and its version."""
    cmd = T(type=T.GET_SCHEMA_RESPONSE)
    r = cmd.get_schema_response
    r.request_id = request_id
    r.schema.CopyFrom(schema)
    r.schema_version = schema_version
    return encode_command(cmd)


def get_or_create_schema_error(request_id: int, code: ServerError, message: str) -> bytes:
    """GET_OR_CREATE_SCHEMA_RESPONSE frame carrying an error."""
    cmd = T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
    r = cmd.get_or_create_schema_response
    r.request_id = request_id
    r.error_code = int(code)  # type: ignore[assignment]
    r.error_message = message
    return encode_command(cmd)


def get_or_create_schema_response(request_id: int, schema_version: bytes) -> bytes:
    """GET_OR_CREATE_SCHEMA_RESPONSE frame with the schema version."""
    cmd = T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE)
    r = cmd.get_or_create_schema_response
    r.request_id = request_id
    r.schema_version = schema_version
    return encode_command(cmd)


# --- client -> broker (framed, for tests and tools that speak raw bytes) ----------------------


def connect(client_version: str, protocol_version: int = MAX_PROTOCOL_VERSION) -> bytes:
    """A bare CONNECT frame, without feature flags (as an old client sends it)."""
    return encode_command(
        client_commands.connect(client_version, protocol_version, feature_flags=False)
    )


def send_frame_header(
    producer_id: int,
    sequence_id: int,
    entry_size: int,
    num_messages: int = 1,
    *,
    highest_sequence_id: int | None = None,
    is_chunk: bool = False,
) -> bytes:
    """Frame header + SEND command to write in front of an entry of ``entry_size`` bytes."""
    highest = sequence_id if highest_sequence_id is None else highest_sequence_id
    cmd = client_commands.send(producer_id, sequence_id, num_messages, highest, is_chunk=is_chunk)
    return payload_frame_header(cmd.SerializeToString(), entry_size)

"""The one place that turns a failed request into its error reply frame.

Most requests are answered with ERROR; a few commands have their own failure reply (SEND gets
SEND_ERROR, ACK an ACK_RESPONSE with an error, lookups a Failed response, schema and stats
requests their response with an error code). The reply carries the error's ``ServerError`` code.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import Message

from starquake.broker.errors import BrokerServiceError
from starquake.protocol import commands
from starquake.protocol.wire import pb

_Reply = Callable[[Message, BrokerServiceError], bytes]


def _send_error(request: Message, exc: BrokerServiceError) -> bytes:
    assert isinstance(request, pb.CommandSend)
    return commands.send_error(request.producer_id, request.sequence_id, exc.code, exc.message)


def _ack_error(request: Message, exc: BrokerServiceError) -> bytes:
    assert isinstance(request, pb.CommandAck)
    return commands.ack_response(request.consumer_id, request.request_id, exc.code, exc.message)


def _lookup_error(request: Message, exc: BrokerServiceError) -> bytes:
    request_id = _request_id(request)
    return commands.lookup_response(request_id, error_code=exc.code, message=exc.message)


def _partitioned_metadata_error(request: Message, exc: BrokerServiceError) -> bytes:
    request_id = _request_id(request)
    return commands.partitioned_metadata_response(request_id, 0, exc.code, exc.message)


def _get_schema_error(request: Message, exc: BrokerServiceError) -> bytes:
    return commands.get_schema_response_error(_request_id(request), exc.code, exc.message)


def _get_or_create_schema_error(request: Message, exc: BrokerServiceError) -> bytes:
    return commands.get_or_create_schema_error(_request_id(request), exc.code, exc.message)


def _consumer_stats_error(request: Message, exc: BrokerServiceError) -> bytes:
    return commands.consumer_stats_error(_request_id(request), exc.code, exc.message)


_REPLIES: dict[str, _Reply] = {
    pb.CommandSend.DESCRIPTOR.full_name: _send_error,
    pb.CommandAck.DESCRIPTOR.full_name: _ack_error,
    pb.CommandLookupTopic.DESCRIPTOR.full_name: _lookup_error,
    pb.CommandPartitionedTopicMetadata.DESCRIPTOR.full_name: _partitioned_metadata_error,
    pb.CommandGetSchema.DESCRIPTOR.full_name: _get_schema_error,
    pb.CommandGetOrCreateSchema.DESCRIPTOR.full_name: _get_or_create_schema_error,
    pb.CommandConsumerStats.DESCRIPTOR.full_name: _consumer_stats_error,
}


def _request_id(request: Message) -> int:
    return int(getattr(request, "request_id"))  # noqa: B009 - every request has one


def error_reply(request: Message, exc: BrokerServiceError) -> bytes:
    """The frame that answers ``request`` (a sub-command such as ``CommandSend``) with ``exc``."""
    reply = _REPLIES.get(request.DESCRIPTOR.full_name)
    if reply is not None:
        return reply(request, exc)
    return commands.error(_request_id(request), exc.code, exc.message)

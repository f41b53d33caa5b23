"""What the admin endpoints answer: Pulsar's status codes for failed operations, and bodies."""

from __future__ import annotations

import json
from typing import Any

from starquake.broker.errors import (
    BrokerServiceError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from starquake.broker.policy_types import PolicyError
from starquake.broker.resources import ConflictError, NotFoundError, UnprocessableError
from starquake.broker.web import Call, Endpoint, Reply, json_reply
from starquake.common.topic_name import InvalidTopicNameError

__all__ = [
    "NO_CONTENT",
    "SEGMENT",
    "BadRequest",
    "NotAcceptable",
    "NotAllowed",
    "Reply",
    "guarded",
    "json_body",
    "parse_json",
    "status_of",
    "whole_number",
]

NO_CONTENT: Reply = (204, "application/json", b"")


class BadRequest(Exception):
    """The request body is not what the endpoint takes (HTTP 400)."""


class NotAllowed(BrokerServiceError):
    """An endpoint switched off by the broker's configuration (HTTP 405)."""


class NotAcceptable(BrokerServiceError):
    """A partition count out of bounds (HTTP 406, as Pulsar answers it)."""


def partition_count_refusal(count: int, limit: int) -> NotAcceptable | None:
    """Why ``count`` partitions are refused (None when they are not), in Pulsar's words."""
    if count < 1:
        return NotAcceptable("Number of partitions should be more than 0")
    if count > limit:
        return NotAcceptable(f"Number of partitions should be less than or equal to {limit}")
    return None


def status_of(exc: Exception) -> int:
    """The HTTP status of a failed admin operation: 404 unknown, 409 exists, 400 bad body,
    422 a request that cannot be carried out, 406 a partition count out of bounds, 405 an
    endpoint switched off, 412 for the rest (a precondition that does not
    hold, a name Pulsar refuses)."""
    if isinstance(exc, (NotFoundError, TopicNotFoundError, SubscriptionNotFoundError)):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, (BadRequest, PolicyError)):
        return 400
    if isinstance(exc, UnprocessableError):
        return 422
    if isinstance(exc, NotAcceptable):
        return 406
    if isinstance(exc, NotAllowed):
        return 405
    return 412


MAX_LONG = 2**63 - 1
"""The largest whole number the admin API takes (Pulsar's are Java longs at most)."""


def parse_json(data: bytes | str, what: str = "the body") -> Any:
    """The JSON value of ``data``; BadRequest if it is not JSON, nests too deeply for the
    parser, or holds a whole number beyond a long."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise BadRequest(f"{what} is nested too deeply") from None
    except ValueError as exc:  # also bytes that are not UTF-8
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None
    return value


def json_body(body: bytes, default: Any = None) -> Any:
    """The JSON value of a request body (``default`` when empty); BadRequest if malformed."""
    if not body.strip():
        return default
    return parse_json(body)


def whole_number(text: str, what: str = "the number in the path", minimum: int = 0) -> int:
    """A whole number from a path or query parameter, from ``minimum`` to a long's maximum
    (BadRequest otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{what} must be a whole number, not {text[:40]!r}") from None
    if not minimum <= value <= MAX_LONG:
        raise BadRequest(f"{what} must be from {minimum} to {MAX_LONG}, not {text[:40]}")
    return value


SEGMENT = r"[^/]+"
"""One path segment of a route pattern (a tenant, namespace, topic or subscription name)."""


def guarded(endpoint: Endpoint) -> Endpoint:
    """``endpoint`` with failed operations answered as Pulsar does: a status and a reason."""

    async def run(call: Call) -> Reply:
        try:
            return await endpoint(call)
        except (BrokerServiceError, BadRequest, PolicyError, InvalidTopicNameError) as exc:
            status = 412 if isinstance(exc, InvalidTopicNameError) else status_of(exc)
            return json_reply(status, {"reason": str(exc)})

    return run

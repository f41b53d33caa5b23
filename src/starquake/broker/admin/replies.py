"""What the admin endpoints answer: Pulsar's status codes for failed operations, and bodies."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starquake.broker.errors import (
    BrokerServiceError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from starquake.broker.resources import ConflictError, NotFoundError, UnprocessableError
from starquake.broker.web import Reply, WebServer, json_reply
from starquake.common.topic_name import InvalidTopicNameError

__all__ = [
    "NO_CONTENT",
    "SEGMENT",
    "BadRequest",
    "Endpoint",
    "Reply",
    "guarded",
    "json_body",
    "status_of",
    "whole_number",
]

NO_CONTENT: Reply = (204, "application/json", b"")


class BadRequest(Exception):
    """The request body is not what the endpoint takes (HTTP 400)."""


def status_of(exc: Exception) -> int:
    """The HTTP status of a failed admin operation: 404 unknown, 409 exists, 400 bad body,
    422 a request that cannot be carried out, 412 for the rest (a precondition that does not
    hold, a name Pulsar refuses)."""
    if isinstance(exc, (NotFoundError, TopicNotFoundError, SubscriptionNotFoundError)):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, BadRequest):
        return 400
    if isinstance(exc, UnprocessableError):
        return 422
    return 412


def json_body(body: bytes, default: Any = None) -> Any:
    """The JSON value of a request body (``default`` when empty); BadRequest if malformed."""
    if not body.strip():
        return default
    try:
        return json.loads(body)
    except ValueError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None


def whole_number(text: str, name: str = "") -> int:
    """A non-negative whole number from a request's path or query (BadRequest otherwise)."""
    label = f"{name} " if name else ""
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{label}{text!r} is not a whole number") from None
    if value < 0:
        raise BadRequest(f"{label}{value} is negative")
    return value


SEGMENT = r"[^/]+"
"""One path segment of a route pattern (a tenant, namespace, topic or subscription name)."""

Endpoint = Callable[[dict[str, str], bytes], Awaitable[Reply]]


def guarded(handler: Endpoint) -> Endpoint:
    """``handler`` with failed operations answered as Pulsar does: a status and a reason."""

    async def run(params: dict[str, str], body: bytes) -> Reply:
        try:
            return await handler(params, body)
        except (BrokerServiceError, BadRequest, InvalidTopicNameError) as exc:
            status = 412 if isinstance(exc, InvalidTopicNameError) else status_of(exc)
            return json_reply(status, {"reason": str(exc)})

    return run


def serve_routes(web: WebServer, routes: Iterable[tuple[str, str, Endpoint]]) -> None:
    """Serve each (method, path pattern, endpoint), failures answered as by :func:`guarded`."""
    for method, pattern, handler in routes:
        web.route_pattern(method, pattern, guarded(handler))

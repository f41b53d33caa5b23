"""What the admin endpoints answer: Pulsar's status codes for failed operations, and bodies."""

from __future__ import annotations

import json
from typing import Any

from starquake.broker.errors import TopicNotFoundError
from starquake.broker.resources import ConflictError, NotFoundError

__all__ = ["NO_CONTENT", "BadRequest", "Reply", "json_body", "status_of"]

Reply = tuple[int, str, bytes]
NO_CONTENT: Reply = (204, "application/json", b"")


class BadRequest(Exception):
    """The request body is not what the endpoint takes (HTTP 400)."""


def status_of(exc: Exception) -> int:
    """The HTTP status of a failed admin operation: 404 unknown, 409 exists, 400 bad body,
    412 for the rest (a precondition that does not hold, a name Pulsar refuses)."""
    if isinstance(exc, (NotFoundError, TopicNotFoundError)):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, BadRequest):
        return 400
    return 412


def json_body(body: bytes, default: Any = None) -> Any:
    """The JSON value of a request body (``default`` when empty); BadRequest if malformed."""
    if not body.strip():
        return default
    try:
        return json.loads(body)
    except ValueError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None

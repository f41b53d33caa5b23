"""What the admin REST API answers: responses, the errors a call raises, peeked messages."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AdminConnectError",
    "AdminResponse",
    "PeekedMessage",
    "PulsarAdminError",
    "connect_reason",
    "reason_of",
]


@dataclass(frozen=True)
class AdminResponse:
    """One HTTP answer: status, headers (as received, in order) and the raw body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def json(self) -> Any:
        """The body as JSON (``None`` when empty)."""
        return json.loads(self.body) if self.body.strip() else None

    def header(self, name: str) -> str | None:
        """The first header called ``name`` (case-insensitive)."""
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)


class PulsarAdminError(Exception):
    """The broker refused a request: ``status`` is the HTTP status, ``reason`` Pulsar's
    ``{"reason": ...}`` (or the body's text when it has none)."""

    def __init__(self, method: str, url: str, status: int, reason: str) -> None:
        super().__init__(f"{reason} (HTTP {status})")
        self.method = method
        self.url = url
        self.status = status
        self.reason = reason


class AdminConnectError(Exception):
    """The broker could not be reached (refused, unknown host, timed out, cut off)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot connect to {url}: {reason}")
        self.url = url
        self.reason = reason


def reason_of(body: bytes, fallback: str) -> str:
    """The ``reason`` of a refusal's body (or its text, or ``fallback``)."""
    try:
        value = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return text[:500] or fallback
    if isinstance(value, dict) and isinstance(value.get("reason"), str):
        return str(value["reason"])
    return json.dumps(value)[:500] if value is not None else fallback


def connect_reason(exc: BaseException) -> str:
    """One line saying why the broker could not be reached."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        exc = exc.reason
    if isinstance(exc, socket.gaierror):
        return exc.strerror or str(exc)
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, http.client.HTTPException):
        return f"the connection failed ({type(exc).__name__})"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


@dataclass(frozen=True)
class PeekedMessage:
    """A message read by ``peek``: its id, properties, the other ``X-Pulsar-*`` metadata
    headers (without the prefix) and the payload."""

    message_id: str | None
    properties: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    payload: bytes = b""

    @classmethod
    def of(cls, response: AdminResponse) -> PeekedMessage:
        """The message of a peek response (its headers and body)."""
        properties: dict[str, str] = {}
        metadata: dict[str, str] = {}
        message_id: str | None = None
        for name, value in response.headers:
            lowered = name.lower()
            if lowered.startswith("x-pulsar-property-"):
                properties[name[len("X-Pulsar-PROPERTY-") :]] = value
            elif lowered == "x-pulsar-message-id":
                message_id = value
            elif lowered.startswith("x-pulsar-"):
                metadata[name[len("X-Pulsar-") :]] = value
        return cls(message_id, properties, metadata, response.body)

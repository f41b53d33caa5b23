"""Calls to a broker's admin API over real HTTP, for the admin tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def http_call(
    base_url: str, method: str, path: str, body: bytes | object | None = None
) -> tuple[int, bytes]:
    """(status, raw body) of ``method path``; a non-bytes ``body`` is sent as JSON."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{base_url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def admin_json(
    broker: Any, method: str, path: str, body: bytes | object | None = None
) -> tuple[int, Any]:
    """(status, decoded JSON body or None) of ``method path`` on ``broker``'s web port."""
    status, raw = http_call(broker.web_service_url, method, path, body)
    return status, json.loads(raw) if raw else None

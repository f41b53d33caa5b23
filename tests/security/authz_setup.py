"""A broker with token authentication and authorization on, tokens for its roles, and admin
calls made as one of them, for the authorization tests.

Roles: ``admin`` is the super user; tenant ``acme`` (namespace ``acme/app``) is administered
by ``acme-admin``, tenant ``other`` (namespace ``other/ns``) by ``other-admin``; any other
role has only what it is granted.
"""

from __future__ import annotations

import base64
import json
import secrets
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import jwt

from starquake.broker.embedded import EmbeddedBroker

SECRET = secrets.token_bytes(32)
SUPER_USER = "admin"
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


def token(role: str) -> str:
    """An HS256 token for ``role``, signed with the broker's secret key."""
    return jwt.encode({"sub": role}, SECRET, algorithm="HS256")


def secured_broker(data_dir: Path, **settings: Any) -> EmbeddedBroker:
    """A started broker with token authentication and authorization on, and the tenants and
    namespaces of the module's docstring."""
    broker = EmbeddedBroker(
        data_dir,
        authenticationEnabled=True,
        authenticationProviders=TOKEN_PROVIDER,
        tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
        authorizationEnabled=True,
        superUserRoles=SUPER_USER,
        **settings,
    ).start()
    try:
        for tenant, admin in (("acme", "acme-admin"), ("other", "other-admin")):
            info = {"adminRoles": [admin], "allowedClusters": ["standalone"]}
            assert call(broker, "PUT", f"/admin/v2/tenants/{tenant}", SUPER_USER, info)[0] == 204
        for namespace in ("acme/app", "other/ns"):
            assert call(broker, "PUT", f"/admin/v2/namespaces/{namespace}", SUPER_USER)[0] == 204
    except BaseException:
        broker.stop()
        raise
    return broker


def call(
    broker: EmbeddedBroker,
    method: str,
    path: str,
    role: str | None = None,
    body: object | None = None,
) -> tuple[int, Any]:
    """(status, decoded JSON body or None) of ``method path`` made as ``role`` (a Bearer
    token; no credentials when None)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if role is not None:
        headers["Authorization"] = f"Bearer {token(role)}"
    request = urllib.request.Request(
        f"{broker.web_service_url}{path}", data=data, method=method, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", "replace")

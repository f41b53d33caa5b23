"""Token authentication of the web port: admin calls with a good token succeed, without one or
with a bad one they get 401 with a reason; through PulsarAdmin and raw HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_support import hs256, secret_key, token_broker

from starquake import client as sq
from starquake.admin.client import PulsarAdmin, PulsarAdminError
from starquake.broker.embedded import EmbeddedBroker

KEY = secret_key()


@pytest.fixture(scope="module")
def web_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with token_broker(tmp_path_factory.mktemp("web") / "data", KEY) as running:
        yield running


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def test_pulsar_admin_with_and_without_a_token(web_broker: EmbeddedBroker) -> None:
    url = web_broker.web_service_url
    admin = PulsarAdmin(url, authentication=sq.AuthenticationToken(hs256(KEY, "ops")))
    assert "public" in admin.tenants.list()
    admin.tenants.create("auth-tenant", allowed_clusters=["standalone"])
    assert "auth-tenant" in admin.tenants.list()
    for authentication in (None, sq.AuthenticationToken(hs256(secret_key(), "ops"))):
        with pytest.raises(PulsarAdminError) as refused:
            PulsarAdmin(url, authentication=authentication).tenants.list()
        assert refused.value.status == 401
    expired = sq.AuthenticationToken(hs256(KEY, "ops", expires_in=-1))
    with pytest.raises(PulsarAdminError, match="token expired"):
        PulsarAdmin(url, authentication=expired).tenants.list()


def test_raw_http(web_broker: EmbeddedBroker) -> None:
    tenants = f"{web_broker.web_service_url}/admin/v2/tenants"
    status, body = _get(tenants, {"Authorization": f"Bearer {hs256(KEY, 'ops')}"})
    assert status == 200 and "public" in json.loads(body)
    status, body = _get(tenants)
    assert status == 401
    assert "no credentials" in json.loads(body)["reason"]
    status, body = _get(tenants, {"Authorization": "Bearer nonsense"})
    assert status == 401 and "invalid token" in json.loads(body)["reason"]
    status, body = _get(tenants, {"Authorization": "Digest abc"})
    assert status == 401 and "unsupported Authorization scheme" in json.loads(body)["reason"]
    status, _ = _get(f"{web_broker.web_service_url}/admin/v2/brokers/health")
    assert status == 401


def test_metrics_need_no_credentials(web_broker: EmbeddedBroker) -> None:
    status, body = _get(f"{web_broker.web_service_url}/metrics")
    assert status == 200 and b"# TYPE" in body
    status, _ = _get(f"{web_broker.web_service_url}/metrics", {"Authorization": "Bearer bad"})
    assert status == 401


def test_anonymous_role_on_the_web_port(tmp_path: Path) -> None:
    with token_broker(tmp_path / "data", KEY, anonymousUserRole="guest") as broker:
        status, _ = _get(f"{broker.web_service_url}/admin/v2/tenants")
        assert status == 200
        status, _ = _get(
            f"{broker.web_service_url}/admin/v2/tenants", {"Authorization": "Bearer x"}
        )
        assert status == 401


def test_token_from_a_file_and_a_supplier(web_broker: EmbeddedBroker, tmp_path: Path) -> None:
    path = tmp_path / "token.jwt"
    path.write_text(hs256(KEY, "ops"))
    url = web_broker.web_service_url
    assert (
        "public"
        in PulsarAdmin(url, authentication=sq.AuthenticationToken(f"file://{path}")).tenants.list()
    )
    calls: list[int] = []

    def supplier() -> str:
        calls.append(1)
        return hs256(KEY, "ops")

    admin = PulsarAdmin(url, authentication=sq.AuthenticationToken(supplier))
    admin.tenants.list()
    admin.tenants.list()
    assert len(calls) == 2

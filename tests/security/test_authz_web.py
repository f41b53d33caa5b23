"""Authorization of admin calls over HTTP with Bearer tokens: 401 without credentials, 403
with a reason for a role without the right; super users, tenant admins and granted roles."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from authz_setup import SUPER_USER, call, secured_broker, token
from click.testing import CliRunner

import starquake.client
from starquake.admin.client import PulsarAdmin, PulsarAdminError
from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("authz-web") / "data"
    running = secured_broker(data)
    try:
        yield running
    finally:
        running.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/admin/v2/tenants"),
        ("GET", "/admin/v2/clusters"),
        ("GET", "/admin/v2/brokers/health"),
        ("GET", "/admin/v2/namespaces/acme"),
        ("GET", "/admin/v2/namespaces/acme/app/permissions"),
        ("GET", "/admin/v2/persistent/acme/app/t/stats"),
        ("GET", "/lookup/v2/topic/persistent/acme/app/t"),
    ],
)
def test_no_credentials_is_401(broker: EmbeddedBroker, method: str, path: str) -> None:
    status, reply = call(broker, method, path)
    assert status == 401
    assert reply["reason"]


def test_metrics_need_no_credentials(broker: EmbeddedBroker) -> None:
    status, body = call(broker, "GET", "/metrics")
    assert status == 200
    assert "pulsar_" in body


def test_super_user_may_do_everything(broker: EmbeddedBroker) -> None:
    assert call(broker, "GET", "/admin/v2/clusters", SUPER_USER) == (200, ["standalone"])
    assert call(broker, "GET", "/admin/v2/brokers/health", SUPER_USER)[0] == 200
    tenant = unique("t")
    info = {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert call(broker, "PUT", f"/admin/v2/tenants/{tenant}", SUPER_USER, info)[0] == 204
    assert call(broker, "PUT", f"/admin/v2/namespaces/{tenant}/ns", SUPER_USER)[0] == 204
    topic = f"/admin/v2/persistent/{tenant}/ns/t"
    assert call(broker, "PUT", topic, SUPER_USER)[0] == 204
    assert call(broker, "GET", f"{topic}/stats", SUPER_USER)[0] == 200
    assert call(broker, "DELETE", topic, SUPER_USER)[0] == 204


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/admin/v2/tenants", None),
        ("GET", "/admin/v2/clusters", None),
        ("GET", "/admin/v2/brokers/health", None),
        ("PUT", "/admin/v2/tenants/new-one", {"allowedClusters": ["standalone"]}),
        ("POST", "/admin/v2/tenants/acme", {"adminRoles": ["acme-admin", "me"]}),
        ("DELETE", "/admin/v2/tenants/other", None),
    ],
)
def test_super_user_calls_are_403_for_a_tenant_admin(
    broker: EmbeddedBroker, method: str, path: str, body: object
) -> None:
    status, reply = call(broker, method, path, "acme-admin", body)
    assert status == 403
    assert "super-user" in reply["reason"]


def test_tenant_admin_administers_its_tenant_only(broker: EmbeddedBroker) -> None:
    role = "acme-admin"
    assert call(broker, "GET", "/admin/v2/tenants/acme", role)[0] == 200
    assert call(broker, "GET", "/admin/v2/namespaces/acme", role)[0] == 200
    namespace = f"acme/{unique('ns')}"
    assert call(broker, "PUT", f"/admin/v2/namespaces/{namespace}", role)[0] == 204
    grant = f"/admin/v2/namespaces/{namespace}/permissions/app"
    assert call(broker, "POST", grant, role, ["produce"])[0] == 204
    assert call(broker, "POST", f"/admin/v2/namespaces/{namespace}/messageTTL", role, 60)[0] == 204
    topic = f"/admin/v2/persistent/{namespace}/t"
    assert call(broker, "PUT", f"{topic}/partitions", role, 2)[0] == 204
    assert call(broker, "GET", f"{topic}/permissions", role) == (200, {"app": ["produce"]})
    assert call(broker, "DELETE", f"{topic}/partitions", role)[0] == 204
    assert call(broker, "DELETE", f"/admin/v2/namespaces/{namespace}", role)[0] == 204

    # nothing in another tenant
    for method, path, body in [
        ("GET", "/admin/v2/tenants/other", None),
        ("GET", "/admin/v2/namespaces/other", None),
        ("PUT", f"/admin/v2/namespaces/other/{unique('ns')}", None),
        ("GET", "/admin/v2/namespaces/other/ns/permissions", None),
        ("POST", "/admin/v2/namespaces/other/ns/permissions/me", ["consume"]),
        ("POST", "/admin/v2/namespaces/other/ns/messageTTL", 60),
        ("PUT", "/admin/v2/persistent/other/ns/t", None),
        ("GET", "/admin/v2/persistent/other/ns/t/stats", None),
        ("GET", "/admin/v2/persistent/other/ns", None),
    ]:
        status, reply = call(broker, method, path, role, body)
        assert status == 403, (method, path)
        assert "acme-admin" in reply["reason"] and "other" in reply["reason"], reply
    assert call(broker, "GET", "/admin/v2/namespaces/other/ns/permissions", "other-admin")[0] == 200


def test_granted_roles_follow_the_topic_operations(broker: EmbeddedBroker) -> None:
    topic = f"persistent://acme/app/{unique('ops')}"
    path = "/admin/v2/" + topic.replace("://", "/")
    assert call(broker, "PUT", path, "acme-admin")[0] == 204
    grants = {"writer": ["produce"], "reader": ["consume"]}
    for role, actions in grants.items():
        assert call(broker, "POST", f"{path}/permissions/{role}", "acme-admin", actions)[0] == 204

    # produce or consume: lookups, partition metadata, stats
    for role in grants:
        for suffix in ("/stats", "/internalStats", "/partitions"):
            assert call(broker, "GET", path + suffix, role)[0] == 200, (role, suffix)
    # consume: subscriptions and what is done to them
    sub = f"{path}/subscription/s"
    assert call(broker, "PUT", sub, "reader")[0] == 204
    assert call(broker, "GET", f"{path}/subscriptions", "reader") == (200, ["s"])
    assert call(broker, "POST", f"{sub}/skip_all", "reader")[0] == 204
    for method, target in (("GET", f"{path}/subscriptions"), ("POST", f"{sub}/skip_all")):
        status, reply = call(broker, method, target, "writer")
        assert status == 403
        assert "consume" in reply["reason"]
    # the rest needs a tenant admin
    for role in grants:
        for method, target, body in [
            ("GET", f"{path}/permissions", None),
            ("POST", f"{path}/permissions/{role}", ["produce", "consume"]),
            ("PUT", f"{path}/unload", None),
            ("POST", f"{path}/messageTTL?messageTTL=10", None),
            ("DELETE", path, None),
        ]:
            status, reply = call(broker, method, target, role, body)
            assert status == 403, (role, method, target)
            assert "administrate" in reply["reason"]
    # a role with nothing: nothing
    status, reply = call(broker, "GET", f"{path}/stats", "stranger")
    assert status == 403
    assert "neither produce nor consume" in reply["reason"]
    assert call(broker, "DELETE", f"{sub}", "reader")[0] == 204


def test_listing_topics_needs_consume_on_the_namespace(broker: EmbeddedBroker) -> None:
    namespace = f"acme/{unique('list')}"
    assert call(broker, "PUT", f"/admin/v2/namespaces/{namespace}", "acme-admin")[0] == 204
    listing = f"/admin/v2/persistent/{namespace}"
    assert call(broker, "GET", listing, "lister")[0] == 403
    topic_grant = f"/admin/v2/persistent/{namespace}/t/permissions/lister"
    assert call(broker, "POST", topic_grant, "acme-admin", ["consume"])[0] == 204
    assert call(broker, "GET", listing, "lister")[0] == 403  # a topic grant is not enough
    ns_grant = f"/admin/v2/namespaces/{namespace}/permissions/lister"
    assert call(broker, "POST", ns_grant, "acme-admin", ["consume"])[0] == 204
    assert call(broker, "GET", listing, "lister") == (200, [])
    assert call(broker, "GET", f"/admin/v2/namespaces/{namespace}/topics", "lister")[0] == 200


def test_authorization_without_authentication_refuses_everyone(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data", authorizationEnabled=True) as plain:
        status, reply = call(plain, "GET", "/admin/v2/tenants")
        assert status == 401
        assert "Authentication required" in reply["reason"]
        assert call(plain, "GET", "/metrics")[0] == 200
        client = pulsar.Client(
            plain.service_url,
            operation_timeout_seconds=3,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            with pytest.raises(pulsar.AuthorizationError):
                client.create_producer("persistent://public/default/t")
        finally:
            client.close()


def test_pulsar_admin_with_tokens(broker: EmbeddedBroker) -> None:
    def admin(role: str | None) -> PulsarAdmin:
        auth = None if role is None else starquake.client.AuthenticationToken(token(role))
        return PulsarAdmin(broker.web_service_url, authentication=auth)

    namespace = f"acme/{unique('admin')}"
    admin("acme-admin").namespaces.create(namespace)
    admin("acme-admin").namespaces.grant_permission(namespace, "app", ["produce"])
    assert admin(SUPER_USER).namespaces.permissions(namespace) == {"app": ["produce"]}
    with pytest.raises(PulsarAdminError) as forbidden:
        admin("app").namespaces.permissions(namespace)
    assert forbidden.value.status == 403
    assert "app" in forbidden.value.reason
    with pytest.raises(PulsarAdminError) as forbidden:
        admin("other-admin").namespaces.grant_permission(namespace, "me", ["consume"])
    assert forbidden.value.status == 403
    with pytest.raises(PulsarAdminError) as unauthenticated:
        admin(None).namespaces.permissions(namespace)
    assert unauthenticated.value.status == 401
    assert admin(SUPER_USER).namespaces.permissions(namespace) == {"app": ["produce"]}


def test_cli_with_tokens(broker: EmbeddedBroker) -> None:
    def run(role: str, *args: str) -> tuple[int, str, str]:
        result = CliRunner().invoke(
            cli,
            [
                "admin",
                "--admin-url",
                broker.web_service_url,
                "--auth-plugin",
                "org.apache.pulsar.client.impl.auth.AuthenticationToken",
                "--auth-params",
                f"token:{token(role)}",
                "--output",
                "json",
                *args,
            ],
        )
        return result.exit_code, result.stdout, result.stderr

    topic = f"persistent://acme/app/{unique('cli')}"
    grant = ["topics", "grant-permission", topic, "--role", "app", "--actions", "consume"]
    code, _, err = run("app", *grant)
    assert code == 1 and "403" in err
    assert run("acme-admin", *grant)[0] == 0
    code, out, _ = run("acme-admin", "topics", "permissions", topic)
    assert code == 0 and json.loads(out) == {"app": ["consume"]}

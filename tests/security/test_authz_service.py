"""AuthorizationService against a real metadata store: super users, tenant admins, namespace
and topic grants, partitions, subscription roles, wildcards, and the web rule table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from starquake.broker.config import load_config
from starquake.broker.resources import PulsarResources
from starquake.broker.security.authorization import (
    AuthorizationError,
    AuthorizationService,
    TopicOperation,
)
from starquake.broker.security.web_authorization import Need, rule_for
from starquake.common.topic_name import TopicName
from starquake.protocol.errors import ServerError
from starquake.storage import SqliteMetadataStore

T1 = TopicName.parse("persistent://acme/orders/t1")
T2 = TopicName.parse("persistent://acme/orders/t2")
OTHER_NS = TopicName.parse("persistent://acme/billing/t1")


@pytest.fixture
def resources(tmp_path: Path) -> Iterator[PulsarResources]:
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    res = PulsarResources(store, "standalone")
    res.create_tenant("acme", {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]})
    res.create_tenant("other", {"adminRoles": ["other-admin"], "allowedClusters": ["standalone"]})
    res.create_namespace("acme/orders")
    res.create_namespace("acme/billing")
    try:
        yield res
    finally:
        store.close()


def service(resources: PulsarResources, **settings: Any) -> AuthorizationService:
    config = load_config(
        overrides={"authorizationEnabled": True, "authenticationEnabled": True, **settings},
        environ={},
    )
    return AuthorizationService(config, resources)


def grant(resources: PulsarResources, namespace: str, auth: dict[str, Any]) -> None:
    resources.update_namespace_policies(namespace, lambda p: p.update(auth_policies=auth))


def test_super_users_come_from_the_comma_separated_setting(resources: PulsarResources) -> None:
    authz = service(resources, superUserRoles=" root , ops ")
    assert authz.is_super_user("root") and authz.is_super_user("ops")
    assert not authz.is_super_user("acme-admin")
    assert not authz.is_super_user(None)
    for op in TopicOperation:
        assert authz.allow_topic_operation(T1, "ops", op)


def test_tenant_admins_administer_their_tenant_only(resources: PulsarResources) -> None:
    authz = service(resources, superUserRoles="root")
    assert authz.is_tenant_admin("acme", "acme-admin")
    assert authz.is_tenant_admin("acme", "root")
    assert not authz.is_tenant_admin("other", "acme-admin")
    assert not authz.is_tenant_admin("missing", "acme-admin")
    assert authz.allow_topic_operation(T1, "acme-admin", TopicOperation.ADMIN)
    other = TopicName.parse("persistent://other/ns/t")
    assert not authz.allow_topic_operation(other, "acme-admin", TopicOperation.LOOKUP)


def test_no_grant_no_access_and_nothing_checked_when_disabled(resources: PulsarResources) -> None:
    authz = service(resources)
    for op in TopicOperation:
        assert not authz.allow_topic_operation(T1, "app", op)
        assert not authz.allow_topic_operation(T1, None, op)
    off = AuthorizationService(load_config(overrides={}, environ={}), resources)
    assert not off.enabled
    for op in TopicOperation:
        assert off.allow_topic_operation(T1, None, op)
    off.check_produce(None, T1, "")  # no error with authorization off


def test_namespace_grant_covers_every_topic_of_the_namespace(resources: PulsarResources) -> None:
    authz = service(resources)
    grant(resources, "acme/orders", {"namespace_auth": {"app": ["produce"]}})
    assert authz.can_produce(T1, "app") and authz.can_produce(T2, "app")
    assert not authz.can_consume(T1, "app")
    assert authz.can_lookup(T1, "app")
    assert not authz.can_produce(OTHER_NS, "app")
    assert not authz.allow_topic_operation(T1, "app", TopicOperation.ADMIN)


def test_topic_grant_covers_that_topic_and_its_partitions(resources: PulsarResources) -> None:
    authz = service(resources)
    grant(resources, "acme/orders", {"destination_auth": {str(T1): {"app": ["consume"]}}})
    assert authz.can_consume(T1, "app")
    assert authz.can_consume(T1.partition(3), "app")  # via the partitioned topic's grant
    assert not authz.can_consume(T2, "app")
    assert not authz.can_produce(T1, "app")
    assert authz.can_lookup(T1, "app")


def test_subscription_roles_restrict_consumers(resources: PulsarResources) -> None:
    authz = service(resources)
    grant(
        resources,
        "acme/orders",
        {
            "namespace_auth": {"a": ["consume"], "b": ["consume"]},
            "subscription_auth_roles": {"billing": ["a"], "open": []},
        },
    )
    assert authz.can_consume(T1, "a", "billing")
    assert not authz.can_consume(T1, "b", "billing")
    assert authz.can_consume(T1, "b", "open")  # an empty list restricts nothing
    assert authz.can_consume(T1, "b", "other")
    assert authz.can_lookup(T1, "b")  # a lookup names no subscription


def test_wildcards_match_only_when_enabled(resources: PulsarResources) -> None:
    auth = {"namespace_auth": {"team-*": ["produce"], "*-reader": ["consume"]}}
    grant(resources, "acme/orders", auth)
    plain = service(resources)
    assert not plain.can_produce(T1, "team-blue")
    wild = service(resources, authorizationAllowWildcardsMatching=True)
    assert wild.can_produce(T1, "team-blue")
    assert not wild.can_produce(T1, "blue-team")
    assert wild.can_consume(T1, "audit-reader")
    assert not wild.can_consume(T1, "team-blue")


def test_binary_checks_raise_authorization_errors_with_pulsar_text(
    resources: PulsarResources,
) -> None:
    authz = service(resources)
    with pytest.raises(AuthorizationError) as refused:
        authz.check_produce("app", T1, "")
    assert refused.value.code is ServerError.AuthorizationError
    assert str(refused.value).startswith("Client is not authorized to Produce")
    assert "produce" in str(refused.value)
    with pytest.raises(AuthorizationError, match=r"^Client is not authorized to subscribe"):
        authz.check_subscribe("app", T1, "s")
    with pytest.raises(AuthorizationError, match=r"^Client is not authorized to Lookup"):
        authz.check_lookup("app", T1)
    with pytest.raises(AuthorizationError, match="no authenticated role"):
        authz.check_lookup(None, T1)
    refusal = authz.get_topics_refusal("app", "acme/orders")
    assert refusal is not None and refusal.code is ServerError.AuthorizationError

    grant(resources, "acme/orders", {"namespace_auth": {"app": ["produce"]}})
    authz.check_produce("app", T1, "")
    authz.check_lookup("app", T1)
    # an initial subscription needs consume too
    with pytest.raises(AuthorizationError, match="subscription 'init'"):
        authz.check_produce("app", T1, "init")
    # listing needs consume on the namespace
    assert authz.get_topics_refusal("app", "acme/orders") is not None
    assert authz.get_topics_refusal("acme-admin", "acme/orders") is None


@pytest.mark.parametrize(
    ("method", "path", "need"),
    [
        ("GET", "/metrics", Need.NOTHING),
        ("GET", "/", Need.NOTHING),
        ("GET", "/dashboard/app.js", Need.NOTHING),
        ("GET", "/admin/v2/brokers/health", Need.SUPER_USER),
        ("GET", "/admin/v2/clusters", Need.SUPER_USER),
        ("GET", "/admin/v2/tenants", Need.SUPER_USER),
        ("PUT", "/admin/v2/tenants/acme", Need.SUPER_USER),
        ("GET", "/admin/v2/tenants/acme", Need.TENANT_ADMIN),
        ("GET", "/admin/v2/namespaces/acme", Need.TENANT_ADMIN),
        ("PUT", "/admin/v2/namespaces/acme/ns", Need.TENANT_ADMIN),
        ("POST", "/admin/v2/namespaces/acme/ns/permissions/app", Need.TENANT_ADMIN),
        ("GET", "/admin/v2/namespaces/acme/ns/topics", Need.LIST_TOPICS),
        ("GET", "/admin/v2/persistent/acme/ns", Need.LIST_TOPICS),
        ("GET", "/admin/v2/non-persistent/acme/ns/partitioned", Need.LIST_TOPICS),
        ("GET", "/lookup/v2/topic/persistent/acme/ns/t", Need.TOPIC_LOOKUP),
        ("GET", "/admin/v2/persistent/acme/ns/t/partitions", Need.TOPIC_LOOKUP),
        ("GET", "/admin/v2/persistent/acme/ns/t/stats", Need.TOPIC_LOOKUP),
        ("PUT", "/admin/v2/persistent/acme/ns/t/partitions", Need.TOPIC_ADMIN),
        ("GET", "/admin/v2/persistent/acme/ns/t/subscriptions", Need.TOPIC_CONSUME),
        ("POST", "/admin/v2/persistent/acme/ns/t/subscription/s/skip_all", Need.TOPIC_CONSUME),
        ("DELETE", "/admin/v2/persistent/acme/ns/t/subscription/s", Need.TOPIC_CONSUME),
        ("DELETE", "/admin/v2/persistent/acme/ns/t", Need.TOPIC_ADMIN),
        ("POST", "/admin/v2/persistent/acme/ns/t/permissions/app", Need.TOPIC_ADMIN),
        ("PUT", "/admin/v2/persistent/acme/ns/t/unload", Need.TOPIC_ADMIN),
        ("GET", "/admin/v2/schemas/acme/ns/t/schema", Need.TOPIC_LOOKUP),
        ("POST", "/admin/v2/schemas/acme/ns/t/schema", Need.TOPIC_ADMIN),
        ("GET", "/admin/v2/something/new", Need.SUPER_USER),
    ],
)
def test_web_rule_table(method: str, path: str, need: Need) -> None:
    assert rule_for(method, path)[0] is need


def test_web_rule_table_names_the_resource() -> None:
    need, names = rule_for("POST", "/admin/v2/persistent/acme/ns/t/subscription/s/skip/3")
    assert need is Need.TOPIC_CONSUME
    assert names == {
        "domain": "persistent",
        "tenant": "acme",
        "namespace": "ns",
        "topic": "t",
        "subscription": "s",
    }

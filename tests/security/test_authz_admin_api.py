"""The permission endpoints of the admin API (authorization off): grant, list and revoke on
namespaces, topics, partitioned topics and subscriptions, over raw HTTP and PulsarAdmin."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import admin_json

from starquake.admin.client import PulsarAdmin, PulsarAdminError
from starquake.broker.embedded import EmbeddedBroker

NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default/orders"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("authz-admin") / "data"
    with EmbeddedBroker(data) as running:
        yield running


def test_namespace_grant_list_revoke(broker: EmbeddedBroker) -> None:
    assert admin_json(broker, "GET", f"{NS}/permissions") == (200, {})
    status, _ = admin_json(broker, "POST", f"{NS}/permissions/app", ["produce", "consume"])
    assert status == 204
    assert admin_json(broker, "GET", f"{NS}/permissions") == (
        200,
        {"app": ["consume", "produce"]},
    )
    # a second grant replaces the first
    assert admin_json(broker, "POST", f"{NS}/permissions/app", ["consume"])[0] == 204
    assert admin_json(broker, "GET", f"{NS}/permissions") == (200, {"app": ["consume"]})
    # the grants are part of the namespace's policies, as Pulsar keeps them
    _, policies = admin_json(broker, "GET", NS)
    assert policies["auth_policies"]["namespace_auth"] == {"app": ["consume"]}
    assert admin_json(broker, "DELETE", f"{NS}/permissions/app")[0] == 204
    assert admin_json(broker, "GET", f"{NS}/permissions") == (200, {})


@pytest.mark.parametrize(
    "body", [["produce", "fly"], "produce", {"produce": True}, [1], b"not json"]
)
def test_bad_actions_are_refused_with_400(broker: EmbeddedBroker, body: object) -> None:
    status, reply = admin_json(broker, "POST", f"{NS}/permissions/app", body)
    assert status == 400
    assert reply["reason"]
    status, reply = admin_json(broker, "POST", f"{TOPIC}/permissions/app", body)
    assert status == 400
    assert admin_json(broker, "GET", f"{NS}/permissions") == (200, {})


def test_every_pulsar_action_is_accepted(broker: EmbeddedBroker) -> None:
    actions = ["consume", "functions", "packages", "produce", "sinks", "sources"]
    assert admin_json(broker, "POST", f"{NS}/permissions/all", actions)[0] == 204
    assert admin_json(broker, "GET", f"{NS}/permissions") == (200, {"all": actions})
    assert admin_json(broker, "DELETE", f"{NS}/permissions/all")[0] == 204


def test_missing_namespace_is_404(broker: EmbeddedBroker) -> None:
    missing = "/admin/v2/namespaces/public/nope"
    assert admin_json(broker, "GET", f"{missing}/permissions")[0] == 404
    assert admin_json(broker, "POST", f"{missing}/permissions/app", ["produce"])[0] == 404
    assert admin_json(broker, "DELETE", f"{missing}/permissions/app")[0] == 404
    topic = "/admin/v2/persistent/public/nope/t"
    assert admin_json(broker, "GET", f"{topic}/permissions")[0] == 404
    assert admin_json(broker, "POST", f"{topic}/permissions/app", ["produce"])[0] == 404


def test_topic_permissions_include_the_namespace_grants(broker: EmbeddedBroker) -> None:
    assert admin_json(broker, "POST", f"{NS}/permissions/reader", ["consume"])[0] == 204
    assert admin_json(broker, "POST", f"{TOPIC}/permissions/writer", ["produce"])[0] == 204
    assert admin_json(broker, "POST", f"{TOPIC}/permissions/reader", ["produce"])[0] == 204
    assert admin_json(broker, "GET", f"{TOPIC}/permissions") == (
        200,
        {"reader": ["consume", "produce"], "writer": ["produce"]},
    )
    other = "/admin/v2/persistent/public/default/other"
    assert admin_json(broker, "GET", f"{other}/permissions") == (200, {"reader": ["consume"]})
    # revoking at the topic level leaves the namespace grant
    assert admin_json(broker, "DELETE", f"{TOPIC}/permissions/reader")[0] == 204
    assert admin_json(broker, "GET", f"{TOPIC}/permissions") == (
        200,
        {"reader": ["consume"], "writer": ["produce"]},
    )
    # a role with no topic-level grant: 412, as Pulsar answers
    status, reply = admin_json(broker, "DELETE", f"{TOPIC}/permissions/reader")
    assert status == 412
    assert "topic level" in reply["reason"]
    assert admin_json(broker, "DELETE", f"{TOPIC}/permissions/writer")[0] == 204
    assert admin_json(broker, "DELETE", f"{NS}/permissions/reader")[0] == 204
    assert admin_json(broker, "GET", f"{TOPIC}/permissions") == (200, {})


def test_partitioned_topic_grants_cover_each_partition(broker: EmbeddedBroker) -> None:
    base = "/admin/v2/persistent/public/default/parted"
    assert admin_json(broker, "PUT", f"{base}/partitions", 3)[0] == 204
    assert admin_json(broker, "POST", f"{base}/permissions/app", ["consume"])[0] == 204
    for index in range(3):
        partition = f"{base}-partition-{index}"
        assert admin_json(broker, "GET", f"{partition}/permissions") == (
            200,
            {"app": ["consume"]},
        )
    assert admin_json(broker, "DELETE", f"{base}/permissions/app")[0] == 204
    assert admin_json(broker, "GET", f"{base}-partition-1/permissions") == (200, {})
    _, policies = admin_json(broker, "GET", NS)
    assert policies["auth_policies"]["destination_auth"] == {}


def test_non_persistent_topics_have_permissions_too(broker: EmbeddedBroker) -> None:
    topic = "/admin/v2/non-persistent/public/default/np"
    assert admin_json(broker, "POST", f"{topic}/permissions/app", ["produce"])[0] == 204
    assert admin_json(broker, "GET", f"{topic}/permissions") == (200, {"app": ["produce"]})
    _, policies = admin_json(broker, "GET", NS)
    destination = policies["auth_policies"]["destination_auth"]
    assert destination == {"non-persistent://public/default/np": {"app": ["produce"]}}
    assert admin_json(broker, "DELETE", f"{topic}/permissions/app")[0] == 204


def test_subscription_permissions(broker: EmbeddedBroker) -> None:
    path = f"{NS}/permissions/subscription"
    assert admin_json(broker, "GET", path) == (200, {})
    assert admin_json(broker, "POST", f"{path}/billing", ["a", "b"])[0] == 204
    assert admin_json(broker, "GET", path) == (200, {"billing": ["a", "b"]})
    assert admin_json(broker, "POST", f"{path}/billing", "a")[0] == 400
    assert admin_json(broker, "DELETE", f"{NS}/permissions/billing/a")[0] == 204
    assert admin_json(broker, "GET", path) == (200, {"billing": ["b"]})
    assert admin_json(broker, "DELETE", f"{NS}/permissions/billing/b")[0] == 204
    assert admin_json(broker, "GET", path) == (200, {})
    assert admin_json(broker, "DELETE", f"{NS}/permissions/billing/b")[0] == 404


def test_pulsar_admin_client(broker: EmbeddedBroker) -> None:
    admin = PulsarAdmin(broker.web_service_url)
    admin.namespaces.grant_permission("public/default", "svc", ["produce"])
    assert admin.namespaces.permissions("public/default") == {"svc": ["produce"]}
    admin.topics.grant_permission("orders", "svc", ["consume"])
    assert admin.topics.permissions("persistent://public/default/orders") == {
        "svc": ["consume", "produce"]
    }
    admin.topics.revoke_permission("orders", "svc")
    admin.namespaces.revoke_permission("public/default", "svc")
    assert admin.namespaces.permissions("public/default") == {}
    admin.namespaces.grant_subscription_permission("public/default", "sub", ["svc"])
    assert admin.namespaces.subscription_permissions("public/default") == {"sub": ["svc"]}
    admin.namespaces.revoke_subscription_permission("public/default", "sub", "svc")
    assert admin.namespaces.subscription_permissions("public/default") == {}
    with pytest.raises(PulsarAdminError) as refused:
        admin.namespaces.grant_permission("public/default", "svc", ["write"])
    assert refused.value.status == 400


def test_grants_survive_a_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data") as first:
        assert admin_json(first, "POST", f"{NS}/permissions/app", ["produce"])[0] == 204
        assert admin_json(first, "POST", f"{TOPIC}/permissions/app", ["consume"])[0] == 204
    with EmbeddedBroker(tmp_path / "data") as second:
        assert admin_json(second, "GET", f"{NS}/permissions") == (200, {"app": ["produce"]})
        assert admin_json(second, "GET", f"{TOPIC}/permissions") == (
            200,
            {"app": ["consume", "produce"]},
        )

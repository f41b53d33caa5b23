"""``starquake admin namespaces|topics grant-permission | revoke-permission | permissions``
against a real broker."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner

from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli


def _admin(broker: EmbeddedBroker, *args: str) -> tuple[int, Any, str]:
    result = CliRunner().invoke(
        cli, ["admin", "--admin-url", broker.web_service_url, "--output", "json", *args]
    )
    out = json.loads(result.stdout) if result.stdout.strip() else None
    return result.exit_code, out, result.stderr


def test_namespace_permissions(broker: EmbeddedBroker) -> None:
    ns = "public/default"
    assert _admin(broker, "namespaces", "permissions", ns)[:2] == (0, {})
    grant = ["namespaces", "grant-permission", ns, "--role", "app"]
    assert _admin(broker, *grant, "--actions", "produce,consume")[:2] == (0, None)
    assert _admin(broker, "namespaces", "permissions", ns)[:2] == (
        0,
        {"app": ["consume", "produce"]},
    )
    assert _admin(broker, "namespaces", "revoke-permission", ns, "--role", "app")[:2] == (0, None)
    assert _admin(broker, "namespaces", "permissions", ns)[:2] == (0, {})


def test_topic_permissions(broker: EmbeddedBroker) -> None:
    topic = "public/default/cli-perm"
    grant = ["topics", "grant-permission", topic, "--role", "r"]
    assert _admin(broker, *grant, "--actions", "consume", "--actions", "produce")[0] == 0
    assert _admin(broker, "topics", "permissions", topic)[:2] == (0, {"r": ["consume", "produce"]})
    assert _admin(broker, "topics", "revoke-permission", topic, "--role", "r")[0] == 0
    assert _admin(broker, "topics", "permissions", topic)[:2] == (0, {})
    # revoking what is not granted on the topic: the broker's 412, exit status 1
    code, _, err = _admin(broker, "topics", "revoke-permission", topic, "--role", "r")
    assert code == 1 and "412" in err


def test_subscription_permissions(broker: EmbeddedBroker) -> None:
    ns = "public/default"
    grant = ["namespaces", "grant-subscription-permission", ns, "--subscription", "s"]
    assert _admin(broker, *grant, "--roles", "a,b")[0] == 0
    status = broker.service.resources.policy(ns, "auth_policies")
    assert status["subscription_auth_roles"] == {"s": ["a", "b"]}
    revoke = ["namespaces", "revoke-subscription-permission", ns, "--subscription", "s"]
    assert _admin(broker, *revoke, "--role", "a")[0] == 0
    status = broker.service.resources.policy(ns, "auth_policies")
    assert status["subscription_auth_roles"] == {"s": ["b"]}


def test_unknown_actions_are_a_usage_error(broker: EmbeddedBroker) -> None:
    grant = ["namespaces", "grant-permission", "public/default", "--role", "app"]
    code, _, err = _admin(broker, *grant, "--actions", "produce,write")
    assert code == 2 and "write" in err and "consume" in err
    assert _admin(broker, "namespaces", "permissions", "public/default")[:2] == (0, {})


def test_missing_namespace_fails(broker: EmbeddedBroker) -> None:
    code, _, err = _admin(broker, "namespaces", "permissions", "public/missing")
    assert code == 1 and "404" in err

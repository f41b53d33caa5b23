"""``starquake admin topics|namespaces set-X|get-X|remove-X`` against a real broker: the
values reach the broker as Pulsar's admin API stores them, and refusals exit non-zero."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_http import admin_json
from click.testing import CliRunner

from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli


@pytest.fixture
def policy_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", maxUnackedMessagesPerConsumer=321) as broker:
        yield broker


def _run(broker: EmbeddedBroker, *args: str) -> tuple[int, Any, str]:
    result = CliRunner().invoke(
        cli, ["admin", "--admin-url", broker.web_service_url, "--output", "json", *args]
    )
    out = json.loads(result.stdout) if result.stdout.strip() else None
    return result.exit_code, out, result.stderr


def _ok(broker: EmbeddedBroker, *args: str) -> Any:
    code, out, err = _run(broker, *args)
    assert code == 0, (args, err)
    return out


def test_topic_policy_commands(policy_broker: EmbeddedBroker) -> None:
    b = policy_broker
    topic = f"public/default/cli-{uuid.uuid4().hex[:8]}"
    _ok(b, "topics", "create", topic)

    _ok(b, "topics", "set-retention", topic, "--size", "10M", "--time", "3h")
    assert _ok(b, "topics", "get-retention", topic) == {
        "retentionTimeInMinutes": 180,
        "retentionSizeInMB": 10,
    }
    _ok(b, "topics", "set-message-ttl", topic, "-t", "2m")
    assert _ok(b, "topics", "get-message-ttl", topic) == 120
    _ok(b, "topics", "set-deduplication", topic, "--enable")
    assert _ok(b, "topics", "get-deduplication", topic) is True
    _ok(b, "topics", "set-max-producers", topic, "-p", "3")
    _ok(b, "topics", "set-max-consumers", topic, "-c", "4")
    _ok(b, "topics", "set-max-unacked-messages-on-consumer", topic, "-m", "9")
    _ok(b, "topics", "set-max-unacked-messages-on-subscription", topic, "--maxNum", "90")
    _ok(b, "topics", "set-compaction-threshold", topic, "-t", "1M")
    _ok(b, "topics", "set-delayed-delivery", topic, "-e", "-t", "2s", "-md", "1h")
    _ok(
        b,
        "topics",
        "set-inactive-topic-policies",
        topic,
        "-e",
        "-t",
        "10m",
        "-m",
        "delete_when_subscriptions_caught_up",
    )
    _ok(b, "topics", "set-backlog-quota", topic, "-l", "2M", "-p", "producer_exception")
    _ok(b, "topics", "set-backlog-quota", topic, "-lt", "1h", "-p", "consumer_backlog_eviction")
    _ok(
        b,
        "topics",
        "set-backlog-quota",
        topic,
        "-lt",
        "30",
        "-p",
        "producer_request_hold",
        "-t",
        "message_age",
    )

    status, stored = admin_json(b, "GET", f"/admin/v2/persistent/{topic}/maxProducers")
    assert (status, stored) == (200, 3)
    assert _ok(b, "topics", "get-max-consumers", topic) == 4
    assert _ok(b, "topics", "get-max-unacked-messages-on-consumer", topic) == 9
    assert _ok(b, "topics", "get-max-unacked-messages-on-subscription", topic) == 90
    assert _ok(b, "topics", "get-compaction-threshold", topic) == 1024 * 1024
    assert _ok(b, "topics", "get-delayed-delivery", topic) == {
        "active": True,
        "tickTime": 2000,
        "maxDeliveryDelayInMillis": 3_600_000,
    }
    assert _ok(b, "topics", "get-inactive-topic-policies", topic) == {
        "deleteWhileInactive": True,
        "maxInactiveDurationSeconds": 600,
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
    }
    assert _ok(b, "topics", "get-backlog-quotas", topic) == {
        "destination_storage": {
            "limitSize": -1,
            "limitTime": 3600,
            "policy": "consumer_backlog_eviction",
        },
        "message_age": {"limitSize": -1, "limitTime": 30, "policy": "producer_request_hold"},
    }

    # removing: nothing is set on the topic any more, --applied shows what is in force
    for noun in (
        "retention",
        "message-ttl",
        "deduplication",
        "max-producers",
        "max-consumers",
        "max-unacked-messages-on-consumer",
        "max-unacked-messages-on-subscription",
        "compaction-threshold",
        "delayed-delivery",
        "inactive-topic-policies",
    ):
        _ok(b, "topics", f"remove-{noun}", topic)
        assert _ok(b, "topics", f"get-{noun}", topic) is None, noun
    assert _ok(b, "topics", "get-max-unacked-messages-on-consumer", topic, "--applied") == 321
    _ok(b, "topics", "remove-backlog-quota", topic, "-t", "message_age")
    _ok(b, "topics", "remove-backlog-quota", topic)
    assert _ok(b, "topics", "get-backlog-quotas", topic) == {}


def test_namespace_policy_commands(policy_broker: EmbeddedBroker) -> None:
    b = policy_broker
    ns = f"public/ns-{uuid.uuid4().hex[:8]}"
    _ok(b, "namespaces", "create", ns)
    _ok(b, "namespaces", "set-backlog-quota", ns, "-l", "1G", "-p", "producer_request_hold")
    assert _ok(b, "namespaces", "get-backlog-quotas", ns) == {
        "destination_storage": {
            "limitSize": 1 << 30,
            "limitTime": -1,
            "policy": "producer_request_hold",
        }
    }
    _ok(b, "namespaces", "set-compaction-threshold", ns, "--threshold", "100M")
    _ok(b, "namespaces", "set-max-unacked-messages-per-consumer", ns, "-c", "5")
    _ok(b, "namespaces", "set-max-unacked-messages-per-subscription", ns, "-c", "50")
    _ok(b, "namespaces", "set-max-producers-per-topic", ns, "-p", "2")
    _ok(b, "namespaces", "set-max-consumers-per-topic", ns, "-c", "3")
    _ok(b, "namespaces", "set-delayed-delivery", ns, "--disable")
    _ok(
        b,
        "namespaces",
        "set-inactive-topic-policies",
        ns,
        "-d",
        "-t",
        "60",
        "-m",
        "delete_when_no_subscriptions",
    )
    status, policies = admin_json(b, "GET", f"/admin/v2/namespaces/{ns}")
    assert status == 200
    assert policies["compaction_threshold"] == 100 * 1024 * 1024
    assert policies["max_unacked_messages_per_consumer"] == 5
    assert policies["max_unacked_messages_per_subscription"] == 50
    assert policies["max_producers_per_topic"] == 2
    assert policies["max_consumers_per_topic"] == 3
    assert policies["delayed_delivery_policies"] == {
        "active": False,
        "tickTime": 1000,
        "maxDeliveryDelayInMillis": 0,
    }
    assert policies["inactive_topic_policies"]["deleteWhileInactive"] is False

    # a topic of the namespace sees them as applied values
    topic = f"{ns}/t"
    _ok(b, "topics", "create", topic)
    assert _ok(b, "topics", "get-max-unacked-messages-on-consumer", topic, "-ap") == 5
    assert _ok(b, "topics", "get-compaction-threshold", topic, "-ap") == 100 * 1024 * 1024

    for noun in (
        "compaction-threshold",
        "max-unacked-messages-per-consumer",
        "max-unacked-messages-per-subscription",
        "max-producers-per-topic",
        "max-consumers-per-topic",
        "delayed-delivery",
        "inactive-topic-policies",
    ):
        _ok(b, "namespaces", f"remove-{noun}", ns)
        assert _ok(b, "namespaces", f"get-{noun}", ns) is None, noun
    _ok(b, "namespaces", "remove-backlog-quota", ns)
    assert _ok(b, "namespaces", "get-backlog-quotas", ns) == {}


def test_refusals_exit_non_zero(policy_broker: EmbeddedBroker) -> None:
    b = policy_broker
    code, _, err = _run(b, "topics", "set-max-producers", "public/default/missing", "-p", "1")
    assert code == 1 and "404" in err
    topic = f"public/default/cli-{uuid.uuid4().hex[:8]}"
    _ok(b, "topics", "create", topic)
    code, _, err = _run(b, "topics", "set-retention", topic, "--size", "0", "--time", "1h")
    assert code == 1 and "single time or size limit to 0" in err
    code, _, err = _run(b, "topics", "set-deduplication", topic)
    assert code == 2 and "--enable" in err
    code, _, err = _run(b, "topics", "set-backlog-quota", topic, "-p", "producer_exception")
    assert code == 2 and "--limit" in err
    code, _, err = _run(b, "topics", "set-compaction-threshold", topic, "-t", "lots")
    assert code == 2 and "invalid size" in err
    code, _, err = _run(b, "namespaces", "get-backlog-quotas", "public/nowhere")
    assert code == 1 and "404" in err

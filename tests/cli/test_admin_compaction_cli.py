"""``starquake admin topics compact`` and ``compaction-status`` against a real broker."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pulsar
from click.testing import CliRunner
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli


def _admin(broker: EmbeddedBroker, *args: str) -> tuple[int, Any, str]:
    result = CliRunner().invoke(
        cli, ["admin", "--admin-url", broker.web_service_url, "--output", "json", *args]
    )
    out = json.loads(result.stdout) if result.stdout.strip() else None
    return result.exit_code, out, result.stderr


def test_compact_and_wait_for_the_status(broker: EmbeddedBroker) -> None:
    topic = f"public/default/cli-compact-{uuid.uuid4().hex[:8]}"
    client = official_client(broker)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(50):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 5}")

    assert _admin(broker, "topics", "compaction-status", topic)[:2] == (
        0,
        {"status": "NOT_RUN", "lastError": ""},
    )
    assert _admin(broker, "topics", "compact", topic)[:2] == (0, None)
    code, status, _ = _admin(broker, "topics", "compaction-status", topic, "--wait-complete")
    assert (code, status) == (0, {"status": "SUCCESS", "lastError": ""})

    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(5000).data())
    assert got == [f"v{i}".encode() for i in range(45, 50)]
    client.close()


def test_compacting_an_unknown_topic_fails(broker: EmbeddedBroker) -> None:
    code, _, err = _admin(broker, "topics", "compact", "public/default/never-created")
    assert code != 0 and "not" in err.lower()
    code, _, err = _admin(broker, "topics", "compaction-status", "bad:/name")
    assert code == 2 and "TOPIC" in err

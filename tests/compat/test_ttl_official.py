"""Message TTL with the official client: unacknowledged messages older than the TTL are
expired by the periodic check, counted in the stats, and a consumer then gets only newer ones."""

from __future__ import annotations

import time
from pathlib import Path

import pulsar
from admin_http import admin_json
from official_client import drain, official_client

from starquake.broker.embedded import EmbeddedBroker


def test_expired_messages_are_skipped_and_counted(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", messageExpiryCheckIntervalInMinutes=0.003) as broker:
        client = official_client(broker)
        try:
            client.subscribe(topic, "late").close()
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(5):
                producer.send(b"old-%d" % i)
            status, _ = admin_json(
                broker, "POST", "/admin/v2/namespaces/public/default/messageTTL", 1
            )
            assert status == 204
            stats_path = f"/admin/v2/{topic.replace('://', '/')}/stats"
            deadline = time.monotonic() + 15
            while True:
                stats = admin_json(broker, "GET", stats_path)[1]["subscriptions"]["late"]
                if stats["msgBacklog"] == 0:
                    break
                assert time.monotonic() < deadline, "the TTL never expired the messages"
                time.sleep(0.1)
            assert stats["totalMsgExpired"] == 5
            assert stats["lastExpireTimestamp"] > 0
            for i in range(3):
                producer.send(b"new-%d" % i)
            consumer = client.subscribe(topic, "late")
            assert drain(consumer) == [b"new-0", b"new-1", b"new-2"]
            # a subscription without a TTL-expired backlog is untouched: a reader sees all
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            seen = []
            while reader.has_message_available():
                seen.append(reader.read_next(timeout_millis=5000).data())
            assert len(seen) == 8
        finally:
            client.close()

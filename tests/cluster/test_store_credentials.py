"""Brokers log in to JetStream with the credentials of ``metadataStoreUrl``
(``nats://user:password@host:port[,host:port]``, the same for every host): with the right ones
the broker joins and serves; with wrong ones it exits with one line naming the store. The
password never appears in the broker's log nor in its runtime configuration."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pulsar
import pytest
from admin_http import admin_json
from broker_process import BrokerProcess

from starquake.broker.config_ranges import nats_servers
from starquake.cluster.nodes import jetstream_nodes
from starquake.common.redact import redact_url

PASSWORD = "s3cret-Pa55"


def test_credentials_go_to_every_host_and_are_hidden_in_text() -> None:
    assert nats_servers(f"nats://sq:{PASSWORD}@h1:1,h2:2") == [
        f"nats://sq:{PASSWORD}@h1:1",
        f"nats://sq:{PASSWORD}@h2:2",
    ]
    assert nats_servers("nats://tok@h1:1,other:x@h2:2") == [
        "nats://tok@h1:1",
        "nats://other:x@h2:2",
    ]
    assert redact_url(f"nats://sq:{PASSWORD}@h1:1,h2:2") == "nats://sq:***@h1:1,h2:2"
    assert redact_url("nats://token@h1:1") == "nats://***@h1:1"
    assert redact_url("nats://h1:1,h2:2") == "nats://h1:1,h2:2"


@pytest.mark.timeout(240)
def test_a_broker_logs_in_to_jetstream_and_never_shows_the_password(tmp_path: Path) -> None:
    (node,) = jetstream_nodes(1, tmp_path / "jetstream")
    node.user, node.password = "sq", PASSWORD
    node.start()
    host = node.url.removeprefix("nats://")
    good = BrokerProcess(
        tmp_path / "good",
        f"metadataStoreUrl=nats://sq:{PASSWORD}@{host}",
        "clusterName=secure",
        log_level="INFO",
    )
    wrong = BrokerProcess(
        tmp_path / "wrong",
        f"metadataStoreUrl=nats://sq:not-{PASSWORD}@{host}",
        "metadataStoreOperationTimeoutSeconds=3",
        log_level="INFO",
    )
    try:
        good.start(timeout=60)
        client = pulsar.Client(good.url, operation_timeout_seconds=30)
        try:
            producer = client.create_producer("persistent://public/default/secured")
            producer.send(b"in")
            reader = client.create_reader(
                "persistent://public/default/secured", pulsar.MessageId.earliest
            )
            assert reader.read_next(10_000).data() == b"in"
        finally:
            client.close()
        status, settings = admin_json(good, "GET", "/admin/v2/brokers/configuration/runtime")
        assert status == 200, settings
        assert settings["metadataStoreUrl"] == f"nats://sq:***@{host}"

        with contextlib.suppress(RuntimeError):  # it may exit before or after it listens
            wrong.start(timeout=60)
        assert wrong.proc is not None and wrong.proc.wait(60) != 0
        assert f"metadataStoreUrl nats://sq:***@{host}: " in wrong.log()
        for broker in (good, wrong):
            assert PASSWORD not in broker.log()
    finally:
        good.cleanup()
        wrong.cleanup()
        node.kill()

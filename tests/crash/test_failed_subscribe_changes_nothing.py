"""A subscription whose creation could not be stored does not exist, then or after kill -9."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pulsar
from admin_http import admin_json
from broker_process import BrokerProcess, close_after_kill, process_client
from stored_cursors import subscription_stored

TOPIC = "persistent://public/default/failed-subscribe"
ADMIN = "/admin/v2/persistent/public/default/failed-subscribe"


def _set_faults(path: Path, **faults: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(faults))
    tmp.replace(path)


def test_a_failed_subscribe_or_create_leaves_no_subscription(tmp_path: Path) -> None:
    control = tmp_path / "faults.json"
    broker = BrokerProcess(tmp_path / "data", env={"STARQUAKE_STORAGE_FAULTS": str(control)})
    broker.start()
    try:
        client = process_client(broker.url, operation_timeout_seconds=10)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        producer.send(b"m0")
        _set_faults(control, fail_metadata=errno.ENOSPC)  # the metadata store's disk is full
        failed = False
        try:
            client.subscribe(TOPIC, "by-subscribe")
        except pulsar.PulsarException:
            failed = True
        assert failed, "the subscribe was answered with success while nothing could be stored"
        status, body = admin_json(broker, "PUT", f"{ADMIN}/subscription/by-admin")
        assert status >= 500, (status, body)
        status, subs = admin_json(broker, "GET", f"{ADMIN}/subscriptions")
        assert status == 200 and subs == []
        _set_faults(control)  # room again: a retried write must not create them after all
        producer.send(b"m1")  # (a commit and a periodic cursor flush go by)
        status, subs = admin_json(broker, "GET", f"{ADMIN}/subscriptions")
        assert subs == []
        broker.kill()
        close_after_kill(client)
        broker.env = None
        broker.start()
        status, subs = admin_json(broker, "GET", f"{ADMIN}/subscriptions")
        assert status == 200 and subs == [], subs
        assert not subscription_stored(broker.data_dir, "by-subscribe")
        assert not subscription_stored(broker.data_dir, "by-admin")
    finally:
        broker.cleanup()

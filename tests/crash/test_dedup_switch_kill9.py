"""Deduplication switched on and off in place on a live topic, then kill -9 of the broker
process: after the restart the broker still knows each producer's last sequence id."""

from __future__ import annotations

from pathlib import Path

import pulsar
from admin_http import admin_json
from broker_process import BrokerProcess, close_after_kill, process_client, read_all

TOPIC = "persistent://public/default/dedup-switch"
NS = "/admin/v2/namespaces/public/default/deduplication"


def _switch(proc: BrokerProcess, enabled: bool) -> None:
    assert admin_json(proc, "POST", NS, enabled)[0] == 204


def _send(client: pulsar.Client, sequence_id: int, payload: bytes) -> tuple[int, int]:
    producer = client.create_producer(TOPIC, producer_name="p", batching_enabled=False)
    receipt = producer.send(payload, sequence_id=sequence_id)
    producer.close()
    return receipt.ledger_id(), receipt.entry_id()


def test_state_of_an_in_place_switch_survives_kill9(tmp_path: Path) -> None:
    # a snapshot every 2 entries, so that the off switch has a stored snapshot to drop
    proc = BrokerProcess(tmp_path / "data", "brokerDeduplicationEntriesInterval=2")
    proc.start()
    try:
        client = process_client(proc.url)
        consumer = client.subscribe(TOPIC, "all", initial_position=pulsar.InitialPosition.Earliest)
        _send(client, 1, b"a")
        consumer.acknowledge(consumer.receive(5000))  # everything consumed
        _switch(proc, True)  # nothing stored for it yet: the log is replayed
        assert _send(client, 1, b"a-dup") == (-1, -1)
        proc.kill()
        close_after_kill(client)
        proc.start()  # no snapshot: the restart replays the log
        client = process_client(proc.url)
        assert _send(client, 1, b"a-dup") == (-1, -1)
        for seq in (2, 3, 4):
            _send(client, seq, f"m{seq}".encode())  # snapshots stored along the way
        _switch(proc, False)  # drops the state and the stored snapshot
        assert _send(client, 2, b"old-id") != (-1, -1)  # off: stored
        _switch(proc, True)  # the replayed log's latest entry of "p" carries id 2
        assert _send(client, 2, b"old-id-again") == (-1, -1)
        assert _send(client, 3, b"n3") != (-1, -1)
        proc.kill()
        close_after_kill(client)
        proc.start()
        client = process_client(proc.url)
        assert _send(client, 3, b"n3-dup") == (-1, -1)
        assert _send(client, 4, b"n4") != (-1, -1)
        client.close()
        stored = [data for data, _ in read_all(proc.url, TOPIC)]
        assert stored == [b"a", b"m2", b"m3", b"m4", b"old-id", b"n3", b"n4"]
    finally:
        proc.cleanup()

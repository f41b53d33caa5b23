"""The official client's key-based batches on a topic with deduplication, across a clean
restart (state from the snapshot taken at shutdown) and a kill -9 (state replayed from the
log).

The official client sends each key's batch under its lowest sequence id, without
``highest_sequence_id``, in the order of those ids: the broker counts each batch as that id
alone (as Pulsar's does), so interleaved batches are all stored, and a restarted broker
recovers the same state from the snapshot or from the entries' metadata. A producer's last
sequence id is therefore the lowest id of its last batch: resending stored batches is
dropped, batches with new ids are stored.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pulsar
from broker_process import BrokerProcess, process_client, read_all

TOPIC = "persistent://public/default/kb-dedup-restart"
KEYS = 5
ROUND = 40  # ids per round: 8 per key, keys taking turns
# ids start at 1: the official client takes an explicit sequence_id=0 for "none given"
FIRST = 1


def _send_round(url: str, first: int) -> tuple[int, list[tuple[int, int]]]:
    """Send ids ``first`` .. ``first + ROUND - 1`` (key ``k{id % KEYS}``) through one flush
    of a key-based batching producer named ``kb``; return the last sequence id the broker
    reported when the producer was created and the ids the sends completed with."""
    client = process_client(url)
    try:
        producer = client.create_producer(
            TOPIC,
            producer_name="kb",
            batching_enabled=True,
            batching_type=pulsar.BatchingType.KeyBased,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=60_000,  # one batch per key, sent by the flush
        )
        last = producer.last_sequence_id()
        ids: list[tuple[int, int]] = []
        lock = threading.Lock()

        def done(result: Any, msg_id: Any) -> None:
            assert result == pulsar.Result.Ok
            with lock:
                ids.append((msg_id.ledger_id(), msg_id.entry_id()))

        for seq in range(first, first + ROUND):
            producer.send_async(
                f"v{seq}".encode(), done, partition_key=f"k{seq % KEYS}", sequence_id=seq
            )
        producer.flush()
        deadline = time.monotonic() + 10
        while len(ids) < ROUND and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ids) == ROUND
        producer.close()
        return last, ids
    finally:
        client.close()


def _stored_ids(url: str) -> list[int]:
    return [int(data.decode()[1:]) for data, _ in read_all(url, TOPIC)]


def _check_stored(ids: list[tuple[int, int]]) -> None:
    assert (-1, -1) not in ids


def _check_dropped(ids: list[tuple[int, int]]) -> None:
    assert ids == [(-1, -1)] * ROUND


def test_interleaved_batches_survive_a_restart_and_a_kill9(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", "brokerDeduplicationEnabled=true")
    proc.start()
    try:
        last, ids = _send_round(proc.url, FIRST)
        assert last == -1
        _check_stored(ids)
        assert sorted(_stored_ids(proc.url)) == list(range(FIRST, FIRST + ROUND))

        proc.stop()  # clean stop: a snapshot of the state is stored
        proc.start()
        last, ids = _send_round(proc.url, FIRST)  # the same batches again
        assert last == KEYS  # the last batch went out under its lowest id, 5 (k0: 5, 10, ...)
        _check_dropped(ids)
        last, ids = _send_round(proc.url, FIRST + ROUND)
        assert last == KEYS
        _check_stored(ids)

        proc.kill()  # no snapshot since the restart: the log after it is replayed
        proc.start()
        last, ids = _send_round(proc.url, FIRST + ROUND)
        assert last == ROUND + KEYS
        _check_dropped(ids)
        last, ids = _send_round(proc.url, FIRST + 2 * ROUND)
        assert last == ROUND + KEYS
        _check_stored(ids)

        stored = _stored_ids(proc.url)
        assert sorted(stored) == list(range(FIRST, FIRST + 3 * ROUND))
        for key in range(KEYS):  # each key's messages in the order they were sent
            order = [seq for seq in stored if seq % KEYS == key]
            assert order == sorted(order)
    finally:
        proc.cleanup()

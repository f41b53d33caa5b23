"""A really full disk (a small tmpfs) under a real broker process."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pulsar
from broker_process import BrokerProcess, process_client
from disk_usage import fill_disk, tiny_disk
from official_client import drain
from polling import wait_for

from starquake.storage.quarantine import quarantine

TOPIC = "persistent://public/default/full"
EARLIEST = pulsar.InitialPosition.Earliest


def test_a_full_disk_still_lets_consumers_drain_the_topic(tmp_path: Path) -> None:
    with tiny_disk(tmp_path / "disk", "8m") as disk:
        broker = BrokerProcess(disk / "data")
        broker.start()
        try:
            client = process_client(broker.url)
            client.subscribe(TOPIC, "sub", initial_position=EARLIEST)
            producer = client.create_producer(
                TOPIC, batching_enabled=False, send_timeout_millis=3000
            )
            filler = fill_disk(disk, 300_000)
            receipted = []
            payload = b"x" * 20_000
            ids: list[pulsar.MessageId] = []
            for i in range(100):
                if not _receipted(producer, payload + str(i).encode(), disk, ids):
                    break
                receipted.append(payload + str(i).encode())
            else:
                raise AssertionError("the disk never filled up")
            assert receipted
            client.close()  # the send left pending may or may not be stored
            # the disk is still full: the topic reloads and every receipted message is read
            client = process_client(broker.url)
            consumer = client.subscribe(TOPIC, "sub")
            got = drain(consumer, first_within_ms=10_000)
            assert got[: len(receipted)] == receipted
            client.close()
            # room again: publishing works
            filler.unlink()
            client = process_client(broker.url)
            producer = client.create_producer(TOPIC, batching_enabled=False)
            wait_for(lambda: _sent(producer, ids), "a send once the disk has room")
            client.close()
            # every retry on the full disk failed in the same new ledger, which the first send
            # with room went to: not a new ledger id per retry
            assert ids[-1].ledger_id() <= ids[-2].ledger_id() + 1, (ids[-2], ids[-1])
        finally:
            broker.cleanup()


def _receipted(
    producer: pulsar.Producer, data: bytes, disk: Path, ids: list[pulsar.MessageId]
) -> bool:
    """Send ``data``: True once receipted, False once it failed or cannot be stored (the
    disk has less room than the message, and no receipt came).

    A send on a full disk is refused by the broker again and again (the official client
    reconnects and re-sends) and takes minutes to time out: waiting for it checks nothing
    the free space does not show."""
    results: list[pulsar.Result] = []
    done = threading.Event()

    def callback(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
        results.append(result)
        if result == pulsar.Result.Ok:
            ids.append(message_id)
        done.set()

    producer.send_async(data, callback)
    deadline = time.monotonic() + 60
    while not done.wait(0.5):
        assert time.monotonic() < deadline, "no receipt though the disk has room"
        if shutil.disk_usage(disk).free < len(data):
            return False
    return results[0] == pulsar.Result.Ok


def _sent(producer: pulsar.Producer, ids: list[pulsar.MessageId]) -> bool:
    try:
        ids.append(producer.send(b"after"))
    except pulsar.PulsarException:
        return False
    return True


def test_quarantine_names_never_collide(tmp_path: Path) -> None:
    paths = {quarantine(tmp_path, "1.log.tail-16", data=b"tail") for _ in range(5)}
    assert len(paths) == 5
    directory = tmp_path / quote(TOPIC, safe="")
    directory.mkdir()
    for _ in range(3):
        (directory / "9.log").write_bytes(b"moved")
        paths.add(quarantine(directory, "9.log", source=directory / "9.log"))
    assert len(paths) == 8 and all(p.read_bytes() in (b"tail", b"moved") for p in paths)

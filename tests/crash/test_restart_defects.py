"""Regression tests, each through a real broker process, for defects that lost or skipped data."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pulsar
import pytest
from broker_process import BrokerProcess, close_after_kill, process_client, read_all
from official_client import drain
from polling import wait_for
from stored_cursors import wait_acknowledgments_stored

from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import FrameDecoder, encode_command

TOPIC = "persistent://public/default/defects"
EARLIEST = pulsar.InitialPosition.Earliest
T = pb.BaseCommand


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    yield proc
    proc.cleanup()


def test_ack_of_an_unwritten_position_skips_nothing(broker: BrokerProcess) -> None:
    client = process_client(broker.url)
    consumer = client.subscribe(
        TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared, initial_position=EARLIEST
    )
    producer = client.create_producer(TOPIC, batching_enabled=False)
    first = producer.send(b"m0")
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    # acknowledge entries 3..5 of the current ledger before they exist
    for entry_id in (3, 4, 5):
        consumer.acknowledge(pulsar.MessageId(-1, first.ledger_id(), entry_id, -1))
    # closing sends the grouped acks, so the broker has them before the entries exist
    consumer.close()
    consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
    sent = [first] + [producer.send(f"m{i}".encode()) for i in range(1, 8)]
    assert sorted(drain(consumer)) == [f"m{i}".encode() for i in range(1, 8)]
    wait_acknowledgments_stored(
        broker.data_dir, "sub", [(m.ledger_id(), m.entry_id()) for m in sent]
    )
    client.close()
    broker.stop()
    broker.start()
    client = process_client(broker.url)
    consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert drain(consumer) == []
    client.close()


def test_a_second_broker_on_the_same_data_directory_fails_at_once(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    second = BrokerProcess(broker.data_dir)
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="exited during start-up"):
            second.start()
    finally:
        second.cleanup()
    assert time.monotonic() - started < 10
    assert "is in use by another broker" in second.log()
    assert f"pid {broker.proc.pid if broker.proc else 0}" in second.log()
    # the first broker is unharmed
    client = process_client(broker.url)
    client.create_producer(TOPIC).send(b"still-here")
    client.close()


def test_a_topic_with_a_300_character_name_survives_a_restart(broker: BrokerProcess) -> None:
    topic = "persistent://public/default/" + "n" * 272
    assert len(topic) == 300
    client = process_client(broker.url)
    consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
    client.create_producer(topic).send(b"long")
    assert consumer.receive(timeout_millis=5000).data() == b"long"
    client.close()
    broker.kill()
    broker.start()
    client = process_client(broker.url)
    consumer = client.subscribe(topic, "sub")
    assert consumer.receive(timeout_millis=5000).data() == b"long"
    client.close()


def test_a_topic_that_cannot_load_gets_a_clear_error_at_once(broker: BrokerProcess) -> None:
    # A plain file where the topic's directory belongs: loading fails with an OSError.
    name = "persistent%3A%2F%2Fpublic%2Fdefault%2Fblocked"
    (broker.data_dir / "ledgers" / name).write_bytes(b"not a directory")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        decoder = FrameDecoder()
        sock.sendall(commands.connect("defects-test"))
        subscribe = T(type=T.SUBSCRIBE)
        subscribe.subscribe.topic = "persistent://public/default/blocked"
        subscribe.subscribe.subscription = "sub"
        subscribe.subscribe.subType = pb.CommandSubscribe.Exclusive
        subscribe.subscribe.consumer_id = 1
        subscribe.subscribe.request_id = 7
        sock.sendall(encode_command(subscribe))
        replies: list[pb.BaseCommand] = []
        while not any(r.type == T.ERROR for r in replies):
            data = sock.recv(65536)  # times out (fails) after 5 s without an answer
            assert data, "the broker closed the connection instead of answering"
            replies.extend(frame.command for frame in decoder.feed(data))
    error = next(r.error for r in replies if r.type == T.ERROR)
    assert error.request_id == 7
    assert error.error == pb.PersistenceError
    assert "Cannot load topic persistent://public/default/blocked" in error.message
    assert "Not a directory" in broker.log()
    client = process_client(broker.url)
    client.create_producer(TOPIC).send(b"others are served")
    client.close()


def test_dedup_remembers_producers_after_trim_and_kill9(tmp_path: Path) -> None:
    # Ledgers of 5 entries and a deduplication snapshot every 20 entries: "early" writes entries
    # 0-9, "writer" entries 10-49. Once all is acknowledged, the ledgers up to the second
    # snapshot (after entry 39) are trimmed, so "early"'s sequence ids survive only in the
    # snapshot; the ledgers after it are kept for the replay.
    broker = BrokerProcess(
        tmp_path / "data",
        "brokerDeduplicationEnabled=true",
        "brokerDeduplicationEntriesInterval=20",
        "managedLedgerMaxEntriesPerLedger=5",
        "managedLedgerMinLedgerRolloverTimeMinutes=0",
        "managedLedgerTrimIntervalSeconds=0.2",
    )
    broker.start()
    try:
        client = process_client(broker.url)
        consumer = client.subscribe(TOPIC, "sub", initial_position=EARLIEST)
        early = client.create_producer(TOPIC, producer_name="early", batching_enabled=False)
        writer = client.create_producer(TOPIC, producer_name="writer", batching_enabled=False)
        ids = [early.send(f"e{i}".encode(), sequence_id=i) for i in range(10)]
        ids += [writer.send(f"w{i}".encode(), sequence_id=i) for i in range(40)]
        assert len(drain(consumer)) == 50
        wait_acknowledgments_stored(
            broker.data_dir, "sub", [(ids[-1].ledger_id(), ids[-1].entry_id())]
        )
        snapshotted = {m.ledger_id() for m in ids[:40]}
        after_snapshot = {m.ledger_id() for m in ids[40:]}
        assert len(snapshotted) == 8 and not snapshotted & after_snapshot
        wait_for(
            lambda: not snapshotted & _ledger_ids(broker, TOPIC),
            "the ledgers up to the deduplication snapshot to be trimmed",
        )
        assert after_snapshot <= _ledger_ids(broker, TOPIC)  # the replay still needs them
        broker.kill()
        close_after_kill(client)

        broker.start()
        client = process_client(broker.url)
        early = client.create_producer(TOPIC, producer_name="early", batching_enabled=False)
        writer = client.create_producer(TOPIC, producer_name="writer", batching_enabled=False)
        assert early.last_sequence_id() == 9  # from the snapshot alone
        assert writer.last_sequence_id() == 39  # the snapshot, then the replay
        consumer = client.subscribe(TOPIC, "sub")
        for i in (3, 9):  # retries whose first copies were trimmed
            assert _receipt(early.send(f"e{i}".encode(), sequence_id=i)) == (-1, -1)
        early.send(b"e10", sequence_id=10)
        for i in range(35, 40):  # retries whose first copies are still stored
            assert _receipt(writer.send(f"w{i}".encode(), sequence_id=i)) == (-1, -1)
        writer.send(b"w40", sequence_id=40)
        assert drain(consumer) == [b"e10", b"w40"]
        client.close()
        # nothing lost, nothing stored twice: the kept ledgers, then the two new messages
        kept = [f"w{i}".encode() for i in range(30, 40)]
        assert _read_payloads(broker.url) == [*kept, b"e10", b"w40"]
    finally:
        broker.cleanup()


def _receipt(message_id: pulsar.MessageId) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


def _ledger_ids(broker: BrokerProcess, topic: str) -> set[int]:
    return {int(path.stem) for path in _ledger_files(broker, topic)}


def _ledger_files(broker: BrokerProcess, topic: str) -> list[Path]:
    directory = broker.data_dir / "ledgers" / quote(topic, safe="")
    return sorted(directory.glob("*.log"), key=lambda p: int(p.stem))


def _record_offsets(path: Path) -> list[int]:
    """Offsets of the records of a ledger file: a 16-byte header (u16 version at 4), then
    [u32 length][u32 crc][u64 entry id (version 2)][data] records, then the zeros the file was
    preallocated with."""
    raw = path.read_bytes()
    (version,) = struct.unpack_from("<H", raw, 4)
    header = 16 if version >= 2 else 8
    offsets, pos = [], 16
    while pos + header <= len(raw) and any(raw[pos : pos + header]):
        (length,) = struct.unpack_from("<I", raw, pos)
        offsets.append(pos)
        pos += header + length
    return offsets


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x5A
    path.write_bytes(bytes(raw))


def _read_payloads(url: str) -> list[bytes]:
    return [data for data, _ in read_all(url, TOPIC)]


@pytest.mark.parametrize("stop", ["kill9", "clean"])
def test_a_flipped_byte_costs_exactly_one_message(broker: BrokerProcess, stop: str) -> None:
    client = process_client(broker.url)
    client.subscribe(TOPIC, "sub", initial_position=EARLIEST)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(20)]
    client.close()
    if stop == "kill9":
        broker.kill()  # no index file: recovery scans the records
    else:
        broker.stop()  # the index file is written: reads find the damage
    (path,) = _ledger_files(broker, TOPIC)
    _flip(path, _record_offsets(path)[10] + 17)  # a byte of message 10's data
    broker.start()
    expected = [f"m{i}".encode() for i in range(20) if i != 10]
    stored = read_all(broker.url, TOPIC)
    assert [d for d, _ in stored] == expected
    # the others keep their ids
    assert [m for _, m in stored] == [
        (m.ledger_id(), m.entry_id()) for i, m in enumerate(ids) if i != 10
    ]
    client = process_client(broker.url)
    consumer = client.subscribe(TOPIC, "sub")
    assert drain(consumer) == expected
    client.close()
    assert "entry 10" in broker.log() and "damaged" in broker.log()


def test_a_damaged_file_header_loses_nothing(broker: BrokerProcess) -> None:
    client = process_client(broker.url)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    client.subscribe(TOPIC, "holder", initial_position=EARLIEST)
    for i in range(20):
        producer.send(f"m{i}".encode())
    client.close()
    broker.kill()
    (path,) = _ledger_files(broker, TOPIC)
    _flip(path, 2)
    broker.start()
    assert _read_payloads(broker.url) == [f"m{i}".encode() for i in range(20)]
    assert "damaged file header" in broker.log()


def test_a_torn_tail_is_cut_and_kept_in_quarantine(broker: BrokerProcess) -> None:
    client = process_client(broker.url)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    client.subscribe(TOPIC, "holder", initial_position=EARLIEST)
    for i in range(5):
        producer.send(f"m{i}".encode())
    client.close()
    broker.kill()
    (path,) = _ledger_files(broker, TOPIC)
    with open(path, "ab") as f:
        f.write(struct.pack("<II", 1000, 12345) + b"partial record")  # a write cut short
    broker.start()
    assert _read_payloads(broker.url) == [f"m{i}".encode() for i in range(5)]
    kept = list((path.parent / "quarantine").iterdir())
    assert len(kept) == 1 and kept[0].read_bytes().endswith(b"partial record")
    assert "torn tail" in broker.log()
